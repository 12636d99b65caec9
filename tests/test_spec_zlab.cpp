// Our greedy speculative decoding (float32, CPU) against z-lab's published package (dflash 0.1.0's
// dflash_generate, float64) on tests/golden/dflash-zlab: the golden spec drafter and a drafter this
// project trained and exported (with and without stop ids). Every output and every round's produced
// count must be equal, exactly, and the outputs lossless (our target-alone decoding too). The golden
// files were written by scripts/anchors/zlab-reference.sh; no torch is needed here.
#include "model/drafter.h"
#include "model/spec_decoder.h"
#include "model/target.h"
#include "runtime/fileio.h"
#include "tests/test_util.h"
#include "train/export.h"
#include "train/spec_eval.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

fs::path zlab_dir() {
  const fs::path p = DFLASH_SOURCE_DIR "/tests/golden/dflash-zlab";
  if (!fs::exists(p / "spec_case.json")) FAIL("golden data not found at " << p.string() << ": restore tests/golden");
  return p;
}

// One golden file: its target and drafter (paths relative to the repository) and stop ids, every
// prompt decoded and compared with the reference's outputs, rounds and tau (null: no round ran).
void check_case(const std::string& file) {
  const json want = json::parse(read_file_text(zlab_dir() / file));
  const std::vector<int32_t> stop_ids = want.at("stop_token_ids").get<std::vector<int32_t>>();
  const fs::path source(DFLASH_SOURCE_DIR);
  const fs::path drafter_dir = source / want.at("drafter").get<std::string>();
  const int64_t max_new = want.at("max_new_tokens");
  const DrafterSpec spec = read_drafter_config(drafter_dir).spec;
  REQUIRE(spec.block_size == want.at("block_size").get<int64_t>());
  size_t longest = 0;
  for (const json& c : want.at("cases")) longest = std::max(longest, c.at("prompt").size());
  const int64_t max_len = int64_t(longest) + max_new;

  CpuRuntime rt;
  Target target(source / want.at("target").get<std::string>(), spec.target_layer_ids, max_len);
  Drafter drafter(spec, target.embed_tokens(), target.lm_head());
  load_drafter_weights(drafter_dir, spec, drafter.params());
  SpecDecoderOptions o;
  o.max_len = max_len;
  SpecDecoder decoder(Device::cpu(), target, &drafter, o);

  std::vector<SpecPromptResult> results;
  for (size_t i = 0; i < want.at("cases").size(); ++i) {
    const json& c = want.at("cases")[i];
    INFO(file << " prompt " << i);
    const SpecPrompt p{c.at("prompt").get<std::vector<int32_t>>(), file + " case " + std::to_string(i)};
    // exact: the target alone must give the same output (the lossless check throws otherwise).
    SpecPromptResult r = measure_spec_prompt(decoder, p, max_new, stop_ids, true, true);
    CHECK(r.first_difference == -1);
    CHECK(r.output == c.at("output_ids").get<std::vector<int32_t>>());
    CHECK(r.produced == c.at("produced_per_round").get<std::vector<int64_t>>());
    if (c.at("tau").is_null()) CHECK(r.produced.empty());
    else CHECK(r.tau() == doctest::Approx(c.at("tau").get<double>()).epsilon(1e-12));
    results.push_back(std::move(r));
  }
  const SpecFigures f = summarize_spec(results, spec.block_size);
  CHECK(f.tau == doctest::Approx(want.at("tau").get<double>()).epsilon(1e-12));
  CHECK(f.tau_micro == doctest::Approx(want.at("tau_micro").get<double>()).epsilon(1e-12));
}

}  // namespace

TEST_SUITE("spec") {
  TEST_CASE("z-lab's dflash 0.1.0 on the golden spec drafter: outputs and tokens produced per round, exactly") {
    check_case("spec_case.json");
    // The same counts as the copy the dflash-spec tests read (tests/golden/dflash-spec).
    const json ours = json::parse(read_file_text(zlab_dir() / "spec_case.json"));
    const json theirs = json::parse(read_file_text(golden_spec_dir() / "expected_zlab_0_1.json"));
    REQUIRE(ours.at("cases").size() == theirs.at("cases").size());
    for (size_t i = 0; i < ours.at("cases").size(); ++i)
      CHECK(ours.at("cases")[i].at("produced_per_round") == theirs.at("cases")[i].at("produced_per_round"));
    CHECK(ours.at("tau").get<double>() == doctest::Approx(theirs.at("tau").get<double>()).epsilon(1e-12));
  }

  TEST_CASE("z-lab's dflash 0.1.0 on a drafter trained and exported here: outputs and tokens per round, exactly") {
    check_case("trained_case.json");
    // With stop ids: decoding ends at a stopping prefill token or inside a round, whose count is cut.
    check_case("trained_stop_case.json");
    // The reference loaded this export through its own class; it still holds what it was given.
    const fs::path drafter = zlab_dir() / "drafter";
    for (const char* name : {"config.json", "model.safetensors", "modeling_dflash.py"})
      CHECK(fs::exists(drafter / name));
  }
}
