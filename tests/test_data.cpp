// Data files: JSONL reading (every message), token and hidden shards (byte layout, round trips,
// every validation message on crafted files, damaged ids and loss_mask bytes; hidden shards written in
// parts by ranks), and the seeds (splitmix64, derived seeds). Planner and anchors: tests/test_data_batches.cpp.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "data/data.h"
#include "data/shards.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/splitmix.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {


// Written and read with plain iostreams, independent of the code under test.
void write_raw(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}
std::string read_raw(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void patch(const fs::path& p, size_t offset, const std::string& bytes) {
  std::string s = read_raw(p);
  REQUIRE(offset + bytes.size() <= s.size());
  s.replace(offset, bytes.size(), bytes);
  write_raw(p, s);
}
template <class T>
std::string le(T v) {
  std::string s(sizeof(T), '\0');
  for (size_t i = 0; i < sizeof(T); ++i) s[i] = char((uint64_t(v) >> (8 * i)) & 0xff);
  return s;
}
void edit_index(const fs::path& dir, const std::function<void(json&)>& edit) {
  json j = json::parse(read_raw(dir / "index.json"));
  edit(j);
  write_raw(dir / "index.json", j.dump());
}

bool same(const Sequence& a, const Sequence& b) { return a.input_ids == b.input_ids && a.loss_mask == b.loss_mask; }

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

}  // namespace

TEST_SUITE("data") {
  TEST_CASE("JSONL: blank lines skipped, other keys ignored, CRLF accepted; write_jsonl round-trips") {
    dflash::test::TempDir dir("data");
    write_raw(dir / "a.jsonl", "{\"input_ids\": [5, 0, 99], \"loss_mask\": [0, 1, 1], \"id\": \"x\"}\r\n\n  \n"
                               "{\"loss_mask\": [1], \"input_ids\": [7]}");
    auto got = read_jsonl(dir / "a.jsonl", 100);
    REQUIRE(got.size() == 2);
    CHECK(same(got[0], seq({5, 0, 99}, {0, 1, 1})));
    CHECK(same(got[1], seq({7}, {1})));
    write_jsonl(dir / "b.jsonl", got);
    CHECK(read_raw(dir / "b.jsonl") ==
          "{\"input_ids\": [5, 0, 99], \"loss_mask\": [0, 1, 1]}\n{\"input_ids\": [7], \"loss_mask\": [1]}\n");
    auto many = random_sequences(20, 3, 1000, 1, 50);
    write_jsonl(dir / "c.jsonl", many);
    auto back = read_jsonl(dir / "c.jsonl", 1000);
    REQUIRE(back.size() == many.size());
    for (size_t i = 0; i < many.size(); ++i) CHECK(same(back[i], many[i]));
  }

  TEST_CASE("JSONL: every bad line is refused with file:line, the problem and the fix") {
    dflash::test::TempDir dir("data");
    const std::string good = "{\"input_ids\": [1, 2], \"loss_mask\": [0, 1]}\n\n";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"{\"input_ids\": [1, 2", "bad.jsonl:3: invalid JSON"},
        {"[1, 2]", "bad.jsonl:3: the line is a JSON array, not an object"},
        {"{\"loss_mask\": [1]}", "bad.jsonl:3: missing key \"input_ids\"; fix: every line needs"},
        {"{\"input_ids\": [1]}", "bad.jsonl:3: missing key \"loss_mask\""},
        {"{\"input_ids\": \"1 2\", \"loss_mask\": [1]}", "\"input_ids\" is a JSON string, not an array of integers"},
        {"{\"input_ids\": [1, 1.5], \"loss_mask\": [1, 1]}", "bad.jsonl:3: input_ids[1] is 1.5 (a JSON number), not an integer"},
        {"{\"input_ids\": [\"7\"], \"loss_mask\": [1]}", "input_ids[0] is \"7\" (a JSON string), not an integer; fix: write plain"},
        {"{\"input_ids\": [null], \"loss_mask\": [1]}", "input_ids[0] is null (a JSON null), not an integer"},
        {"{\"input_ids\": [-1], \"loss_mask\": [1]}", "bad.jsonl:3: input_ids[0] = -1 is outside the target's vocabulary [0, 100); fix: tokenize with the target's tokenizer (vocab size 100)"},
        {"{\"input_ids\": [1, 2, 100], \"loss_mask\": [1, 1, 1]}", "input_ids[2] = 100 is outside the target's vocabulary [0, 100)"},
        {"{\"input_ids\": [18446744073709551615], \"loss_mask\": [1]}", "input_ids[0] = 18446744073709551615 is far out of range"},
        {"{\"input_ids\": [1, 2], \"loss_mask\": [1, 2]}", "bad.jsonl:3: loss_mask[1] = 2; fix: loss_mask values must be 0"},
        {"{\"input_ids\": [1], \"loss_mask\": [true]}", "loss_mask[0] is true (a JSON boolean), not an integer"},
        {"{\"input_ids\": [1, 2, 3], \"loss_mask\": [1, 1]}", "bad.jsonl:3: input_ids has 3 tokens but loss_mask has 2; fix: the two arrays must have equal length"},
        {"{\"input_ids\": [], \"loss_mask\": []}", "bad.jsonl:3: input_ids is empty; fix: drop the line"},
    };
    for (const auto& [line, message] : cases) {
      CAPTURE(line);
      write_raw(dir / "bad.jsonl", good + line + "\n");
      CHECK_ERROR(read_jsonl(dir / "bad.jsonl", 100), message);
    }
    write_raw(dir / "empty.jsonl", "\n \n");
    CHECK_ERROR(read_jsonl(dir / "empty.jsonl", 100), "empty.jsonl: no sequences (the file is empty");
    CHECK_ERROR(read_jsonl(dir / "missing.jsonl", 100), "missing.jsonl");
  }

  TEST_CASE("open_dataset takes a JSONL file or a shard directory; refuses a missing path or a lone shard") {
    dflash::test::TempDir dir("data");
    auto seqs = random_sequences(7, 1, 50, 1, 9);
    write_jsonl(dir / "d.jsonl", seqs);
    write_token_shards(dir / "shards", seqs, 50, 3);
    for (const fs::path& p : {dir / "d.jsonl", dir / "shards"}) {
      auto ds = open_dataset(p, 50);
      REQUIRE(ds->size() == 7);
      CHECK(ds->vocab_size() == 50);
      for (int64_t i = 0; i < 7; ++i) {
        CHECK(same(ds->get(i), seqs[size_t(i)]));
        CHECK(ds->length(i) == seqs[size_t(i)].length());
      }
      CHECK_ERROR(ds->get(7), "sequence 7 is out of range; the dataset has 7 sequences");
    }
    CHECK_ERROR(open_dataset(dir / "nope", 50), "data path '" + (dir / "nope").string() + "' does not exist");
    CHECK_ERROR(open_dataset(dir / "shards" / "tokens-00000.bin", 50), "is a single shard file, not JSONL");
    CHECK_ERROR(MemoryDataset({seq({1, 60}, {1, 1})}, 50, "mem"), "mem: sequence 0: input_ids[1] = 60 is outside");
  }

  TEST_CASE("token shards: byte layout as documented, round trip, stale shards removed") {
    dflash::test::TempDir dir("data");
    write_token_shards(dir / "s", {seq({3, 4, 5}, {0, 1, 1}), seq({9}, {1})}, 10);
    std::string expect = std::string("DFLTOK\0\1", 8) + le<uint32_t>(1) + le<uint32_t>(64) + le<uint64_t>(2) +
                         le<uint64_t>(4) + le<uint64_t>(10) + le<uint64_t>(0) + std::string(16, '\0') +
                         le<uint64_t>(0) + le<uint64_t>(3) + le<uint64_t>(4) + le<int32_t>(3) + le<int32_t>(4) +
                         le<int32_t>(5) + le<int32_t>(9) + std::string("\0\1\1\1", 4);
    CHECK(read_raw(dir / "s" / "tokens-00000.bin") == expect);
    json index = json::parse(read_raw(dir / "s" / "index.json"));
    CHECK(index["format"] == "dflash-token-shards");
    CHECK(index["sequences"] == 2);
    CHECK(index["tokens"] == 4);
    CHECK(index["shards"][0]["file"] == "tokens-00000.bin");

    auto seqs = random_sequences(11, 2, 1000, 1, 40);
    write_token_shards(dir / "r", seqs, 1000, 4);
    CHECK(fs::exists(dir / "r" / "tokens-00002.bin"));
    TokenDataset ds(dir / "r", 1000);
    REQUIRE(ds.size() == 11);
    int64_t tokens = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      CHECK(same(ds.get(int64_t(i)), seqs[i]));
      tokens += seqs[i].length();
    }
    CHECK(ds.total_tokens() == tokens);
    CHECK(ds.lengths()[5] == seqs[5].length());
    write_token_shards(dir / "r", {seqs[0]}, 1000, 4);
    CHECK(!fs::exists(dir / "r" / "tokens-00001.bin"));
    CHECK(TokenDataset(dir / "r", 1000).size() == 1);
    CHECK_ERROR(write_token_shards(dir / "x", {seq({1}, {1})}, 10, 0), "sequences_per_shard is 0");
    CHECK_ERROR(write_token_shards(dir / "x", {seq({1, 2}, {1})}, 10), "write_token_shards: sequence 0: input_ids has 2 tokens");
    write_raw(dir / "file", "x");
    CHECK_ERROR(write_token_shards(dir / "file" / "sub", {seq({1}, {1})}, 10), "write_token_shards: cannot create the directory");
    CHECK_ERROR(HiddenShardWriter(dir / "file", 4, HiddenDType::f32), "HiddenShardWriter: cannot create the directory");
  }

  TEST_CASE("token shards: every damaged header, table or index is refused naming file, field and fix") {
    dflash::test::TempDir dir("data");
    const fs::path d = dir / "s";
    const fs::path shard = d / "tokens-00000.bin";
    auto fresh = [&] { write_token_shards(d, {seq({3, 4, 5}, {0, 1, 1}), seq({9}, {1})}, 10); };
    auto check_open = [&](const std::string& message) { CHECK_ERROR(TokenDataset(d, 10), message); };
    const std::string fix = "fix: re-run `dflash-train prepare`";
    struct Patch {
      size_t offset;
      std::string bytes, message;
    };
    const std::vector<Patch> patches = {
        {0, "X", "tokens-00000.bin: magic is 'XFLTOK\\x00\\x01', expected 'DFLTOK\\x00\\x01'"},
        {8, le<uint32_t>(9), "tokens-00000.bin: version is 9, expected 1 (the version this build reads); " + fix},
        {12, le<uint32_t>(65), "header_bytes is 65, expected 64"},
        {16, le<uint64_t>(3), "sequence_count (index.json says otherwise) is 3, expected 2"},
        {24, le<uint64_t>(5), "total_tokens (index.json says otherwise) is 5, expected 4"},
        {32, le<uint64_t>(11), "tokens-00000.bin: vocab_size is 11, expected 10 (the target's)"},
        {40, le<uint64_t>(1), "first_sequence is 1, expected 0"},
        {64, le<uint64_t>(1), "offsets[0] is 1, expected 0"},
        {72, le<uint64_t>(0), "offsets[1] is 0, expected greater than offsets[0] = 0 and at most total_tokens 4"},
        {80, le<uint64_t>(3), "offsets[2] is 3, expected greater than offsets[1] = 3"},
    };
    for (const Patch& p : patches) {
      CAPTURE(p.message);
      fresh();
      patch(shard, p.offset, p.bytes);
      check_open(p.message);
    }
    fresh();
    patch(shard, 72, le<uint64_t>(2));
    patch(shard, 80, le<uint64_t>(3));
    check_open("offsets[2] (the end of the last sequence) is 3, expected 4");
    fresh();
    write_raw(shard, read_raw(shard).substr(0, 40));
    check_open("the file is 40 bytes, shorter than the 64-byte header; it is truncated; " + fix);
    fresh();
    write_raw(shard, read_raw(shard).substr(0, 100));
    check_open("tokens-00000.bin: the file is 100 bytes, expected 108 for sequence_count 2 and total_tokens 4");
    fresh();  // counts that agree with the index but not with the file size
    patch(shard, 16, le<uint64_t>(3));
    edit_index(d, [](json& j) { j["shards"][0]["sequences"] = 3; });
    check_open("the file is 108 bytes, expected 116 for sequence_count 3");
    fresh();  // a count whose table would wrap the size around 2^64 to the file's 108 bytes: refused, never read
    patch(shard, 16, le<uint64_t>((uint64_t(1) << 61) + 2));
    edit_index(d, [](json& j) { j["shards"][0]["sequences"] = (uint64_t(1) << 61) + 2; });
    check_open("the file is 108 bytes, expected 18446744073709551615 for sequence_count 2305843009213693954");
    fresh();
    CHECK_ERROR(TokenDataset(d, 12), "index.json: vocab_size is 10, expected 12 (the target's); the data were tokenized for another target");
    edit_index(d, [](json& j) { j["sequences"] = 3; });
    check_open("index.json: sequences is 3 and tokens 4, but its shards hold 2 and 4");
    edit_index(d, [](json& j) { j["shards"][0]["first_sequence"] = 1; });
    check_open("index.json: first_sequence of 'tokens-00000.bin' is 1, expected 0");
    fresh();
    edit_index(d, [](json& j) { j["version"] = 2; });
    check_open("index.json: version is 2, expected 1");
    edit_index(d, [](json& j) { j["format"] = "other"; });
    check_open("index.json: format is 'other', expected 'dflash-token-shards'");
    fresh();
    edit_index(d, [](json& j) { j.erase("tokens"); });
    check_open("index.json: malformed");
    write_raw(d / "index.json", "{");
    check_open("index.json: malformed");
    fresh();
    edit_index(d, [](json& j) { j["shards"][0]["file"] = "gone.bin"; });
    check_open("index.json lists 'gone.bin', which does not exist; " + fix);
    fs::remove(d / "index.json");
    check_open("there is no index.json (an interrupted run leaves none); " + fix);
    CHECK_ERROR(TokenDataset(shard, 10), "is not a directory");
    fresh();
    patch(shard, 64 + 24 + 4, le<int32_t>(500));
    TokenDataset damaged(d, 10);
    CHECK(same(damaged.get(1), seq({9}, {1})));
    CHECK_ERROR(damaged.get(0), "tokens-00000.bin: sequence 0 is damaged (re-run `dflash-train prepare`): input_ids[1] = 500");
    // A loss_mask byte other than 0 or 1 (sequence 1's only token: byte 64 + 3*8 + 4*4 + 3).
    fresh();
    patch(shard, 64 + 24 + 16 + 3, std::string(1, '\2'));
    TokenDataset bad_mask(d, 10);
    CHECK(same(bad_mask.get(0), seq({3, 4, 5}, {0, 1, 1})));
    CHECK_ERROR(bad_mask.get(1), "tokens-00000.bin: sequence 1 is damaged (re-run `dflash-train prepare`): loss_mask[0] = 2");
  }

  TEST_CASE("hidden shards: f32 and bf16 round trips over several shards, byte layout, partial reads, batches") {
    dflash::test::TempDir dir("data");
    const int64_t W = 6;
    const std::vector<int64_t> rows = {3, 0, 5, 1, 4};
    std::vector<std::vector<float>> mats;
    std::mt19937_64 rng(5);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (int64_t r : rows) {
      mats.emplace_back(size_t(r * W));
      for (float& x : mats.back()) x = normal(rng);
    }
    for (HiddenDType dtype : {HiddenDType::f32, HiddenDType::bf16}) {
      CAPTURE(hidden_dtype_name(dtype));
      const fs::path d = dir / hidden_dtype_name(dtype);
      HiddenShardWriter w(d, W, dtype, 100);  // ~100 bytes per shard: several shards
      for (size_t i = 0; i < rows.size(); ++i) w.append(mats[i].data(), rows[i]);
      w.finish();
      CHECK(w.sequences() == 5);
      CHECK(fs::exists(d / "hidden-00001.bin"));
      HiddenDataset h(d, W, dtype, rows);
      REQUIRE(h.size() == 5);
      for (size_t i = 0; i < rows.size(); ++i) {
        CHECK(h.rows(int64_t(i)) == rows[i]);
        std::vector<float> got = h.get(int64_t(i));
        REQUIRE(got.size() == mats[i].size());
        for (size_t j = 0; j < got.size(); ++j) {
          float want = dtype == HiddenDType::f32 ? mats[i][j] : bf16_to_f32(f32_to_bf16(mats[i][j]));
          CHECK(got[j] == want);
          CHECK(std::fabs(got[j] - mats[i][j]) <= std::fabs(mats[i][j]) / 256);
        }
      }
      std::vector<float> first2(2 * W);
      h.read(2, 2, first2.data());
      const std::vector<float> all2 = h.get(2);
      CHECK(first2 == std::vector<float>(all2.begin(), all2.begin() + 2 * W));
      std::vector<float> batch(3 * 4 * W, -1.0f);  // (B 3, S 4, W)
      fill_hidden_batch(h, {2, 0}, 4, 3, batch);
      for (int64_t s = 0; s < 4; ++s)
        for (int64_t f = 0; f < W; ++f) {
          CHECK(batch[size_t(s * W + f)] == h.get(2)[size_t(s * W + f)]);  // 5 rows truncated to 4
          CHECK(batch[size_t((4 + s) * W + f)] == (s < 3 ? h.get(0)[size_t(s * W + f)] : 0.0f));
          CHECK(batch[size_t((8 + s) * W + f)] == 0.0f);
        }
      CHECK_ERROR(fill_hidden_batch(h, {0}, 4, 3, std::span<float>(batch.data(), 5)), "fill_hidden_batch: 1 sequences into a (3, 4, 6) buffer of 5 floats");
      CHECK_ERROR(h.read(0, 4, batch.data()), "sequence 0 has 3 hidden rows; 4 were asked for");
      CHECK_ERROR(h.rows(5), "sequence 5 is out of range; the hidden states hold 5 sequences");
    }
    // Byte layout of one shard: header, lengths, padding to 64 bytes, then the payload.
    HiddenShardWriter w(dir / "one", 2, HiddenDType::bf16);
    const float m[] = {1.0f, -2.0f, 0.5f, 3.0f};
    w.append(m, 2);
    w.append(m, 0);
    w.finish();
    const std::string bytes = read_raw(dir / "one" / "hidden-00000.bin");
    const std::string expect = std::string("DFLHID\0\1", 8) + le<uint32_t>(1) + le<uint32_t>(128) + le<uint64_t>(2) +
                               le<uint64_t>(0) + le<uint64_t>(2) + le<uint32_t>(1) + le<uint32_t>(0) + le<uint64_t>(2) +
                               le<uint64_t>(0) + le<uint64_t>(2) + le<uint64_t>(0) + std::string(48, '\0') +
                               le<uint16_t>(0x3f80) + le<uint16_t>(0xc000) + le<uint16_t>(0x3f00) + le<uint16_t>(0x4040);
    CHECK(bytes == expect);
    CHECK(json::parse(read_raw(dir / "one" / "index.json"))["dtype"] == "bf16");
    CHECK(hidden_rows_for({10, 40, 100}, {{32, 1, 1}, {64, 1, 1}}, OverflowPolicy::truncate) == std::vector<int64_t>{10, 40, 64});
    CHECK(hidden_rows_for({10, 40, 100}, {{32, 1, 1}, {64, 1, 1}}, OverflowPolicy::skip) == std::vector<int64_t>{10, 40, 0});
    // A sequence exactly as long as the largest bucket fits it: stored whole under every policy.
    CHECK(hidden_rows_for({64, 65, 1}, {{64, 1, 1}, {32, 1, 1}}, OverflowPolicy::skip) == std::vector<int64_t>{64, 0, 1});
    CHECK(hidden_rows_for({64, 65, 1}, {{64, 1, 1}, {32, 1, 1}}, OverflowPolicy::truncate) == std::vector<int64_t>{64, 64, 1});
  }

  TEST_CASE("hidden shards: mismatched dims, dtype, counts, damaged headers and NaN/Inf are refused") {
    dflash::test::TempDir dir("data");
    const fs::path d = dir / "h";
    const fs::path shard = d / "hidden-00000.bin";
    const std::vector<int64_t> rows = {2, 1};
    const std::vector<float> m = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    auto fresh = [&](HiddenDType dtype) {
      HiddenShardWriter w(d, 3, dtype);
      w.append(m.data(), 2);
      w.append(m.data(), 1);
      w.finish();
    };
    auto check_open = [&](const std::string& message) { CHECK_ERROR(HiddenDataset(d, 3, HiddenDType::f32, rows), message); };
    const std::string fix = "fix: re-run `dflash-train hidden`";
    fresh(HiddenDType::f32);
    CHECK_ERROR(HiddenDataset(d, 4, std::nullopt, rows), "index.json: feature_width is 3, expected 4 (F*H");
    CHECK_ERROR(HiddenDataset(d, 3, HiddenDType::bf16, rows), "index.json: dtype is f32, expected bf16; " + fix);
    CHECK_ERROR(HiddenDataset(d, 3, std::nullopt, {2, 1, 5}), "index.json: sequences is 2, expected 3 (the token data's sequence count)");
    CHECK_ERROR(HiddenDataset(d, 3, std::nullopt, {2, 2}), "hidden-00000.bin: sequence 1 has 1 rows, expected 2 (its token length, capped at the largest bucket)");
    CHECK_NOTHROW(HiddenDataset(d, 3, std::nullopt, rows));
    struct Patch {
      size_t offset;
      std::string bytes, message;
    };
    const std::vector<Patch> patches = {
        {3, "X", "hidden-00000.bin: magic is 'DFLXID\\x00\\x01', expected 'DFLHID\\x00\\x01'"},
        {8, le<uint32_t>(2), "hidden-00000.bin: version is 2, expected 1"},
        {12, le<uint32_t>(64), "header_bytes is 64, expected 128"},
        {16, le<uint64_t>(1), "sequence_count (index.json says otherwise) is 1, expected 2"},
        {24, le<uint64_t>(7), "first_sequence is 7, expected 0"},
        {32, le<uint64_t>(5), "feature_width is 5, expected 3"},
        {40, le<uint32_t>(1), "dtype (0 = f32, 1 = bf16) is 1, expected 0"},
        {48, le<uint64_t>(4), "total_rows (the sum of the lengths) is 4, expected 3"},
    };
    for (const Patch& p : patches) {
      CAPTURE(p.message);
      fresh(HiddenDType::f32);
      patch(shard, p.offset, p.bytes);
      check_open(p.message);
    }
    fresh(HiddenDType::f32);
    write_raw(shard, read_raw(shard).substr(0, 128 + 30));
    check_open("the file is 158 bytes, expected 164 for 3 rows of 3 f32; it is truncated or damaged; " + fix);
    write_raw(shard, read_raw(shard).substr(0, 70));
    check_open("the file is 70 bytes, too short for the lengths of sequence_count 2 sequences");
    fresh(HiddenDType::f32);
    edit_index(d, [](json& j) { j["dtype"] = "f16"; });
    check_open("index.json: dtype is 'f16', expected 'f32' or 'bf16'");
    edit_index(d, [](json& j) { j["format"] = "dflash-token-shards"; });
    check_open("index.json: format is 'dflash-token-shards', expected 'dflash-hidden-shards'");
    fresh(HiddenDType::f32);
    edit_index(d, [](json& j) { j.erase("feature_width"); });
    check_open("index.json: malformed");
    fresh(HiddenDType::f32);
    edit_index(d, [](json& j) { j["shards"] = json::array(); });
    check_open("index.json: sequences is 2, but its shards hold 0");
    {
      HiddenShardWriter unfinished(d, 3, HiddenDType::f32);
      unfinished.append(m.data(), 2);
    }
    check_open("there is no index.json (an interrupted run leaves none); " + fix);

    // NaN/Inf: refused when appended, and when read from a damaged file (file, sequence, position, feature).
    HiddenShardWriter w(dir / "w", 3, HiddenDType::f32);
    std::vector<float> bad = m;
    bad[4] = NAN;
    CHECK_ERROR(w.append(bad.data(), 3), "sequence 0 has nan at position 1, feature 1; fix: the target produced NaN/Inf");
    w.finish();
    CHECK_ERROR(w.append(m.data(), 1), "append after finish()");
    CHECK_ERROR(w.finish(), "finish() called twice");
    HiddenShardWriter w2(dir / "w2", 3, HiddenDType::f32);
    CHECK_ERROR(w2.append(m.data(), -1), "sequence 0 has -1 rows");
    CHECK_ERROR(HiddenShardWriter(dir / "w3", 0, HiddenDType::f32), "feature width 0 must be at least 1");
    fresh(HiddenDType::f32);
    patch(shard, 128 + 4 * (2 * 3 + 2), le<uint32_t>(0x7fc00000u));  // sequence 1, row 0, feature 2
    HiddenDataset hf(d, 3, HiddenDType::f32, rows);
    CHECK(hf.get(0) == std::vector<float>(m.begin(), m.begin() + 6));
    CHECK_ERROR(hf.get(1), "hidden-00000.bin: sequence 1 has nan at position 0, feature 2; " + fix);
    fresh(HiddenDType::bf16);
    patch(shard, 128 + 2 * 4, le<uint16_t>(0xff80));  // sequence 0, row 1, feature 1: -inf
    HiddenDataset hb(d, 3, HiddenDType::bf16, rows);
    CHECK_ERROR(hb.get(0), "sequence 0 has -inf at position 1, feature 1");
    std::vector<float> row0(3);
    hb.read(0, 1, row0.data());  // the damaged row is not read
    CHECK(row0 == std::vector<float>{1, 2, 3});
  }

  TEST_CASE("random helpers: uniform_below is plain modulo when no rejection is needed; derived seeds differ") {
    std::mt19937_64 a(11), b(11);
    for (int i = 0; i < 100; ++i) CHECK(uniform_below(a, 8) == b() % 8);
    for (int i = 0; i < 100; ++i) CHECK(uniform_below(a, 3) == b() % 3);  // rejects only r == 0
    CHECK(derive_seed(0, 1) != derive_seed(1, 0));
    CHECK(derive_seed(5, 1, 2) == derive_seed(5, 1, 2));
    CHECK(derive_seed(5, 1, 2) != derive_seed(5, 2, 1));
  }

  TEST_CASE("hidden shards in parts: each rank numbers from its first sequence; the index refuses parts out of order") {
    TempDir dir("hidden-parts");
    const int64_t W = 2;
    const std::vector<float> rows0 = {1, 2, 3, 4}, rows1 = {5, 6}, rows2 = {-1, -2, -3, -4, -5, -6};
    // Rank 0 holds sequences 0 and 1, rank 1 sequence 2 (HiddenPart::first_sequence = 2).
    HiddenShardWriter w0(dir.path, W, HiddenDType::f32, int64_t(1) << 20, HiddenPart{0, 0});
    w0.append(rows0.data(), 2);
    w0.append(rows1.data(), 1);
    w0.finish();
    HiddenShardWriter w1(dir.path, W, HiddenDType::f32, int64_t(1) << 20, HiddenPart{1, 2});
    w1.append(rows2.data(), 3);
    w1.finish();
    CHECK_FALSE(std::filesystem::exists(dir.path / "index.json"));  // a part writes no index
    const nlohmann::json p1 = nlohmann::json::parse(w1.shards_json());
    REQUIRE(p1.size() == 1);
    CHECK(p1[0]["first_sequence"] == 2);
    CHECK(p1[0]["sequences"] == 1);
    CHECK_ERROR(write_hidden_index(dir.path, W, HiddenDType::f32, {w1.shards_json(), w0.shards_json()}),
                "starts at sequence 2, expected 0 (the ranks' parts do not follow each other)");
    write_hidden_index(dir.path, W, HiddenDType::f32, {w0.shards_json(), w1.shards_json()});
    HiddenDataset h(dir.path, W, HiddenDType::f32, {2, 1, 3});
    REQUIRE(h.size() == 3);
    CHECK(h.get(0) == rows0);
    CHECK(h.get(1) == rows1);
    CHECK(h.get(2) == rows2);
  }

  TEST_CASE("splitmix64 gives the published first outputs; seeds mix (base, epoch, index) in that order") {
    CHECK(splitmix64(0) == 0xe220a8397b1dcdafull);  // SplitMix64's first output from state 0
    CHECK(splitmix64(0x9e3779b97f4a7c15ull) == 0x6e789e6aa1b965f4ull);  // its second
    CHECK(splitmix64(1) == 0x910a2dec89025cc1ull);
    MicroBatch mb;
    mb.epoch = 2, mb.index = 5;
    // splitmix64(splitmix64(splitmix64(7) ^ 2) ^ 5), computed outside the project.
    CHECK(mb.anchor_seed(7) == 0x78bc1f9975e91647ull);
  }
}
