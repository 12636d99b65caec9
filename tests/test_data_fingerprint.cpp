// The data a checkpoint was made on: XXH64 of each data file (JSONL, or a token-shard directory's
// index.json and shards), cached by (path, size, mtime) so an unchanged resume reads nothing; a
// resume on changed data (same size other bytes, lines reordered, a line added) is refused naming
// data.train and what changed, and accepted with data.allow_changed = true (a new epoch).
#include <algorithm>
#include <chrono>
#include <thread>

#include "data/data.h"
#include "data/shards.h"
#include "runtime/error.h"
#include "runtime/fileio.h"
#include "tests/capture_output.h"
#include "tests/test_util.h"
#include "tests/trainer_fixture.h"
#include "train/data_fingerprint.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
uint64_t hash_of(const std::string& s) {
  Hash64 h;
  h.update(s.data(), s.size());
  return h.value();
}

// The lines of a text file, and the file written back from lines.
std::vector<std::string> lines_of(const fs::path& f) {
  std::vector<std::string> out;
  std::istringstream in(read_file_text(f));
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}
void write_lines(const fs::path& f, const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  write_file_atomic(f, s);
}
}  // namespace

TEST_SUITE("data-fingerprint") {
  TEST_CASE("Hash64 is XXH64: known values, and the same however the bytes are split") {
    CHECK(hash64_hex(hash_of("")) == "ef46db3751d8e999");
    CHECK(hash64_hex(hash_of("abc")) == "44bc2cf5ad770999");
    std::string data(1000, '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 131 + 7);
    for (size_t n : {0, 1, 31, 32, 33, 64, 100, 999, 1000}) {
      const std::string s = data.substr(0, n);
      const uint64_t whole = hash_of(s);
      for (size_t piece : {1, 3, 7, 32, 33}) {
        Hash64 h;
        for (size_t at = 0; at < s.size(); at += piece) h.update(s.data() + at, std::min(piece, s.size() - at));
        CHECK_MESSAGE(h.value() == whole, "n " << n << " piece " << piece);
      }
    }
    CHECK(hash_of(data.substr(0, 64)) != hash_of(data.substr(0, 63) + char(data[63] ^ 1)));
  }

  TEST_CASE("a JSONL file is read once; the cache answers until its size or mtime changes") {
    TempDir dir("fingerprint-cache");
    const fs::path f = dir / "train.jsonl";
    write_lines(f, {"{\"input_ids\":[1,2,3]}", "{\"input_ids\":[4,5,6]}"});
    json cache;
    uint64_t read = 0;
    const json a = fingerprint_data(f, cache, &read);
    CHECK(read == fs::file_size(f));
    CHECK(a["bytes"] == fs::file_size(f));
    read = 0;
    CHECK(fingerprint_data(f, cache, &read) == a);
    CHECK(read == 0);
    // Same size, other bytes (the mtime moves on).
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    write_lines(f, {"{\"input_ids\":[1,2,3]}", "{\"input_ids\":[4,5,7]}"});
    const json b = fingerprint_data(f, cache, &read);
    CHECK(read == fs::file_size(f));
    CHECK(data_change(a, b) == "same size (" + std::to_string(fs::file_size(f)) + " bytes), other content");
    CHECK(data_change(b, b).empty());
  }

  TEST_CASE("a token-shard directory: index.json and each shard, the changed file named") {
    TempDir dir("fingerprint-shards");
    std::vector<Sequence> seqs;
    for (int i = 0; i < 6; ++i) seqs.push_back({{1, 2, 3, int32_t(4 + i)}, {0, 1, 1, 1}});
    write_token_shards(dir / "shards", seqs, 64, 3);
    json cache;
    const json a = fingerprint_data(dir / "shards", cache);
    REQUIRE(a["files"].size() == 3);
    CHECK(a["files"].contains("index.json"));
    seqs[4].input_ids[3] = 9;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    write_token_shards(dir / "shards", seqs, 64, 3);
    const std::string what = data_change(a, fingerprint_data(dir / "shards", cache));
    CHECK(what.find("other content (tokens-00001.bin differs)") != std::string::npos);
  }

  TEST_CASE("resume on changed data is refused by key, accepted with data.allow_changed; unchanged data not re-read") {
    const fs::path src = trainer_root() / "data" / "train.jsonl";
    if (!fs::exists(src)) run_training(small_job("fingerprint-setup", {}, 1));  // generates the shared data
    for (const std::string change : {"same size", "reordered", "added"}) {
      CAPTURE(change);
      const fs::path data = trainer_root() / ("fingerprint-" + change + ".jsonl");
      fs::copy_file(src, data, fs::copy_options::overwrite_existing);
      const std::vector<std::string> base = {"data.train=" + data.string()};
      Config cfg = small_job("fingerprint-" + change, base, 2);
      run_training(cfg);
      {  // unchanged: resumed without reading the data again
        CaptureFd out(STDOUT_FILENO);
        run_training(small_job("fingerprint-" + change, base, 3));
        const std::string said = out.text();
        CHECK(said.find("data fingerprints:") == std::string::npos);
        CHECK(said.find("resumed from") != std::string::npos);
      }
      std::vector<std::string> lines = lines_of(data);
      if (change == "reordered") std::swap(lines[0], lines[1]);
      if (change == "added") lines.push_back(lines[0]);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (change == "same size") {
        std::string text = read_file_text(data);
        const size_t at = text.find("\"input_ids\": [") != std::string::npos ? text.find("\"input_ids\": [") + 14
                                                                                : text.find("[") + 1;
        text[at] = text[at] == '1' ? '2' : '1';
        write_file_atomic(data, text);
      } else {
        write_lines(data, lines);
      }
      const std::string refused = [&] {
        try {
          run_training(small_job("fingerprint-" + change, base, 4));
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      }();
      CHECK(refused.find("data.train = \"" + data.string() + "\" changed since ") != std::string::npos);
      CHECK(refused.find(change == "added" ? "its size changed" : "same size") != std::string::npos);
      CHECK(refused.find("fix: resume with the original data, or set data.allow_changed = true") != std::string::npos);
      std::vector<std::string> allow = base;
      allow.push_back("data.allow_changed=true");
      CaptureFd out(STDOUT_FILENO);
      TrainResult r = run_training(small_job("fingerprint-" + change, allow, 4));
      const std::string said = out.text();
      CHECK(r.start_step == 3);
      CHECK(r.steps_done == 4);
      CHECK(said.find("the data order starts again at the beginning of epoch 1") != std::string::npos);
    }
  }
}
