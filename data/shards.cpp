// Token and hidden-state shard directories: atomic writers and readers that validate every header
// (layouts in docs/data-formats.md).
#include "data/shards.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/dtype.h"
#include "runtime/error.h"

namespace dflash {

static_assert(std::endian::native == std::endian::little, "shard files are little-endian; so is the host");

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr char kTokenMagic[8] = {'D', 'F', 'L', 'T', 'O', 'K', '\0', '\1'};
constexpr char kHiddenMagic[8] = {'D', 'F', 'L', 'H', 'I', 'D', '\0', '\1'};
constexpr uint64_t kHeaderBytes = 64;
const char* kPrepareFix = "re-run `dflash-train prepare`";
const char* kHiddenFix = "re-run `dflash-train hidden`";

template <class T>
T load(const uint8_t* p, uint64_t at) {
  T v;
  std::memcpy(&v, p + at, sizeof(T));
  return v;
}

template <class T>
void store(std::vector<uint8_t>& out, uint64_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof(T));
}

std::string shard_name(const char* stem, size_t k) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s-%05zu.bin", stem, k);
  return buf;
}

// The 8 magic bytes as text, unprintable bytes as \xNN.
std::string magic_str(const uint8_t* p) {
  std::string s;
  char buf[8];
  for (int i = 0; i < 8; ++i) {
    if (p[i] >= 0x20 && p[i] < 0x7f) {
      s += char(p[i]);
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02x", p[i]);
      s += buf;
    }
  }
  return s;
}

// a * b + c, or UINT64_MAX when it overflows (no real file is that large).
uint64_t mul_add(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r)) return UINT64_MAX;
  return r;
}

// Removes stem-*.bin files of an earlier run that the new index does not list.
void remove_stale(const fs::path& dir, const std::string& stem, const std::set<std::string>& keep) {
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name.starts_with(stem + "-") && name.ends_with(".bin") && !keep.count(name)) stale.push_back(e.path());
  }
  for (const fs::path& p : stale) fs::remove(p);
}

// Creates the output directory and removes its index, so that until the new index is written
// the directory refuses to open instead of mixing old and new shards.
void start_output_dir(const fs::path& dir, const std::string& what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  DF_CHECK(!ec && fs::is_directory(dir), what << ": cannot create the directory '" << dir.string() << "': "
                                              << (ec ? ec.message() : "a file is in the way")
                                              << "; fix: check the path and its permissions");
  fs::remove(dir / "index.json", ec);
}

// The shard directory's index.json, checked for its format name and version.
json read_index(const fs::path& dir, const std::string& what, const char* format, uint32_t version, const char* fix) {
  const fs::path path = dir / "index.json";
  DF_CHECK(fs::is_directory(dir), what << " '" << dir.string() << "' is not a directory; fix: point at the directory "
                                       << "written by `dflash-train`");
  DF_CHECK(fs::exists(path), what << " '" << dir.string() << "': there is no index.json (an interrupted run leaves "
                                  << "none); fix: " << fix);
  json j;
  try {
    j = json::parse(read_file_text(path));
    DF_CHECK(j.value("format", "") == format, path.string() << ": format is '" << j.value("format", "")
                                                            << "', expected '" << format << "'; fix: " << fix);
    DF_CHECK(j.at("version").get<uint32_t>() == version,
             path.string() << ": version is " << j.at("version").dump() << ", expected " << version
                           << " (the version this build reads); fix: " << fix << " with this build");
    (void)j.at("sequences").get<int64_t>();
    for (const json& s : j.at("shards")) {
      (void)s.at("file").get<std::string>();
      (void)s.at("first_sequence").get<int64_t>();
      (void)s.at("sequences").get<int64_t>();
    }
  } catch (const json::exception& e) {
    DF_FAIL(path.string() << ": malformed (" << e.what() << "); fix: " << fix);
  }
  return j;
}

// Opens a shard the index lists; checks the size, magic and version common to both formats.
MappedFile open_shard(const fs::path& dir, const json& entry, int64_t expect_first, const char* magic,
                      uint32_t version, const char* fix, std::string& f) {
  const fs::path path = dir / entry.at("file").get<std::string>();
  f = path.string();
  DF_CHECK(fs::exists(path), dir.string() << "/index.json lists '" << entry.at("file").get<std::string>()
                                          << "', which does not exist; fix: " << fix);
  DF_CHECK(entry.at("first_sequence").get<int64_t>() == expect_first,
           dir.string() << "/index.json: first_sequence of '" << entry.at("file").get<std::string>() << "' is "
                        << entry.at("first_sequence").get<int64_t>() << ", expected " << expect_first
                        << " (the shards before it hold that many); fix: " << fix);
  MappedFile file(path);
  const uint8_t* p = file.data();
  DF_CHECK(file.size() >= kHeaderBytes, f << ": the file is " << file.size() << " bytes, shorter than the "
                                          << kHeaderBytes << "-byte header; it is truncated; fix: " << fix);
  DF_CHECK(std::memcmp(p, magic, 8) == 0, f << ": magic is '" << magic_str(p) << "', expected '"
                                            << magic_str(reinterpret_cast<const uint8_t*>(magic))
                                            << "'; it is not this kind of shard; fix: " << fix);
  DF_CHECK(load<uint32_t>(p, 8) == version, f << ": version is " << load<uint32_t>(p, 8) << ", expected " << version
                                              << " (the version this build reads); fix: " << fix << " with this build");
  return file;
}

#define DF_FIELD(found, expected, what)                                                                      \
  DF_CHECK((found) == (expected), f << ": " << what << " is " << (found) << ", expected " << (expected) << "; fix: " \
                                    << fix)

}  // namespace

// ---- token shards ----

void write_token_shards(const fs::path& dir, const std::vector<Sequence>& sequences, int64_t vocab_size,
                        int64_t sequences_per_shard) {
  DF_CHECK(sequences_per_shard >= 1, "write_token_shards: sequences_per_shard is " << sequences_per_shard
                                                                                   << "; fix: use at least 1");
  for (size_t i = 0; i < sequences.size(); ++i)
    check_sequence(sequences[i], vocab_size, "write_token_shards: sequence " + std::to_string(i));
  start_output_dir(dir, "write_token_shards");
  json shards = json::array();
  std::set<std::string> names;
  uint64_t total_tokens = 0;
  for (size_t first = 0; first < sequences.size(); first += size_t(sequences_per_shard)) {
    const size_t n = std::min(sequences.size() - first, size_t(sequences_per_shard));
    std::vector<uint8_t> head(kHeaderBytes + 8 * (n + 1), 0);
    uint64_t t = 0;
    for (size_t k = 0; k <= n; ++k) {
      store<uint64_t>(head, kHeaderBytes + 8 * k, t);
      if (k < n) t += uint64_t(sequences[first + k].length());
    }
    std::memcpy(head.data(), kTokenMagic, 8);
    store<uint32_t>(head, 8, kTokenShardVersion);
    store<uint32_t>(head, 12, uint32_t(kHeaderBytes));
    store<uint64_t>(head, 16, n);
    store<uint64_t>(head, 24, t);
    store<uint64_t>(head, 32, uint64_t(vocab_size));
    store<uint64_t>(head, 40, first);
    const std::string name = shard_name("tokens", first / size_t(sequences_per_shard));
    write_file_atomic(dir / name, [&](const ByteSink& sink) {
      sink(head.data(), head.size());
      for (size_t k = 0; k < n; ++k) sink(sequences[first + k].input_ids.data(), 4 * sequences[first + k].input_ids.size());
      for (size_t k = 0; k < n; ++k) sink(sequences[first + k].loss_mask.data(), sequences[first + k].loss_mask.size());
    });
    shards.push_back({{"file", name}, {"first_sequence", first}, {"sequences", n}, {"tokens", t}});
    names.insert(name);
    total_tokens += t;
  }
  json index = {{"format", "dflash-token-shards"}, {"version", kTokenShardVersion}, {"vocab_size", vocab_size},
                {"sequences", sequences.size()},   {"tokens", total_tokens},          {"shards", shards}};
  write_file_atomic(dir / "index.json", index.dump(2) + "\n");
  remove_stale(dir, "tokens", names);
}

TokenDataset::TokenDataset(const fs::path& dir, int64_t vocab_size) : dir_(dir), vocab_size_(vocab_size) {
  const char* fix = kPrepareFix;
  const json index = read_index(dir, "token shards", "dflash-token-shards", kTokenShardVersion, fix);
  std::string f = (dir / "index.json").string();
  int64_t index_vocab = 0, index_tokens = 0;
  try {
    index_vocab = index.at("vocab_size").get<int64_t>();
    index_tokens = index.at("tokens").get<int64_t>();
    for (const json& e : index.at("shards")) (void)e.at("tokens").get<int64_t>();
  } catch (const json::exception& e) {
    DF_FAIL(f << ": malformed (" << e.what() << "); fix: " << fix);
  }
  DF_CHECK(index_vocab == vocab_size, f << ": vocab_size is " << index_vocab << ", expected " << vocab_size
                                        << " (the target's); the data were tokenized for another target; fix: "
                                        << fix << " with this target's tokenizer");
  for (const json& entry : index.at("shards")) {
    Shard s;
    s.file = open_shard(dir, entry, total_sequences_, kTokenMagic, kTokenShardVersion, fix, f);
    const uint8_t* p = s.file.data();
    const uint64_t n = load<uint64_t>(p, 16), t = load<uint64_t>(p, 24);
    DF_FIELD(load<uint32_t>(p, 12), kHeaderBytes, "header_bytes");
    DF_CHECK(int64_t(load<uint64_t>(p, 32)) == vocab_size,
             f << ": vocab_size is " << load<uint64_t>(p, 32) << ", expected " << vocab_size
               << " (the target's); fix: " << fix << " with this target's tokenizer");
    DF_FIELD(load<uint64_t>(p, 40), uint64_t(total_sequences_), "first_sequence");
    DF_FIELD(n, entry.at("sequences").get<uint64_t>(), "sequence_count (index.json says otherwise)");
    DF_FIELD(t, entry.at("tokens").get<uint64_t>(), "total_tokens (index.json says otherwise)");
    const uint64_t expect_size = mul_add(5, t, mul_add(8, mul_add(1, n, 1), kHeaderBytes));
    DF_CHECK(s.file.size() == expect_size, f << ": the file is " << s.file.size() << " bytes, expected " << expect_size
                                             << " for sequence_count " << n << " and total_tokens " << t
                                             << "; it is truncated or damaged; fix: " << fix);
    s.offsets = p + kHeaderBytes;
    s.ids = s.offsets + 8 * (n + 1);
    s.mask = s.ids + 4 * t;
    DF_FIELD(load<uint64_t>(s.offsets, 0), 0u, "offsets[0]");
    for (uint64_t k = 1; k <= n; ++k) {
      uint64_t prev = load<uint64_t>(s.offsets, 8 * (k - 1)), cur = load<uint64_t>(s.offsets, 8 * k);
      DF_CHECK(cur > prev && cur <= t, f << ": offsets[" << k << "] is " << cur << ", expected greater than offsets["
                                         << (k - 1) << "] = " << prev << " and at most total_tokens " << t
                                         << "; fix: " << fix);
    }
    DF_FIELD(load<uint64_t>(s.offsets, 8 * n), t, "offsets[" << n << "] (the end of the last sequence)");
    s.first = total_sequences_;
    s.count = int64_t(n);
    s.tokens = int64_t(t);
    total_sequences_ += s.count;
    total_tokens_ += s.tokens;
    shards_.push_back(std::move(s));
  }
  f = (dir / "index.json").string();
  DF_CHECK(total_sequences_ == index.at("sequences").get<int64_t>() && total_tokens_ == index_tokens,
           f << ": sequences is " << index.at("sequences").get<int64_t>() << " and tokens " << index_tokens
             << ", but its shards hold " << total_sequences_ << " and " << total_tokens_ << "; fix: " << fix);
}

const TokenDataset::Shard& TokenDataset::locate(int64_t i, int64_t& local) const {
  check_index(i);
  auto it = std::upper_bound(shards_.begin(), shards_.end(), i, [](int64_t v, const Shard& s) { return v < s.first; });
  const Shard& s = *(it - 1);
  local = i - s.first;
  return s;
}

int64_t TokenDataset::length(int64_t i) const {
  int64_t k;
  const Shard& s = locate(i, k);
  return int64_t(load<uint64_t>(s.offsets, 8 * uint64_t(k + 1)) - load<uint64_t>(s.offsets, 8 * uint64_t(k)));
}

Sequence TokenDataset::get(int64_t i) const {
  int64_t k;
  const Shard& s = locate(i, k);
  const uint64_t begin = load<uint64_t>(s.offsets, 8 * uint64_t(k)), end = load<uint64_t>(s.offsets, 8 * uint64_t(k + 1));
  Sequence seq;
  seq.input_ids.resize(end - begin);
  seq.loss_mask.resize(end - begin);
  std::memcpy(seq.input_ids.data(), s.ids + 4 * begin, 4 * (end - begin));
  std::memcpy(seq.loss_mask.data(), s.mask + begin, end - begin);
  bool bad = false;
  for (size_t j = 0; j < seq.input_ids.size(); ++j)
    bad |= uint32_t(seq.input_ids[j]) >= uint64_t(vocab_size_) || seq.loss_mask[j] > 1;
  if (bad) {
    check_sequence(seq, vocab_size_, s.file.path().string() + ": sequence " + std::to_string(i) +
                                         " is damaged (" + kPrepareFix + ")");
  }
  return seq;
}

// ---- hidden-state shards ----

const char* hidden_dtype_name(HiddenDType t) { return t == HiddenDType::bf16 ? "bf16" : "f32"; }

namespace {
uint64_t hidden_elem_size(HiddenDType t) { return t == HiddenDType::bf16 ? 2 : 4; }
uint64_t hidden_header_bytes(uint64_t n) { return (kHeaderBytes + 8 * n + 63) / 64 * 64; }

// The first element of data[0, count) that is NaN or +-Inf, or -1; the common all-finite case is
// one branch-free pass over the exponent bits.
int64_t first_nonfinite(const uint8_t* data, uint64_t count, HiddenDType dtype) {
  uint32_t any = 0;
  if (dtype == HiddenDType::f32) {
    for (uint64_t i = 0; i < count; ++i) any |= (load<uint32_t>(data, 4 * i) & 0x7f800000u) == 0x7f800000u;
  } else {
    for (uint64_t i = 0; i < count; ++i) any |= (load<uint16_t>(data, 2 * i) & 0x7f80u) == 0x7f80u;
  }
  if (!any) return -1;
  for (uint64_t i = 0; i < count; ++i) {
    bool bad = dtype == HiddenDType::f32 ? (load<uint32_t>(data, 4 * i) & 0x7f800000u) == 0x7f800000u
                                         : (load<uint16_t>(data, 2 * i) & 0x7f80u) == 0x7f80u;
    if (bad) return int64_t(i);
  }
  return -1;
}
}  // namespace

HiddenShardWriter::HiddenShardWriter(const fs::path& dir, int64_t feature_width, HiddenDType dtype, int64_t shard_bytes)
    : dir_(dir), width_(feature_width), dtype_(dtype), shard_bytes_(shard_bytes) {
  DF_CHECK(feature_width >= 1, "HiddenShardWriter '" << dir.string() << "': feature width " << feature_width
                                                     << " must be at least 1 (F*H)");
  start_output_dir(dir, "HiddenShardWriter");
}

HiddenShardWriter::HiddenShardWriter(const fs::path& dir, int64_t feature_width, HiddenDType dtype, int64_t shard_bytes,
                                     HiddenPart part)
    : HiddenShardWriter(dir, feature_width, dtype, shard_bytes) {
  part_ = part;
}

void HiddenShardWriter::append(const float* data, int64_t rows) {
  const std::string w = "HiddenShardWriter '" + dir_.string() + "'";
  DF_CHECK(!finished_, w << ": append after finish(); fix: create a new writer");
  DF_CHECK(rows >= 0, w << ": sequence " << total_ << " has " << rows << " rows; fix: pass rows >= 0");
  const uint64_t count = uint64_t(rows) * uint64_t(width_);
  const int64_t bad = first_nonfinite(reinterpret_cast<const uint8_t*>(data), count, HiddenDType::f32);
  DF_CHECK(bad < 0, w << ": sequence " << total_ << " has " << data[bad] << " at position " << bad / width_
                      << ", feature " << bad % width_ << "; fix: the target produced NaN/Inf; check its "
                      << "checkpoint, its dtype and the input tokens");
  const size_t at = payload_.size();
  payload_.resize(at + count * hidden_elem_size(dtype_));
  if (dtype_ == HiddenDType::f32) {
    std::memcpy(payload_.data() + at, data, count * 4);
  } else {
    for (uint64_t i = 0; i < count; ++i) store<uint16_t>(payload_, at + 2 * i, f32_to_bf16(data[i]));
  }
  lengths_.push_back(rows);
  ++total_;
  if (int64_t(payload_.size()) >= shard_bytes_) flush();
}

void HiddenShardWriter::flush() {
  if (lengths_.empty()) return;
  const uint64_t n = lengths_.size(), first = uint64_t(total_) - n + uint64_t(part_ ? part_->first_sequence : 0);
  std::vector<uint8_t> head(hidden_header_bytes(n), 0);
  uint64_t rows = 0;
  for (uint64_t k = 0; k < n; ++k) {
    store<uint64_t>(head, kHeaderBytes + 8 * k, uint64_t(lengths_[k]));
    rows += uint64_t(lengths_[k]);
  }
  std::memcpy(head.data(), kHiddenMagic, 8);
  store<uint32_t>(head, 8, kHiddenShardVersion);
  store<uint32_t>(head, 12, uint32_t(head.size()));
  store<uint64_t>(head, 16, n);
  store<uint64_t>(head, 24, first);
  store<uint64_t>(head, 32, uint64_t(width_));
  store<uint32_t>(head, 40, uint32_t(dtype_));
  store<uint64_t>(head, 48, rows);
  std::string name = shard_name("hidden", written_.size());
  if (part_) {
    char stem[32];
    std::snprintf(stem, sizeof stem, "hidden-p%05d", part_->rank);
    name = shard_name(stem, written_.size());
  }
  write_file_atomic(dir_ / name, [&](const ByteSink& sink) {
    sink(head.data(), head.size());
    sink(payload_.data(), payload_.size());
  });
  written_.push_back({name, int64_t(first), int64_t(n)});
  lengths_.clear();
  payload_.clear();
}

std::string HiddenShardWriter::shards_json() const {
  json shards = json::array();
  for (const Written& w : written_) shards.push_back({{"file", w.file}, {"first_sequence", w.first}, {"sequences", w.count}});
  return shards.dump();
}

void write_hidden_index(const fs::path& dir, int64_t feature_width, HiddenDType dtype,
                        const std::vector<std::string>& parts) {
  json shards = json::array();
  std::set<std::string> names;
  int64_t total = 0;
  for (const std::string& p : parts)
    for (const json& e : json::parse(p)) {
      DF_CHECK(e.at("first_sequence").get<int64_t>() == total,
               "write_hidden_index '" << dir.string() << "': shard " << e.at("file").get<std::string>() << " starts at sequence "
                                      << e.at("first_sequence").get<int64_t>() << ", expected " << total
                                      << " (the ranks' parts do not follow each other)");
      total += e.at("sequences").get<int64_t>();
      names.insert(e.at("file").get<std::string>());
      shards.push_back(e);
    }
  json index = {{"format", "dflash-hidden-shards"}, {"version", kHiddenShardVersion}, {"feature_width", feature_width},
                {"dtype", hidden_dtype_name(dtype)}, {"sequences", total}, {"shards", shards}};
  write_file_atomic(dir / "index.json", index.dump(2) + "\n");
  remove_stale(dir, "hidden", names);
}

void HiddenShardWriter::finish() {
  DF_CHECK(!finished_, "HiddenShardWriter '" << dir_.string() << "': finish() called twice");
  flush();
  if (part_) {
    finished_ = true;
    return;
  }
  json shards = json::array();
  std::set<std::string> names;
  for (const Written& w : written_) {
    shards.push_back({{"file", w.file}, {"first_sequence", w.first}, {"sequences", w.count}});
    names.insert(w.file);
  }
  json index = {{"format", "dflash-hidden-shards"}, {"version", kHiddenShardVersion}, {"feature_width", width_},
                {"dtype", hidden_dtype_name(dtype_)}, {"sequences", total_}, {"shards", shards}};
  write_file_atomic(dir_ / "index.json", index.dump(2) + "\n");
  remove_stale(dir_, "hidden", names);
  finished_ = true;
}

std::vector<int64_t> hidden_rows_for(const std::vector<int64_t>& lengths, const std::vector<Bucket>& buckets,
                                     OverflowPolicy overflow) {
  int64_t max_seq = 0;
  for (const Bucket& b : buckets) max_seq = std::max(max_seq, b.seq);
  std::vector<int64_t> rows(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i)
    rows[i] = lengths[i] <= max_seq ? lengths[i] : overflow == OverflowPolicy::skip ? 0 : max_seq;
  return rows;
}

HiddenDataset::HiddenDataset(const fs::path& dir, int64_t feature_width, std::optional<HiddenDType> dtype,
                             const std::vector<int64_t>& expected_rows)
    : dir_(dir), width_(feature_width) {
  const char* fix = kHiddenFix;
  const json index = read_index(dir, "hidden-state shards", "dflash-hidden-shards", kHiddenShardVersion, fix);
  std::string f = (dir / "index.json").string();
  std::string dtype_text;
  int64_t index_width = 0;
  try {
    index_width = index.at("feature_width").get<int64_t>();
    dtype_text = index.at("dtype").get<std::string>();
  } catch (const json::exception& e) {
    DF_FAIL(f << ": malformed (" << e.what() << "); fix: " << fix);
  }
  DF_CHECK(dtype_text == "f32" || dtype_text == "bf16", f << ": dtype is '" << dtype_text
                                                          << "', expected 'f32' or 'bf16'; fix: " << fix);
  dtype_ = dtype_text == "bf16" ? HiddenDType::bf16 : HiddenDType::f32;
  DF_CHECK(index_width == feature_width, f << ": feature_width is " << index_width << ", expected " << feature_width
                                           << " (F*H of this target and drafter's layer ids); fix: " << fix
                                           << " with this config");
  DF_CHECK(!dtype || *dtype == dtype_, f << ": dtype is " << hidden_dtype_name(dtype_) << ", expected "
                                         << hidden_dtype_name(*dtype) << "; fix: " << fix << " with this config");
  DF_CHECK(index.at("sequences").get<int64_t>() == int64_t(expected_rows.size()),
           f << ": sequences is " << index.at("sequences").get<int64_t>() << ", expected " << expected_rows.size()
             << " (the token data's sequence count); the hidden states belong to other data; fix: " << fix
             << " for these data");
  const uint64_t esize = hidden_elem_size(dtype_);
  for (const json& entry : index.at("shards")) {
    Shard s;
    s.file = open_shard(dir, entry, total_sequences_, kHiddenMagic, kHiddenShardVersion, fix, f);
    const uint8_t* p = s.file.data();
    const uint64_t n = load<uint64_t>(p, 16);
    DF_FIELD(n, entry.at("sequences").get<uint64_t>(), "sequence_count (index.json says otherwise)");
    DF_FIELD(load<uint64_t>(p, 24), uint64_t(total_sequences_), "first_sequence");
    DF_FIELD(int64_t(load<uint64_t>(p, 32)), feature_width, "feature_width");
    DF_FIELD(load<uint32_t>(p, 40), uint32_t(dtype_), "dtype (0 = f32, 1 = bf16)");
    DF_CHECK(n <= (s.file.size() - kHeaderBytes) / 8,
             f << ": the file is " << s.file.size() << " bytes, too short for the lengths of sequence_count " << n
               << " sequences; it is truncated; fix: " << fix);
    const uint64_t header = hidden_header_bytes(n);
    DF_FIELD(load<uint32_t>(p, 12), header, "header_bytes");
    s.row_start.assign(n + 1, 0);
    for (uint64_t k = 0; k < n; ++k) {
      const uint64_t len = load<uint64_t>(p, kHeaderBytes + 8 * k);
      const size_t global = size_t(total_sequences_) + k;
      DF_CHECK(global < expected_rows.size() && len == uint64_t(expected_rows[global]),
               f << ": sequence " << global << " has " << len << " rows, expected "
                 << (global < expected_rows.size() ? expected_rows[global] : 0)
                 << " (its token length, capped at the largest bucket); fix: " << fix << " for these data and buckets");
      s.row_start[k + 1] = s.row_start[k] + int64_t(len);
    }
    const uint64_t rows = uint64_t(s.row_start[n]);
    DF_FIELD(load<uint64_t>(p, 48), rows, "total_rows (the sum of the lengths)");
    const uint64_t expect_size = mul_add(mul_add(rows, uint64_t(feature_width), 0), esize, header);
    DF_CHECK(s.file.size() == expect_size, f << ": the file is " << s.file.size() << " bytes, expected " << expect_size
                                             << " for " << rows << " rows of " << feature_width << " "
                                             << hidden_dtype_name(dtype_) << "; it is truncated or damaged; fix: " << fix);
    s.payload = p + header;
    s.first = total_sequences_;
    s.count = int64_t(n);
    total_sequences_ += s.count;
    shards_.push_back(std::move(s));
  }
  DF_CHECK(total_sequences_ == int64_t(expected_rows.size()),
           dir.string() << "/index.json: sequences is " << expected_rows.size() << ", but its shards hold "
                        << total_sequences_ << "; fix: " << fix);
}

const HiddenDataset::Shard& HiddenDataset::locate(int64_t i, int64_t& local) const {
  DF_CHECK(i >= 0 && i < total_sequences_, dir_.string() << ": sequence " << i << " is out of range; the hidden "
                                                         << "states hold " << total_sequences_ << " sequences");
  auto it = std::upper_bound(shards_.begin(), shards_.end(), i, [](int64_t v, const Shard& s) { return v < s.first; });
  local = i - (it - 1)->first;
  return *(it - 1);
}

int64_t HiddenDataset::rows(int64_t i) const {
  int64_t k;
  const Shard& s = locate(i, k);
  return s.row_start[size_t(k + 1)] - s.row_start[size_t(k)];
}

void HiddenDataset::read(int64_t i, int64_t rows, float* out) const {
  int64_t k;
  const Shard& s = locate(i, k);
  const int64_t have = s.row_start[size_t(k + 1)] - s.row_start[size_t(k)];
  DF_CHECK(rows >= 0 && rows <= have, dir_.string() << ": sequence " << i << " has " << have << " hidden rows; "
                                                    << rows << " were asked for");
  const uint64_t esize = hidden_elem_size(dtype_), count = uint64_t(rows) * uint64_t(width_);
  const uint8_t* src = s.payload + uint64_t(s.row_start[size_t(k)]) * uint64_t(width_) * esize;
  const int64_t bad = first_nonfinite(src, count, dtype_);
  if (bad >= 0) {
    const float v = dtype_ == HiddenDType::f32 ? load<float>(src, 4 * uint64_t(bad)) : bf16_to_f32(load<uint16_t>(src, 2 * uint64_t(bad)));
    DF_FAIL(s.file.path().string() << ": sequence " << i << " has " << v << " at position " << bad / width_
                                   << ", feature " << bad % width_ << "; fix: " << kHiddenFix
                                   << " (the target produced NaN/Inf, or the file is damaged)");
  }
  if (dtype_ == HiddenDType::f32) {
    std::memcpy(out, src, count * 4);
  } else {
    for (uint64_t j = 0; j < count; ++j) out[j] = bf16_to_f32(load<uint16_t>(src, 2 * j));
  }
}

std::vector<float> HiddenDataset::get(int64_t i) const {
  std::vector<float> out(size_t(rows(i) * width_));
  read(i, rows(i), out.data());
  return out;
}

void fill_hidden_batch(const HiddenDataset& hidden, const std::vector<int64_t>& sequences, int64_t S, int64_t B,
                       std::span<float> out) {
  const int64_t W = hidden.feature_width();
  DF_CHECK(int64_t(out.size()) == B * S * W && int64_t(sequences.size()) <= B,
           "fill_hidden_batch: " << sequences.size() << " sequences into a (" << B << ", " << S << ", " << W
                                 << ") buffer of " << out.size() << " floats; fix: size the buffer B*S*F*H and pass "
                                 << "at most B sequences");
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t b = 0; b < sequences.size(); ++b)
    hidden.read(sequences[b], std::min(S, hidden.rows(sequences[b])), out.data() + int64_t(b) * S * W);
}

}  // namespace dflash
