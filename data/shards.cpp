// Token shard directories: the atomic writer and the reader that validates every header (layout in
// docs/data-formats.md; hidden-state shards are in data/hidden_shards.cpp).
#include "data/shards.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>

#include "data/shard_files.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace dflash {

static_assert(std::endian::native == std::endian::little, "shard files are little-endian; so is the host");

using namespace shard_files;

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

}  // namespace dflash
