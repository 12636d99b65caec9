// The [eval] keys of sampled speculative decoding (spec_temperature, spec_top_p, spec_top_k,
// spec_seed) against decoders given the same settings directly, on the golden case
// (tests/golden/dflash-spec): `dflash-train spec` samples exactly what such a decoder samples on
// prompt i's stream spec_sample_key(seed, i); eval.spec_seed changes the sampled streams and nothing
// else; in training, the sampled spec_tau equals what spec measures on the checkpoint with the same
// keys. The other keys: tests/test_config_keys.cpp.
#include <fstream>

#include "tests/spec_test_util.h"
#include "tests/trainer_fixture.h"
#include "train/commands.h"
#include "train/job.h"
#include "train/spec_eval.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using Outputs = std::vector<std::vector<int32_t>>;  // each prompt's new tokens
constexpr int64_t kMaxNew = 24;

// A config over the golden target with `eval` under [eval], no stop id, and job.seed 9 (unlike
// every spec_seed below).
Config golden_config(const TempDir& tmp, const std::string& eval) {
  const std::string toml = "[job]\nseed = 9\ndump_folder = \"" + (tmp / "dump").string() + "\"\n[target]\npath = \"" +
                           (golden_dir() / "target-qwen3").string() +
                           "\"\nlayer_ids = [1, 2]\n[drafter]\nnum_hidden_layers = 2\nblock_size = 16\n"
                           "mask_token_id = 319\n[data]\ntrain = \"" + (golden_spec_dir() / "prompts.jsonl").string() +
                           "\"\n[runtime]\ndevices = \"cpu\"\n[[buckets]]\nseq = 64\nanchors = 4\nbatch = 1\n"
                           "[eval]\nspec_ignore_eos = true\n" + eval;
  return parse_config(toml, tmp / "spec.toml");
}

// The new tokens `dflash-train spec` writes for each golden prompt (--output) under `eval`.
Outputs spec_outputs(const std::string& eval) {
  TempDir tmp("keys-spec");
  SpecCommandOptions o;
  o.drafter = golden_spec_dir() / "drafter";
  o.prompts = golden_spec_dir() / "prompts.jsonl";
  o.max_new_tokens = kMaxNew;
  o.output = tmp / "records.jsonl";
  capture_stdout([&] { run_spec(golden_config(tmp, eval), o); });
  Outputs out;
  std::ifstream in(o.output);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line).at("output_ids").get<std::vector<int32_t>>());
  return out;
}

// The same prompts decoded by a decoder given the sampling settings directly, prompt i on the
// stream spec_sample_key(seed, i), without stop ids.
Outputs direct_outputs(float temperature, float top_p, int64_t top_k, uint64_t seed) {
  CpuRuntime rt;
  const std::vector<SpecPrompt> prompts = read_spec_prompts(golden_spec_dir() / "prompts.jsonl");
  int64_t longest = 0;
  for (const SpecPrompt& p : prompts) longest = std::max(longest, int64_t(p.ids.size()));
  SpecDecoderOptions o;
  o.max_len = longest + kMaxNew;
  o.temperature = temperature;
  o.top_p = top_p;
  o.top_k = top_k;
  GoldenSpecModels m(Device::cpu(), o);
  Outputs out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Decoded d = m.decoder->decode(prompts[i].ids, kMaxNew, {}, true, spec_sample_key(seed, i));
    out.emplace_back(d.output.begin() + long(prompts[i].ids.size()), d.output.end());
  }
  return out;
}

// The spec_tau records of a dump folder's metrics.jsonl.
std::vector<json> spec_records(const fs::path& dump) {
  std::ifstream in(dump / "metrics.jsonl");
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    if (j.contains("spec_tau")) out.push_back(j);
  }
  return out;
}

}  // namespace

TEST_SUITE("config-keys") {
  TEST_CASE("eval.spec_temperature and eval.spec_top_p: spec samples what a decoder given them directly samples") {
    const Outputs got = spec_outputs("spec_temperature = 1.3\nspec_top_p = 0.6\nspec_seed = 5\n");
    REQUIRE(got.size() >= 2);
    CHECK(got == direct_outputs(1.3f, 0.6f, 0, 5));
    CHECK(got != direct_outputs(1.3f, 1.0f, 0, 5));  // the nucleus cut shows
    CHECK(got != direct_outputs(0.0f, 1.0f, 0, 5));  // sampling shows
  }

  TEST_CASE("eval.spec_top_k: spec samples what a decoder given it directly samples") {
    const Outputs got = spec_outputs("spec_temperature = 1.3\nspec_top_k = 3\nspec_seed = 5\n");
    CHECK(got == direct_outputs(1.3f, 1.0f, 3, 5));
    CHECK(got != direct_outputs(1.3f, 1.0f, 0, 5));  // the cut shows
  }

  TEST_CASE("eval.spec_seed picks the sampled streams and changes nothing else") {
    const Outputs five = spec_outputs("spec_temperature = 1.3\nspec_seed = 5\n");
    const Outputs six = spec_outputs("spec_temperature = 1.3\nspec_seed = 6\n");
    CHECK(five == direct_outputs(1.3f, 1.0f, 0, 5));
    CHECK(six == direct_outputs(1.3f, 1.0f, 0, 6));
    CHECK(five != six);
    // Greedy decoding takes no stream: with spec_seed 6 it is the golden completion.
    const Outputs greedy = spec_outputs("spec_seed = 6\n");
    const GoldenSpec g = read_golden_spec();
    REQUIRE(greedy.size() == g.cases.size());
    for (size_t i = 0; i < greedy.size(); ++i) {
      const GoldenSpecCase& c = g.cases[i];
      const auto first = c.output.begin() + long(c.prompt.size());
      CHECK(greedy[i] == std::vector<int32_t>(first, first + kMaxNew));
    }
  }

  TEST_CASE("eval.spec_seed and eval.spec_temperature in training: the sampled spec_tau is spec's on the checkpoint") {
    // Eight prompts: the first lines of the job's own training data (cut before the response).
    Config cfg = small_job("keys-spec-train", {"training.steps=1", "data.eval=\"\""}, 1);
    const Job job = setup_job(cfg, [](const std::string&) {});
    open_train_data(job, [](const std::string&) {});
    const fs::path prompts = trainer_root() / "keys-spec-train-prompts.jsonl";
    {
      std::ifstream in(cfg.data.train);
      std::ofstream out(prompts);
      std::string line;
      for (int i = 0; i < 8 && std::getline(in, line); ++i) out << line << "\n";
    }
    cfg = small_job("keys-spec-train",
                    {"training.steps=1", "data.eval=\"\"", "eval.spec_prompts=\"" + prompts.string() + "\"",
                     "eval.spec_max_new_tokens=8", "eval.spec_ignore_eos=true", "eval.spec_temperature=1.0",
                     "eval.spec_seed=5"},
                    1);
    capture_stdout([&] { run_training(cfg); });
    const std::vector<json> rec = spec_records(cfg.job.dump_folder);
    REQUIRE(rec.size() == 2);  // before and after training
    SpecCommandOptions o;
    o.drafter = cfg.job.dump_folder / "checkpoints" / "step-1";
    o.prompts = prompts;
    SpecFigures f, other;
    capture_stdout([&] { f = run_spec(cfg, o); });
    CHECK(f.tau == rec[1].at("spec_tau").get<double>());
    Config seed3 = cfg;  // the job's seed as the spec seed: other streams, another tau
    seed3.eval.spec_seed = 3;
    capture_stdout([&] { other = run_spec(seed3, o); });
    CHECK(other.tau != f.tau);
  }
}
