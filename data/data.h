// Training data on the host: sequences, the JSONL input format, datasets (JSONL in memory or token
// shards), and the deterministic, resumable plan of micro-batches over sequence-length buckets.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <random>
#include <string>
#include <vector>

#include "graphs/buckets.h"

namespace dflash {

// One training sequence; both arrays have the sequence's own length (>= 1), ids lie in
// [0, vocab_size) and loss_mask entries are 0 or 1.
struct Sequence {
  std::vector<int32_t> input_ids;
  std::vector<uint8_t> loss_mask;
  int64_t length() const { return int64_t(input_ids.size()); }
};

// The first max_length tokens of s (all of s when it is not longer).
Sequence truncate_sequence(const Sequence& s, int64_t max_length);

// Refuses a sequence that breaks Sequence's invariants; `where` starts the message (e.g. "f.jsonl:3").
void check_sequence(const Sequence& s, int64_t vocab_size, const std::string& where);

// One JSON object per line, {"input_ids": [...], "loss_mask": [...]}; blank lines are skipped and
// other keys ignored. Every problem is reported as "<path>:<line>: what; fix: how".
std::vector<Sequence> read_jsonl(const std::filesystem::path& path, int64_t vocab_size);
void write_jsonl(const std::filesystem::path& path, const std::vector<Sequence>& sequences);  // atomic

// Read-only, indexable training data; get() may be called from several threads at once.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual int64_t length(int64_t i) const = 0;
  virtual Sequence get(int64_t i) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual const std::filesystem::path& source() const = 0;  // for messages
  std::vector<int64_t> lengths() const;

 protected:
  void check_index(int64_t i) const;  // refuses i outside [0, size())
};

class MemoryDataset : public Dataset {
 public:
  MemoryDataset(std::vector<Sequence> sequences, int64_t vocab_size, std::filesystem::path source);
  int64_t size() const override { return int64_t(sequences_.size()); }
  int64_t length(int64_t i) const override;
  Sequence get(int64_t i) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  const std::filesystem::path& source() const override { return source_; }

 private:
  std::vector<Sequence> sequences_;
  int64_t vocab_size_;
  std::filesystem::path source_;
};

// A JSONL file (read and validated into memory) or a token-shard directory (`dflash-train prepare`).
std::unique_ptr<Dataset> open_dataset(const std::filesystem::path& path, int64_t vocab_size);

// A well-mixed 64-bit seed from a base seed and two counters (splitmix64), so that nearby inputs
// (seed 0 epoch 1, seed 1 epoch 0) give unrelated streams.
uint64_t derive_seed(uint64_t base, uint64_t a, uint64_t b = 0);

// Uniform in [0, n) from raw mt19937_64 output by rejection, so results are the same with every
// standard library. n >= 1.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t n);

// The sequences of one micro-batch: at most buckets[bucket].batch of them; the rest is padding.
struct MicroBatch {
  int bucket = -1;
  std::vector<int64_t> sequences;
  int64_t epoch = 0;
  int64_t index = 0;  // micro-batches emitted before this one in the same epoch
  // A seed for this micro-batch's anchors that does not depend on which worker stages it.
  uint64_t anchor_seed(uint64_t base) const { return derive_seed(base, uint64_t(epoch), uint64_t(index)); }
};

// Where a planner stands: enough to continue with exactly the same micro-batches. The
// fingerprint fields (seed, sequences, bucket shapes) refuse a state made for other data.
struct PlannerState {
  int64_t epoch = 0;
  int64_t cursor = 0;   // next position in the epoch's permutation
  int64_t emitted = 0;  // micro-batches emitted so far this epoch
  std::vector<std::vector<int64_t>> pending;  // per bucket, sequences waiting for a full group
  uint64_t seed = 0;
  int64_t sequences = 0;
  std::vector<Bucket> buckets;

  nlohmann::json to_json() const;
  static PlannerState from_json(const nlohmann::json& j, const std::string& source);
};

// Each epoch walks a seeded permutation of the dataset; a sequence joins the pending group of the
// smallest bucket that holds it, and a group is emitted as a micro-batch when it reaches the
// bucket's batch. At the end of an epoch the partial groups are emitted in bucket order.
class BatchPlanner {
 public:
  // Sequences longer than the largest bucket are truncated into it, skipped, or refused here.
  // Sequences flagged in `no_anchor` (data/screen.h) are skipped too. A set with nothing left
  // to train on is refused with the counts.
  BatchPlanner(std::vector<int64_t> lengths, std::vector<Bucket> buckets, OverflowPolicy overflow,
               uint64_t shuffle_seed, std::string source = "data", const std::vector<uint8_t>& no_anchor = {});

  MicroBatch next();
  PlannerState state() const;
  void restore(const PlannerState& state);

  // The epoch's permutation of 0..n-1 (Fisher-Yates over mt19937_64 seeded by derive_seed(seed, epoch)).
  std::vector<int64_t> permutation(int64_t epoch) const;
  int bucket_of(int64_t sequence) const { return bucket_of_[size_t(sequence)]; }  // -1: skipped
  bool is_truncated(int64_t sequence) const;
  int64_t truncated() const { return truncated_; }  // sequences truncated (each epoch)
  int64_t skipped() const { return skipped_; }      // sequences skipped as too long (each epoch)
  int64_t no_anchor() const { return no_anchor_; }  // sequences skipped for want of an anchor
  int64_t epoch() const { return epoch_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void start_epoch(int64_t epoch);
  MicroBatch emit(int bucket);

  std::vector<int64_t> lengths_;
  std::vector<Bucket> buckets_;
  uint64_t seed_;
  std::string source_;
  std::vector<int> bucket_of_;
  int64_t truncated_ = 0, skipped_ = 0, no_anchor_ = 0;
  int64_t epoch_ = 0, cursor_ = 0, emitted_ = 0;
  std::vector<int64_t> order_;
  std::vector<std::vector<int64_t>> pending_;
};

}  // namespace dflash
