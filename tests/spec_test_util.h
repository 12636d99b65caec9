// Shared by the speculative-decoding tests: the golden case (tests/golden/dflash-spec) loaded
// for the decoder (target, drafter, prompts, expected outputs and rounds), on the CPU or a GPU.
// Two references of one decoding: expected.json (a float64 loop that runs a round while
// start < n + max_new, with full blocks, and counts a + 1) gives every full-block round's drafts
// and a + 1; expected_zlab_0_1.json (z-lab's dflash_generate, the counting rule we follow) gives
// which rounds run and the tokens each produced.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "model/drafter.h"
#include "model/spec_decoder.h"
#include "model/target.h"
#include "runtime/fileio.h"
#include "tests/test_util.h"
#include "train/export.h"

namespace dflash::test {

struct GoldenSpecCase {
  std::vector<int32_t> prompt, output;
  std::vector<SpecRound> rounds;     // expected.json's: start, drafts and a + 1 of full-block rounds
  std::vector<int64_t> produced;     // the reference package's tokens per round
  double tau = 0;                    // the reference package's: the mean of produced
};

struct GoldenSpec {
  nlohmann::json expected, zlab;
  std::vector<GoldenSpecCase> cases;
  int64_t max_new = 0;
};

inline GoldenSpec read_golden_spec() {
  GoldenSpec g;
  g.expected = nlohmann::json::parse(read_file_text(golden_spec_dir() / "expected.json"));
  g.zlab = nlohmann::json::parse(read_file_text(golden_spec_dir() / "expected_zlab_0_1.json"));
  g.max_new = g.expected.at("max_new_tokens").get<int64_t>();
  REQUIRE(g.zlab.at("cases").size() == g.expected.at("cases").size());
  for (size_t i = 0; i < g.expected.at("cases").size(); ++i) {
    const auto& c = g.expected.at("cases")[i];
    const auto& z = g.zlab.at("cases")[i];
    GoldenSpecCase gc;
    gc.prompt = c.at("prompt").get<std::vector<int32_t>>();
    gc.output = c.at("output").get<std::vector<int32_t>>();
    gc.tau = z.at("tau").get<double>();
    gc.produced = z.at("produced_per_round").get<std::vector<int64_t>>();
    for (const auto& r : c.at("rounds"))
      gc.rounds.push_back({r.at("start").get<int64_t>(), r.at("draft").get<std::vector<int32_t>>(),
                           r.at("accepted").get<int64_t>()});
    g.cases.push_back(gc);
  }
  return g;
}

// Runs f with stdout captured into the returned text (stdout is restored even when f throws).
template <class F>
std::string capture_stdout(const F& f) {
  std::fflush(stdout);
  FILE* tmp = std::tmpfile();
  REQUIRE(tmp);
  const int saved = ::dup(1);
  ::dup2(::fileno(tmp), 1);
  auto restore = [&] {
    std::fflush(stdout);
    ::dup2(saved, 1);
    ::close(saved);
  };
  try {
    f();
  } catch (...) {
    restore();
    std::fclose(tmp);
    throw;
  }
  restore();
  std::rewind(tmp);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, tmp)) > 0;) out.append(buf, n);
  std::fclose(tmp);
  return out;
}

// The golden target and drafter, loaded in the current context (the caller's), plus a decoder.
struct GoldenSpecModels {
  std::unique_ptr<Target> target;
  std::unique_ptr<Drafter> drafter;
  std::unique_ptr<SpecDecoder> decoder;

  GoldenSpecModels(Device device, SpecDecoderOptions o) {
    const std::filesystem::path drafter_dir = golden_spec_dir() / "drafter";
    DrafterSpec spec = read_drafter_config(drafter_dir).spec;
    target = std::make_unique<Target>(golden_dir() / "target-qwen3", spec.target_layer_ids, 64);
    drafter = std::make_unique<Drafter>(spec, target->embed_tokens(), target->lm_head());
    load_drafter_weights(drafter_dir, spec, drafter->params());
    decoder = std::make_unique<SpecDecoder>(device, *target, drafter.get(), o);
  }
};

// A random target at Qwen3-8B dims (seed 3) and a random qwen3-8b drafter of 5 layers, block 16
// (seed 5), in the current context.
struct RandomQwen3_8B {
  std::unique_ptr<Target> target;
  std::unique_ptr<Drafter> drafter;
  RandomQwen3_8B() {
    TargetSpec t;
    t.hidden_size = 4096, t.intermediate_size = 12288, t.num_hidden_layers = 36;
    t.num_attention_heads = 32, t.num_key_value_heads = 8, t.head_dim = 128, t.vocab_size = 151936;
    t.rope_theta = 1000000.0, t.max_position_embeddings = 40960;
    DrafterSpec d;
    d.hidden_size = 4096, d.intermediate_size = 12288, d.num_hidden_layers = 5, d.num_attention_heads = 32;
    d.num_key_value_heads = 8, d.head_dim = 128, d.vocab_size = 151936, d.rope_theta = 1000000.0;
    d.block_size = 16, d.mask_token_id = 151669, d.num_target_layers = 36;
    d.target_layer_ids = default_target_layer_ids(36, 5);
    target = Target::random(t, d.target_layer_ids, 1, 3, 0.02);
    drafter = std::make_unique<Drafter>(d, target->embed_tokens(), target->lm_head());
    drafter->init_random(5, 0.02);
  }
};

}  // namespace dflash::test
