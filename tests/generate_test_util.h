// Shared by the batched-decoding tests (CPU and GPU): the tiny target of configs/tiny.toml written
// into a folder, the golden outputs of transformers' generate on it (tests/golden/generate-hf), a
// config for `dflash-train generate` over it, and the records of an output file.
#pragma once
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/target.h"
#include "tests/capture_output.h"
#include "tests/test_util.h"
#include "train/config.h"
#include "train/generate.h"
#include "train/generate_output.h"

namespace dflash::test {

inline std::filesystem::path generate_golden_dir() {
  std::filesystem::path p = DFLASH_SOURCE_DIR "/tests/golden/generate-hf";
  if (!std::filesystem::exists(p / "greedy.json"))
    FAIL("golden data not found at " << p.string() << ": restore tests/golden from git");
  return p;
}

struct GoldenGenerateCase {
  nlohmann::json id;
  std::vector<int32_t> prompt, output;
  std::string finish;
};
struct GoldenGenerate {
  nlohmann::json raw;
  int64_t max_new = 0;
  std::vector<int32_t> stop_ids;
  std::vector<GoldenGenerateCase> cases;
};
// name: "greedy" or "greedy_stop".
inline GoldenGenerate read_golden_generate(const std::string& name) {
  GoldenGenerate g;
  g.raw = nlohmann::json::parse(std::ifstream(generate_golden_dir() / (name + ".json")));
  g.max_new = g.raw["max_new_tokens"];
  g.stop_ids = g.raw["stop_token_ids"].get<std::vector<int32_t>>();
  for (const auto& c : g.raw["cases"])
    g.cases.push_back({c["id"], c["prompt_ids"].get<std::vector<int32_t>>(), c["output_ids"].get<std::vector<int32_t>>(),
                       c["finish"]});
  return g;
}

// configs/tiny.toml's target (its [target.synthetic]) written into dir/target; the checksums of
// its embedding and lm_head must be those transformers read (the golden files record them).
inline std::filesystem::path write_tiny_target(const TempDir& dir) {
  const Config tiny = load_config(DFLASH_SOURCE_DIR "/configs/tiny.toml");
  const std::filesystem::path target = dir / "target";
  write_random_target(target, tiny.target.synthetic);
  const TargetChecksums sums = target_checksums(target, read_target_spec(target));
  const nlohmann::json want = read_golden_generate("greedy").raw["target_checksums"];
  REQUIRE_MESSAGE(sums.embed_tokens == want["embed_tokens"].get<std::string>(),
                  "configs/tiny.toml's target is not the one tests/golden/generate-hf was made from");
  REQUIRE(sums.lm_head == want["lm_head"].get<std::string>());
  return target;
}

// A config for `dflash-train generate` over `target` on the CPU; `extra` is appended TOML.
inline Config generate_config(const TempDir& dir, const std::filesystem::path& target, const std::string& extra = "",
                              const std::vector<std::string>& overrides = {}) {
  const std::string toml = "[job]\ndump_folder = \"" + (dir / "dump").string() + "\"\n[target]\npath = \"" +
                           target.string() + "\"\n[drafter]\nmask_token_id = 511\n[data]\ntrain = \"" +
                           (dir / "unused.jsonl").string() +
                           "\"\n[runtime]\ndevices = \"cpu\"\n[[buckets]]\nseq = 32\nanchors = 4\nbatch = 1\n" + extra;
  return parse_config(toml, dir / "generate.toml", overrides);
}

// Writes {"id", "prompt_ids"} lines.
inline std::filesystem::path write_generate_prompts(const std::filesystem::path& file,
                                                    const std::vector<GoldenGenerateCase>& cases) {
  std::ofstream out(file);
  for (const GoldenGenerateCase& c : cases) out << nlohmann::json{{"id", c.id}, {"prompt_ids", c.prompt}}.dump() << "\n";
  return file;
}

// The records of an output file by the id's JSON text, and its header (line 1).
struct GenerateOutputFile {
  nlohmann::json header;
  std::vector<nlohmann::json> records;  // in file order
  std::string text;
};
inline GenerateOutputFile read_generate_output(const std::filesystem::path& file) {
  GenerateOutputFile f;
  std::ifstream in(file);
  f.text = std::string(std::istreambuf_iterator<char>(in), {});
  size_t at = 0;
  for (size_t end; (end = f.text.find('\n', at)) != std::string::npos; at = end + 1) {
    const nlohmann::json j = nlohmann::json::parse(f.text.substr(at, end - at));
    if (at == 0) f.header = j;
    else f.records.push_back(j);
  }
  return f;
}

// run_generate with stdout captured into *out (when given).
inline GenerateSummary generate_quietly(const Config& cfg, const GenerateCommandOptions& o, std::string* out = nullptr) {
  GenerateSummary s;
  CaptureFd capture(1);
  try {
    s = run_generate(cfg, o);
  } catch (...) {
    if (out) *out = capture.text();
    throw;
  }
  if (out) *out = capture.text();
  return s;
}

}  // namespace dflash::test
