// Hidden-state shard directories: the atomic writer (whole files or one part of a split run) and the reader
// that validates every header (layout in docs/data-formats.md; token shards are in data/shards.cpp).
#include <algorithm>
#include <bit>
#include <cstring>
#include <set>

#include "data/shard_files.h"
#include "data/shards.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace dflash {

static_assert(std::endian::native == std::endian::little, "shard files are little-endian; so is the host");

using namespace shard_files;

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
