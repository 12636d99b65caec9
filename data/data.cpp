// Sequences, JSONL reading and writing, in-memory datasets and the batch planner.
#include "data/data.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "data/shards.h"
#include "runtime/error.h"
#include "runtime/fileio.h"
#include "runtime/splitmix.h"

namespace dflash {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

void check_id(int64_t id, size_t pos, int64_t vocab_size, const std::string& where) {
  DF_CHECK(id >= 0 && id < vocab_size,
           where << ": input_ids[" << pos << "] = " << id << " is outside the target's vocabulary [0, " << vocab_size
                 << "); fix: tokenize with the target's tokenizer (vocab size " << vocab_size << ")");
}

void check_mask(int64_t m, size_t pos, const std::string& where) {
  DF_CHECK(m == 0 || m == 1, where << ": loss_mask[" << pos << "] = " << m
                                   << "; fix: loss_mask values must be 0 (not trained on) or 1 (trained on)");
}

void check_shape(size_t ids, size_t mask, const std::string& where) {
  DF_CHECK(ids == mask, where << ": input_ids has " << ids << " tokens but loss_mask has " << mask
                              << "; fix: the two arrays must have equal length");
  DF_CHECK(ids > 0, where << ": input_ids is empty; fix: drop the line or give it at least one token");
}

// The array under `key` of a JSONL line's object, refused when missing or not an array.
const json& array_at(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  DF_CHECK(it != obj.end(), where << ": missing key \"" << key
                                  << "\"; fix: every line needs \"input_ids\" and \"loss_mask\" arrays of equal length");
  DF_CHECK(it->is_array(), where << ": \"" << key << "\" is a JSON " << it->type_name()
                                 << ", not an array of integers; fix: write it as [1, 2, 3]");
  return *it;
}

// A JSON integer as int64; refuses floats (1.5, 1.0), strings ("7"), null, booleans and objects.
int64_t integer_at(const json& arr, size_t pos, const char* key, const std::string& where) {
  const json& v = arr[pos];
  DF_CHECK(v.is_number_integer(), where << ": " << key << "[" << pos << "] is " << v.dump() << " (a JSON "
                                        << v.type_name() << "), not an integer; fix: write plain integers, "
                                        << "without quotes or decimals");
  DF_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(INT64_MAX),
           where << ": " << key << "[" << pos << "] = " << v.dump() << " is far out of range; fix: write token ids "
                 << "in [0, vocab size) and loss_mask values 0 or 1");
  return v.get<int64_t>();
}

Sequence parse_line(const std::string& line, int64_t vocab_size, const std::string& where) {
  json obj;
  try {
    obj = json::parse(line);
  } catch (const json::exception& e) {
    DF_FAIL(where << ": invalid JSON (" << e.what() << "); fix: each line must be one JSON object like "
                  << "{\"input_ids\": [1, 2, 3], \"loss_mask\": [0, 1, 1]}");
  }
  DF_CHECK(obj.is_object(), where << ": the line is a JSON " << obj.type_name() << ", not an object; fix: each line "
                                  << "must be one object like {\"input_ids\": [1, 2, 3], \"loss_mask\": [0, 1, 1]}");
  const json& ids = array_at(obj, "input_ids", where);
  const json& mask = array_at(obj, "loss_mask", where);
  check_shape(ids.size(), mask.size(), where);
  Sequence s;
  s.input_ids.resize(ids.size());
  s.loss_mask.resize(mask.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t id = integer_at(ids, i, "input_ids", where);
    check_id(id, i, vocab_size, where);
    s.input_ids[i] = int32_t(id);
  }
  for (size_t i = 0; i < mask.size(); ++i) {
    int64_t m = integer_at(mask, i, "loss_mask", where);
    check_mask(m, i, where);
    s.loss_mask[i] = uint8_t(m);
  }
  return s;
}

}  // namespace

Sequence truncate_sequence(const Sequence& s, int64_t max_length) {
  size_t n = size_t(std::min(s.length(), std::max<int64_t>(max_length, 0)));
  return Sequence{{s.input_ids.begin(), s.input_ids.begin() + n}, {s.loss_mask.begin(), s.loss_mask.begin() + n}};
}

void check_sequence(const Sequence& s, int64_t vocab_size, const std::string& where) {
  check_shape(s.input_ids.size(), s.loss_mask.size(), where);
  for (size_t i = 0; i < s.input_ids.size(); ++i) check_id(s.input_ids[i], i, vocab_size, where);
  for (size_t i = 0; i < s.loss_mask.size(); ++i) check_mask(s.loss_mask[i], i, where);
}

std::vector<Sequence> read_jsonl(const fs::path& path, int64_t vocab_size) {
  const std::string text = read_file_text(path);
  std::vector<Sequence> out;
  size_t begin = 0;
  for (int64_t line_no = 1; begin < text.size(); ++line_no) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(parse_line(line, vocab_size, path.string() + ":" + std::to_string(line_no)));
  }
  DF_CHECK(!out.empty(), path.string() << ": no sequences (the file is empty or has only blank lines); fix: "
                                       << "write one {\"input_ids\": [...], \"loss_mask\": [...]} object per line");
  return out;
}

void write_jsonl(const fs::path& path, const std::vector<Sequence>& sequences) {
  write_file_atomic(path, [&](const ByteSink& sink) {
    std::string buf;
    auto put_array = [&](const char* key, auto const& values) {
      buf += "\"";
      buf += key;
      buf += "\": [";
      for (size_t i = 0; i < values.size(); ++i) {
        if (i) buf += ", ";
        buf += std::to_string(int64_t(values[i]));
      }
      buf += "]";
    };
    for (const Sequence& s : sequences) {
      buf += "{";
      put_array("input_ids", s.input_ids);
      buf += ", ";
      put_array("loss_mask", s.loss_mask);
      buf += "}\n";
      if (buf.size() > (1u << 20)) {
        sink(buf.data(), buf.size());
        buf.clear();
      }
    }
    sink(buf.data(), buf.size());
  });
}

std::vector<int64_t> Dataset::lengths() const {
  std::vector<int64_t> out(static_cast<size_t>(size()));
  for (int64_t i = 0; i < size(); ++i) out[size_t(i)] = length(i);
  return out;
}

void Dataset::check_index(int64_t i) const {
  DF_CHECK(i >= 0 && i < size(), source().string() << ": sequence " << i << " is out of range; the dataset has "
                                                    << size() << " sequences");
}

MemoryDataset::MemoryDataset(std::vector<Sequence> sequences, int64_t vocab_size, fs::path source)
    : sequences_(std::move(sequences)), vocab_size_(vocab_size), source_(std::move(source)) {
  for (size_t i = 0; i < sequences_.size(); ++i)
    check_sequence(sequences_[i], vocab_size_, source_.string() + ": sequence " + std::to_string(i));
}

int64_t MemoryDataset::length(int64_t i) const {
  check_index(i);
  return sequences_[size_t(i)].length();
}

Sequence MemoryDataset::get(int64_t i) const {
  check_index(i);
  return sequences_[size_t(i)];
}

std::unique_ptr<Dataset> open_dataset(const fs::path& path, int64_t vocab_size) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  DF_CHECK(fs::exists(st), "data path '" << path.string() << "' does not exist; fix: point data.train / data.eval at "
                                         << "a JSONL file or at a shard directory written by `dflash-train prepare`");
  if (fs::is_directory(st)) return std::make_unique<TokenDataset>(path, vocab_size);
  char magic[6] = {};
  std::ifstream(path, std::ios::binary).read(magic, 6);
  DF_CHECK(std::string(magic, 6) != "DFLTOK" && std::string(magic, 6) != "DFLHID",
           "data path '" << path.string() << "' is a single shard file, not JSONL; fix: point at the shard "
                         << "directory that holds it and its index.json ('" << path.parent_path().string() << "')");
  return std::make_unique<MemoryDataset>(read_jsonl(path, vocab_size), vocab_size, path);
}

namespace {
}  // namespace

uint64_t derive_seed(uint64_t base, uint64_t a, uint64_t b) {
  return splitmix64(splitmix64(splitmix64(base) ^ a) ^ b);
}

uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  // Accepting r >= 2^64 mod n leaves a multiple of n equally likely values.
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    uint64_t r = rng();
    if (r >= threshold) return r % n;
  }
}

// ---- batch planner ----

json PlannerState::to_json() const {
  json b = json::array();
  for (const Bucket& x : buckets) b.push_back({{"seq", x.seq}, {"anchors", x.anchors}, {"batch", x.batch}});
  return {{"epoch", epoch}, {"cursor", cursor}, {"emitted", emitted}, {"pending", pending},
          {"seed", seed},   {"sequences", sequences}, {"buckets", b}};
}

PlannerState PlannerState::from_json(const json& j, const std::string& source) {
  PlannerState s;
  try {
    s.epoch = j.at("epoch").get<int64_t>();
    s.cursor = j.at("cursor").get<int64_t>();
    s.emitted = j.at("emitted").get<int64_t>();
    s.pending = j.at("pending").get<std::vector<std::vector<int64_t>>>();
    s.seed = j.at("seed").get<uint64_t>();
    s.sequences = j.at("sequences").get<int64_t>();
    for (const json& b : j.at("buckets"))
      s.buckets.push_back({b.at("seq").get<int64_t>(), b.at("anchors").get<int64_t>(), b.at("batch").get<int64_t>()});
  } catch (const json::exception& e) {
    DF_FAIL(source << ": the saved data position is unreadable (" << e.what()
                   << "); fix: the file is damaged; resume from an older checkpoint or start a fresh run");
  }
  return s;
}

BatchPlanner::BatchPlanner(std::vector<int64_t> lengths, std::vector<Bucket> buckets, OverflowPolicy overflow,
                           uint64_t shuffle_seed, std::string source, const std::vector<uint8_t>& no_anchor)
    : lengths_(std::move(lengths)), buckets_(std::move(buckets)), seed_(shuffle_seed), source_(std::move(source)) {
  DF_CHECK(!buckets_.empty(), source_ << ": the batch planner got no buckets; fix: add a [[buckets]] entry");
  DF_CHECK(no_anchor.empty() || no_anchor.size() == lengths_.size(),
           source_ << ": the batch planner got " << no_anchor.size() << " no-anchor flags for " << lengths_.size()
                   << " sequences; fix: screen the same data set (screen_dataset)");
  int largest = 0;
  for (size_t b = 1; b < buckets_.size(); ++b)
    if (buckets_[b].seq > buckets_[size_t(largest)].seq) largest = int(b);
  const int64_t max_seq = buckets_[size_t(largest)].seq;
  bucket_of_.resize(lengths_.size());
  for (size_t i = 0; i < lengths_.size(); ++i) {
    int b = smallest_bucket_for(buckets_, lengths_[i]);
    if (b < 0) {
      DF_CHECK(overflow != OverflowPolicy::error,
               source_ << ": sequence " << i << " has " << lengths_[i] << " tokens, more than the largest bucket (seq "
                       << max_seq << "); fix: add a [[buckets]] entry with seq >= " << lengths_[i]
                       << ", or set data.overflow = \"truncate\" or \"skip\"");
      if (overflow == OverflowPolicy::truncate) {
        b = largest;
        ++truncated_;
      } else {
        ++skipped_;
      }
    }
    if (b >= 0 && !no_anchor.empty() && no_anchor[i]) {
      if (lengths_[i] > max_seq) --truncated_;
      ++no_anchor_;
      b = -1;
    }
    bucket_of_[i] = b;
  }
  DF_CHECK(skipped_ + no_anchor_ < int64_t(lengths_.size()),
           source_ << ": no sequence to train on (" << lengths_.size() << " sequences, " << skipped_
                   << " skipped as longer than the largest bucket, seq " << max_seq << ", " << no_anchor_
                   << " without a valid anchor, i.e. no position p <= length - block size with loss_mask[p] = 1); "
                   << "fix: add data with trained-on (loss_mask = 1) tokens, a larger [[buckets]] entry, data.overflow "
                   << "= \"truncate\", or a smaller drafter.block_size");
  start_epoch(0);
}

bool BatchPlanner::is_truncated(int64_t sequence) const {
  int b = bucket_of_[size_t(sequence)];
  return b >= 0 && lengths_[size_t(sequence)] > buckets_[size_t(b)].seq;
}

std::vector<int64_t> BatchPlanner::permutation(int64_t epoch) const {
  std::vector<int64_t> p(lengths_.size());
  std::iota(p.begin(), p.end(), int64_t(0));
  std::mt19937_64 rng(derive_seed(seed_, uint64_t(epoch)));
  for (size_t i = p.size(); i > 1; --i) std::swap(p[i - 1], p[size_t(uniform_below(rng, i))]);
  return p;
}

void BatchPlanner::start_epoch(int64_t epoch) {
  epoch_ = epoch;
  cursor_ = 0;
  emitted_ = 0;
  order_ = permutation(epoch);
  pending_.assign(buckets_.size(), {});
}

MicroBatch BatchPlanner::emit(int bucket) {
  MicroBatch mb{bucket, std::move(pending_[size_t(bucket)]), epoch_, emitted_++};
  pending_[size_t(bucket)].clear();
  return mb;
}

MicroBatch BatchPlanner::next() {
  for (;;) {
    while (cursor_ < int64_t(order_.size())) {
      int64_t s = order_[size_t(cursor_++)];
      int b = bucket_of_[size_t(s)];
      if (b < 0) continue;
      pending_[size_t(b)].push_back(s);
      if (int64_t(pending_[size_t(b)].size()) == buckets_[size_t(b)].batch) return emit(b);
    }
    for (size_t b = 0; b < pending_.size(); ++b)
      if (!pending_[b].empty()) return emit(int(b));
    start_epoch(epoch_ + 1);
  }
}

PlannerState BatchPlanner::state() const {
  return {epoch_, cursor_, emitted_, pending_, seed_, int64_t(lengths_.size()), buckets_};
}

void BatchPlanner::restore(const PlannerState& s) {
  const std::string fix = "; fix: resume with the data, buckets and data.shuffle_seed of the saved run, or start a "
                          "fresh run (checkpoint.resume = false)";
  DF_CHECK(s.sequences == int64_t(lengths_.size()), source_ << ": the saved data position was made for " << s.sequences
                                                            << " sequences, but the data have " << lengths_.size() << fix);
  DF_CHECK(s.seed == seed_, source_ << ": the saved data position was made with shuffle seed " << s.seed
                                    << ", but data.shuffle_seed is " << seed_ << fix);
  bool same_buckets = s.buckets.size() == buckets_.size();
  for (size_t b = 0; same_buckets && b < buckets_.size(); ++b)
    same_buckets = s.buckets[b].seq == buckets_[b].seq && s.buckets[b].batch == buckets_[b].batch;
  std::string saved, now;
  for (const Bucket& b : s.buckets) saved += " " + b.str();
  for (const Bucket& b : buckets_) now += " " + b.str();
  DF_CHECK(same_buckets, source_ << ": the saved data position was made for buckets" << saved << ", but the buckets are"
                                 << now << fix);
  bool sane = s.epoch >= 0 && s.cursor >= 0 && s.cursor <= s.sequences && s.emitted >= 0 &&
              s.pending.size() == buckets_.size();
  for (size_t b = 0; sane && b < s.pending.size(); ++b) {
    sane = int64_t(s.pending[b].size()) < buckets_[b].batch;
    for (int64_t i : s.pending[b]) sane = sane && i >= 0 && i < s.sequences && bucket_of_[size_t(i)] == int(b);
  }
  DF_CHECK(sane, source_ << ": the saved data position is inconsistent (epoch " << s.epoch << ", cursor " << s.cursor
                         << ", pending groups that do not fit their buckets); fix: if the data changed since the "
                         << "checkpoint (one without a data fingerprint cannot tell), resume with the original data or "
                         << "set data.allow_changed = true; otherwise the file is damaged: resume from an older "
                         << "checkpoint or start a fresh run");
  start_epoch(s.epoch);
  cursor_ = s.cursor;
  emitted_ = s.emitted;
  pending_ = s.pending;
}

}  // namespace dflash
