// The [generate] keys of `dflash-train generate` on the tiny target: the sampling keys
// (temperature, top_p, top_k, seed) and max_new_tokens against the target-alone SpecDecoder given
// them directly, each prompt on the stream generate_sample_key(seed, its id); generate.seed against
// job.seed; batch, max_length and prefill_chunk in the startup line; progress_every_s in the
// progress lines. The other keys: tests/test_config_keys.cpp and tests/test_config_keys_eval.cpp.
#include <algorithm>

#include "model/spec_decoder.h"
#include "runtime/context.h"
#include "tests/generate_test_util.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace {

using Outputs = std::vector<std::vector<int32_t>>;  // each prompt's new tokens, in the prompts' order

struct Tiny {
  TempDir dir{"keys-generate"};
  fs::path target = write_tiny_target(dir);
  std::vector<GoldenGenerateCase> cases = read_golden_generate("greedy").cases;
  fs::path prompts = write_generate_prompts(dir / "prompts.jsonl", cases);
};

// The output_ids `dflash-train generate` writes with `keys`, job.seed 9 (unlike every generate.seed
// below) and no stop id; its log into *log when given.
Outputs generate_outputs(const Tiny& t, const std::string& name, std::vector<std::string> keys,
                         std::string* log = nullptr) {
  keys.insert(keys.end(), {"job.seed=9", "eval.spec_ignore_eos=true"});
  GenerateCommandOptions o;
  o.prompts = t.prompts;
  o.output = t.dir / name;
  generate_quietly(generate_config(t.dir, t.target, "", keys), o, log);
  Outputs out;
  for (const nlohmann::json& r : read_generate_output(o.output).records)
    out.push_back(r["output_ids"].get<std::vector<int32_t>>());
  return out;
}

// The same prompts decoded one by one by the target alone, given the settings directly.
Outputs direct_outputs(const Tiny& t, int64_t max_new, float temperature, float top_p, int64_t top_k, uint64_t seed) {
  CpuRuntime rt;
  Target target(t.target, {}, 1);
  int64_t longest = 0;
  for (const GoldenGenerateCase& c : t.cases) longest = std::max(longest, int64_t(c.prompt.size()));
  SpecDecoderOptions o;
  o.max_len = longest + max_new;
  o.temperature = temperature;
  o.top_p = top_p;
  o.top_k = top_k;
  SpecDecoder decoder(Device::cpu(), target, nullptr, o);
  Outputs out;
  for (const GoldenGenerateCase& c : t.cases) {
    const Decoded d = decoder.decode(c.prompt, max_new, {}, false, generate_sample_key(seed, c.id.dump()));
    out.emplace_back(d.output.begin() + long(c.prompt.size()), d.output.end());
  }
  return out;
}

}  // namespace

TEST_SUITE("config-keys") {
  TEST_CASE("[generate] sampling keys and max_new_tokens: generate samples what a decoder given them directly samples") {
    Tiny t;
    const Outputs nucleus = direct_outputs(t, 10, 1.3f, 0.7f, 0, 5);
    CHECK(generate_outputs(t, "nucleus.jsonl", {"generate.max_new_tokens=10", "generate.temperature=1.3",
                                                "generate.top_p=0.7", "generate.seed=5"}) == nucleus);
    const Outputs top_k = direct_outputs(t, 10, 1.3f, 1.0f, 4, 5);
    CHECK(generate_outputs(t, "top-k.jsonl", {"generate.max_new_tokens=10", "generate.temperature=1.3",
                                              "generate.top_k=4", "generate.seed=5"}) == top_k);
    // Each setting changes the draws here, so a key read as its default shows.
    CHECK(direct_outputs(t, 10, 1.3f, 1.0f, 0, 5) != nucleus);
    CHECK(direct_outputs(t, 10, 1.3f, 1.0f, 0, 5) != top_k);
    CHECK(direct_outputs(t, 10, 0.0f, 1.0f, 0, 5) != nucleus);
    CHECK(direct_outputs(t, 10, 1.3f, 0.7f, 0, 0) != nucleus);
    CHECK(direct_outputs(t, 10, 1.3f, 0.7f, 0, 9) != nucleus);
    for (const std::vector<int32_t>& o : nucleus) CHECK(o.size() == 10);
  }

  TEST_CASE("generate.batch, max_length and prefill_chunk in the startup line; progress_every_s: a line per step") {
    Tiny t;
    std::string log;
    generate_outputs(t, "out.jsonl",
                     {"generate.max_new_tokens=6", "generate.batch=3", "generate.max_length=60",
                      "generate.prefill_chunk=8", "generate.progress_every_s=0.000001"},
                     &log);
    INFO(log);
    CHECK(log.find(": 3 slots of 60 positions, prefill chunks of 8 rows, recorded programs;") != std::string::npos);
    // 10 prompts of 6 tokens over 3 slots: at least 5 decode steps, each followed by a line.
    int64_t lines = 0;
    for (size_t at = 0; (at = log.find(" tokens/s, ETA ", at)) != std::string::npos; ++at) ++lines;
    CHECK(lines >= 6);
    // The defaults: 32 slots of the longest prompt (48) + 6 positions, and only the last line.
    log.clear();
    generate_outputs(t, "default.jsonl", {"generate.max_new_tokens=6"}, &log);
    CHECK(log.find(": 32 slots of 54 positions, prefill chunks of 256 rows, recorded programs;") != std::string::npos);
    lines = 0;
    for (size_t at = 0; (at = log.find(" tokens/s, ETA ", at)) != std::string::npos; ++at) ++lines;
    CHECK(lines == 1);
  }
}
