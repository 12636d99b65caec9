// Binary shard directories: token shards (`dflash-train prepare`) and hidden-state shards
// (`dflash-train hidden`, offline mode). docs/data-formats.md documents both layouts byte by byte;
// every header is validated when a directory is opened.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/data.h"
#include "runtime/fileio.h"

namespace dflash {

constexpr uint32_t kTokenShardVersion = 1;
constexpr uint32_t kHiddenShardVersion = 1;

// Writes `dir`/tokens-NNNNN.bin (sequences_per_shard sequences each) and then `dir`/index.json,
// every file atomically. The old index is removed first, so an interrupted run leaves a directory
// that refuses to open rather than a mix of old and new shards. Refuses invalid sequences.
void write_token_shards(const std::filesystem::path& dir, const std::vector<Sequence>& sequences, int64_t vocab_size,
                        int64_t sequences_per_shard = 65536);

// A token-shard directory over read-only memory maps. All headers, offsets tables and the index
// are checked on open; ids and loss_mask values are checked when a sequence is read.
class TokenDataset : public Dataset {
 public:
  TokenDataset(const std::filesystem::path& dir, int64_t vocab_size);
  int64_t size() const override { return total_sequences_; }
  int64_t length(int64_t i) const override;
  Sequence get(int64_t i) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  const std::filesystem::path& source() const override { return dir_; }
  int64_t total_tokens() const { return total_tokens_; }

 private:
  struct Shard {
    MappedFile file;
    int64_t first = 0, count = 0, tokens = 0;
    const uint8_t* offsets = nullptr;  // (count + 1) u64
    const uint8_t* ids = nullptr;      // tokens i32
    const uint8_t* mask = nullptr;     // tokens u8
  };
  const Shard& locate(int64_t i, int64_t& local) const;
  std::filesystem::path dir_;
  int64_t vocab_size_ = 0, total_sequences_ = 0, total_tokens_ = 0;
  std::vector<Shard> shards_;
};

enum class HiddenDType : uint32_t { f32 = 0, bf16 = 1 };
const char* hidden_dtype_name(HiddenDType t);

// Appends one [rows, feature_width] matrix per sequence, in dataset order, and writes shards of
// about shard_bytes each (dir/hidden-NNNNN.bin, atomically); finish() writes the last shard and
// then dir/index.json. Without finish() the directory has no index and refuses to open.
// One rank's part of a directory written by several ranks: its sequences start at
// first_sequence, its files are hidden-pRRRRR-NNNNN.bin, and finish() writes no index (rank 0
// writes it with write_hidden_index once every part is done).
struct HiddenPart {
  int rank = 0;
  int64_t first_sequence = 0;
};

class HiddenShardWriter {
 public:
  HiddenShardWriter(const std::filesystem::path& dir, int64_t feature_width, HiddenDType dtype,
                    int64_t shard_bytes = int64_t(1) << 30);
  HiddenShardWriter(const std::filesystem::path& dir, int64_t feature_width, HiddenDType dtype, int64_t shard_bytes,
                    HiddenPart part);
  // data: (rows, feature_width) row-major; rows may be 0 (a sequence the trainer never reads).
  // Refuses NaN/Inf, naming the sequence and position.
  void append(const float* data, int64_t rows);
  void finish();
  int64_t sequences() const { return total_; }
  // The shards written, as index.json lists them ({"file", "first_sequence", "sequences"}).
  std::string shards_json() const;

 private:
  void flush();
  std::filesystem::path dir_;
  int64_t width_;
  HiddenDType dtype_;
  int64_t shard_bytes_;
  int64_t total_ = 0;
  bool finished_ = false;
  std::optional<HiddenPart> part_;
  std::vector<int64_t> lengths_;  // of the shard being built
  std::vector<uint8_t> payload_;  // of the shard being built
  struct Written {
    std::string file;
    int64_t first, count;
  };
  std::vector<Written> written_;
};

// The rows `dflash-train hidden` stores for each sequence: its length, capped at the largest
// bucket's seq; 0 for sequences the skip policy drops.
std::vector<int64_t> hidden_rows_for(const std::vector<int64_t>& lengths, const std::vector<Bucket>& buckets,
                                     OverflowPolicy overflow);

// index.json of a directory whose shards several ranks wrote: `parts` are their shards_json()
// in rank order; files of an earlier run that are not listed are removed.
void write_hidden_index(const std::filesystem::path& dir, int64_t feature_width, HiddenDType dtype,
                        const std::vector<std::string>& parts);

// A hidden-state shard directory, validated on open against what the trainer expects: the feature
// width F*H, the dtype (when given) and each sequence's row count (hidden_rows_for the token data).
class HiddenDataset {
 public:
  HiddenDataset(const std::filesystem::path& dir, int64_t feature_width, std::optional<HiddenDType> dtype,
                const std::vector<int64_t>& expected_rows);
  int64_t size() const { return total_sequences_; }
  int64_t rows(int64_t i) const;
  int64_t feature_width() const { return width_; }
  HiddenDType dtype() const { return dtype_; }
  // The first `rows` rows of sequence i as f32 into out (rows * feature_width floats); refuses
  // NaN/Inf, naming the file, sequence, position and feature.
  void read(int64_t i, int64_t rows, float* out) const;
  std::vector<float> get(int64_t i) const;  // all rows

 private:
  struct Shard {
    MappedFile file;
    int64_t first = 0, count = 0;
    std::vector<int64_t> row_start;  // count + 1 prefix sums of the lengths
    const uint8_t* payload = nullptr;
  };
  const Shard& locate(int64_t i, int64_t& local) const;
  std::filesystem::path dir_;
  int64_t width_ = 0, total_sequences_ = 0;
  HiddenDType dtype_ = HiddenDType::f32;
  std::vector<Shard> shards_;
};

// (B, S, feature_width) f32: row b holds the first min(rows, S) hidden rows of sequences[b];
// everything else (padding positions, unused batch rows) is 0.
void fill_hidden_batch(const HiddenDataset& hidden, const std::vector<int64_t>& sequences, int64_t S, int64_t B,
                       std::span<float> out);

}  // namespace dflash
