// Batched decoding on the CPU (`dflash-train generate`, model/batch_generator.h): greedy outputs
// equal to transformers' generate on the tiny target (tests/golden/generate-hf, prompts of
// different lengths in one padded batch), the same output files whatever the batch, the slots and
// the ranks, top_k 1 equal to greedy, and a chi-square test that the first two new tokens follow
// the target's own sampling distribution (from its full forward), which a sampler ignoring top_p
// fails; sampled tokens equal to what the target-alone SpecDecoder draws on the same stream; and a
// slot that finishes taking the next request before the next step (the schedule by hand).
#include <algorithm>

#include "model/batch_generator.h"
#include "model/spec_decoder.h"
#include "runtime/context.h"
#include "tests/generate_test_util.h"
#include "tests/spec_sampling_util.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace {

// Every golden prompt decoded by a BatchGenerator over `slots` slots; results by request index.
std::vector<GenerateResult> decode_all(const Target& target, const std::vector<GoldenGenerateCase>& cases,
                                       int64_t max_new, const std::vector<int32_t>& stop, GenerateOptions o) {
  std::vector<GenerateRequest> requests;
  int64_t longest = 0;
  for (const GoldenGenerateCase& c : cases) {
    requests.push_back({c.prompt, max_new, uint64_t(requests.size())});
    longest = std::max(longest, int64_t(c.prompt.size()));
  }
  o.capacity = longest + max_new;
  BatchGenerator gen(Device::cpu(), target, o, size_t(1) << 30);
  std::vector<GenerateResult> results(requests.size());
  std::vector<bool> seen(requests.size(), false);
  gen.run(requests, stop, [&](const GenerateResult& r) {
    REQUIRE(!seen[r.request]);
    seen[r.request] = true;
    results[r.request] = r;
  });
  for (bool s : seen) REQUIRE(s);
  return results;
}

void check_against_golden(const GoldenGenerate& g, const std::vector<GenerateResult>& got) {
  REQUIRE(got.size() == g.cases.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(g.cases[i].id.dump());
    CHECK(got[i].output == g.cases[i].output);
    CHECK((got[i].stopped ? "stop" : "length") == g.cases[i].finish);
  }
}

// The whole output file of one run_generate into dir/name.
std::string generate_file(const TempDir& dir, const fs::path& target, const fs::path& prompts, const std::string& name,
                          const std::vector<std::string>& overrides, const GenerateCommandOptions& extra = {}) {
  Config cfg = generate_config(dir, target, "", overrides);
  GenerateCommandOptions o = extra;
  o.prompts = prompts;
  o.output = dir / name;
  const GenerateSummary s = generate_quietly(cfg, o);
  CHECK(s.merged);
  return read_generate_output(o.output).text;
}

}  // namespace

TEST_SUITE("generate") {
  TEST_CASE("greedy outputs equal transformers' generate on the tiny target, prompts of different lengths together") {
    CpuRuntime rt;
    TempDir dir("generate-hf");
    const fs::path target_dir = write_tiny_target(dir);
    Target target(target_dir, {}, 1);
    for (const std::string name : {"greedy", "greedy_stop"}) {
      CAPTURE(name);
      const GoldenGenerate g = read_golden_generate(name);
      // 3 slots for 10 prompts: slots are refilled as they finish; chunks of 16 rows pack several
      // prompts and split the longer ones.
      GenerateOptions o;
      o.slots = 3;
      o.prefill_chunk = 16;
      check_against_golden(g, decode_all(target, g.cases, g.max_new, g.stop_ids, o));
      o.graphs = false;  // eager: the same ops run as they are recorded
      check_against_golden(g, decode_all(target, g.cases, g.max_new, g.stop_ids, o));
    }
  }

  TEST_CASE("dflash-train generate writes transformers' outputs, a header and the records in the prompts' order") {
    CpuRuntime rt;
    TempDir dir("generate-file");
    const fs::path target = write_tiny_target(dir);
    const GoldenGenerate g = read_golden_generate("greedy_stop");
    const fs::path prompts = write_generate_prompts(dir / "prompts.jsonl", g.cases);
    std::string stop = "[";
    for (int32_t id : g.stop_ids) stop += (stop.size() > 1 ? "," : "") + std::to_string(id);
    Config cfg = generate_config(dir, target, "", {"eval.spec_stop_token_ids=" + stop + "]", "generate.batch=4",
                                                   "generate.max_new_tokens=" + std::to_string(g.max_new)});
    GenerateCommandOptions o;
    o.prompts = prompts;
    o.output = dir / "out.jsonl";
    std::string log;
    const GenerateSummary s = generate_quietly(cfg, o, &log);
    INFO(log);
    CHECK(s.generated == int64_t(g.cases.size()));
    CHECK(s.merged);
    CHECK(log.find("done: 10 prompts generated (7 ended by a stop id, 3 by max_new_tokens)") != std::string::npos);
    const GenerateOutputFile f = read_generate_output(o.output);
    CHECK(f.header["format"] == "dflash-train generate");
    CHECK(f.header["max_new_tokens"] == g.max_new);
    CHECK(f.header["stop_token_ids"] == g.raw["stop_token_ids"]);
    CHECK(f.header["target"]["embed_tokens_crc32"] == g.raw["target_checksums"]["embed_tokens"]);
    CHECK(f.header["config_hash"].get<std::string>().size() == 16);
    REQUIRE(f.records.size() == g.cases.size());
    for (size_t i = 0; i < g.cases.size(); ++i) {
      CAPTURE(i);
      CHECK(f.records[i]["id"] == g.cases[i].id);
      CHECK(f.records[i]["prompt_ids"].get<std::vector<int32_t>>() == g.cases[i].prompt);
      CHECK(f.records[i]["output_ids"].get<std::vector<int32_t>>() == g.cases[i].output);
      CHECK(f.records[i]["finish"] == g.cases[i].finish);
    }
  }

  TEST_CASE("the same output file for batch 1 and 8, any slot order, and 1 or 2 ranks; greedy and sampled") {
    CpuRuntime rt;
    TempDir dir("generate-same");
    const fs::path target = write_tiny_target(dir);
    const GoldenGenerate g = read_golden_generate("greedy");
    const fs::path prompts = write_generate_prompts(dir / "prompts.jsonl", g.cases);
    for (const bool sampled : {false, true}) {
      CAPTURE(sampled);
      std::vector<std::string> base = {"generate.max_new_tokens=12", "generate.prefill_chunk=8"};
      if (sampled) base.insert(base.end(), {"generate.temperature=0.9", "generate.top_p=0.9", "generate.seed=5"});
      const std::string tag = sampled ? "sampled" : "greedy";
      auto with = [&](std::vector<std::string> more) {
        more.insert(more.begin(), base.begin(), base.end());
        return more;
      };
      const std::string one = generate_file(dir, target, prompts, tag + "-b1.jsonl", with({"generate.batch=1"}));
      CHECK(generate_file(dir, target, prompts, tag + "-b8.jsonl", with({"generate.batch=8"})) == one);
      GenerateCommandOptions reversed;
      reversed.slot_order = {7, 6, 5, 4, 3, 2, 1, 0};
      CHECK(generate_file(dir, target, prompts, tag + "-rev.jsonl", with({"generate.batch=8"}), reversed) == one);
      // Two ranks, one after the other: rank 1 leaves its part, rank 0 finishes last and merges.
      Config cfg = generate_config(dir, target, "", with({"generate.batch=3"}));
      GenerateCommandOptions o;
      o.prompts = prompts;
      o.output = dir / (tag + "-ranks.jsonl");
      for (int rank : {1, 0}) {
        LaunchInfo l;
        l.launcher = "torchrun";
        l.rank = rank;
        l.world = 2;
        o.launch = l;
        const GenerateSummary s = generate_quietly(cfg, o);
        CHECK(s.share == 5);
        CHECK(s.merged == (rank == 0));
        CHECK(fs::exists(o.output.string() + ".rank-1") == (rank == 1));
      }
      CHECK(read_generate_output(o.output).text == one);
      if (!sampled) {
        const GenerateOutputFile f = read_generate_output(dir / (tag + "-b1.jsonl"));
        for (size_t i = 0; i < g.cases.size(); ++i) {
          std::vector<int32_t> want(g.cases[i].output.begin(), g.cases[i].output.begin() + 12);
          CHECK(f.records[i]["output_ids"].get<std::vector<int32_t>>() == want);
        }
      }
    }
  }

  TEST_CASE("top_k 1 samples exactly what greedy decoding chooses") {
    CpuRuntime rt;
    TempDir dir("generate-topk1");
    Target target(write_tiny_target(dir), {}, 1);
    for (const std::string name : {"greedy", "greedy_stop"}) {
      CAPTURE(name);
      const GoldenGenerate g = read_golden_generate(name);
      GenerateOptions o;
      o.slots = 4;
      o.temperature = 1.3f;
      o.top_k = 1;
      check_against_golden(g, decode_all(target, g.cases, g.max_new, g.stop_ids, o));
    }
  }

  TEST_CASE("the first two new tokens follow the target's sampling distribution (chi-square, 0.001)") {
    // 4000 requests of one prompt with their own streams, max_new 2: the prefill draws the first
    // token, a decode step the second. The expected distribution comes from the target's full
    // forward (Target::logits) and an independent sort (spec_sampling_util.h). A sampler that ignores
    // top_p draws tokens the nucleus excludes.
    CpuRuntime rt;
    TempDir dir("generate-chi2");
    Target target(write_tiny_target(dir), {}, 64);
    const std::vector<int32_t> prompt = read_golden_generate("greedy").cases[6].prompt;
    const float T = 1.5f, top_p = 0.8f;
    const int64_t top_k = 5, n = 4000;
    const auto dist = target_pair_distribution(target, prompt, T, top_p, top_k);
    REQUIRE(dist.size() >= 4);
    const double critical = chi_square_critical_001(int64_t(dist.size()) - 1);
    auto counts = [&](bool ignore_top_p) {
      GenerateOptions o;
      o.slots = 16;
      o.capacity = int64_t(prompt.size()) + 2;
      o.prefill_chunk = 128;
      o.temperature = T;
      o.top_p = top_p;
      o.top_k = top_k;
      o.ignore_top_p = ignore_top_p;
      BatchGenerator gen(Device::cpu(), target, o, size_t(1) << 30);
      std::vector<GenerateRequest> requests;
      for (int64_t i = 0; i < n; ++i) requests.push_back({prompt, 2, generate_sample_key(11, std::to_string(i))});
      std::map<std::pair<int32_t, int32_t>, int64_t> c;
      gen.run(requests, {}, [&](const GenerateResult& r) {
        REQUIRE(r.output.size() == 2);
        ++c[{r.output[0], r.output[1]}];
      });
      return c;
    };
    const double right = chi_square(counts(false), dist, n);
    const double wrong = chi_square(counts(true), dist, n);
    MESSAGE("chi-square over " << dist.size() << " pairs: " << right << "; ignoring top_p: " << wrong << "; critical "
                               << critical);
    CHECK(right < critical);
    CHECK(wrong > critical);
  }

  TEST_CASE("sampled: each request's tokens are those the target-alone decoder draws on the same stream") {
    // SpecDecoder's target-alone steps (another cache, another control state, batch 1) draw
    // position p's token with the uniform number at p of the request's stream, as the batched
    // decoder must, whatever the slot, the chunk packing and the other requests.
    CpuRuntime rt;
    TempDir dir("generate-streams");
    Target target(write_tiny_target(dir), {}, 1);
    const GoldenGenerate g = read_golden_generate("greedy_stop");
    GenerateOptions o;
    o.slots = 3;
    o.prefill_chunk = 16;
    o.temperature = 1.2f;
    o.top_p = 0.9f;
    o.top_k = 40;
    int64_t longest = 0;
    std::vector<GenerateRequest> requests;
    for (const GoldenGenerateCase& c : g.cases) {
      requests.push_back({c.prompt, g.max_new, generate_sample_key(3, c.id.dump())});
      longest = std::max(longest, int64_t(c.prompt.size()));
    }
    o.capacity = longest + g.max_new;
    std::vector<GenerateResult> got(requests.size());
    BatchGenerator gen(Device::cpu(), target, o, size_t(1) << 30);
    gen.run(requests, g.stop_ids, [&](const GenerateResult& r) { got[r.request] = r; });
    SpecDecoderOptions so;
    so.max_len = o.capacity;
    so.temperature = o.temperature;
    so.top_p = o.top_p;
    so.top_k = o.top_k;
    SpecDecoder alone(Device::cpu(), target, nullptr, so);
    int64_t differ_from_greedy = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      CAPTURE(i);
      const Decoded d = alone.decode(requests[i].prompt, g.max_new, g.stop_ids, false, requests[i].key);
      const std::vector<int32_t> want(d.output.begin() + long(requests[i].prompt.size()), d.output.end());
      CHECK(got[i].output == want);
      differ_from_greedy += got[i].output != g.cases[i].output ? 1 : 0;
    }
    CHECK(differ_from_greedy >= 5);  // the streams do sample
  }

  TEST_CASE("continuous batching: a slot whose request ends takes the next request before the next step") {
    // 2 slots, max_new 2, 5, 2, 2 (no stop id). By hand: the prefill gives requests 0 and 1 their
    // first token; step 1 ends request 0, whose slot 0 takes request 2 at once; step 2 ends
    // request 2, slot 0 takes request 3; step 3 ends request 3; step 4 ends request 1. Refilling
    // only when every slot is free would take 5 steps and put request 3 in slot 1.
    CpuRuntime rt;
    TempDir dir("generate-refill");
    Target target(write_tiny_target(dir), {}, 1);
    const GoldenGenerate g = read_golden_generate("greedy");
    const std::vector<int64_t> max_new = {2, 5, 2, 2};
    std::vector<GenerateRequest> requests;
    int64_t longest = 0;
    for (size_t i = 0; i < max_new.size(); ++i) {
      requests.push_back({g.cases[i].prompt, max_new[i], 0});
      longest = std::max(longest, int64_t(g.cases[i].prompt.size()));
    }
    GenerateOptions o;
    o.slots = 2;
    o.capacity = longest + 5;
    BatchGenerator gen(Device::cpu(), target, o, size_t(1) << 30);
    std::vector<size_t> finished;
    std::vector<int64_t> slots(requests.size(), -1), produced;
    gen.run(
        requests, {},
        [&](const GenerateResult& r) {
          finished.push_back(r.request);
          slots[r.request] = r.slot;
          const std::vector<int32_t> want(g.cases[r.request].output.begin(),
                                          g.cases[r.request].output.begin() + max_new[r.request]);
          CHECK(r.output == want);
          CHECK(!r.stopped);
        },
        [&](int64_t tokens) { produced.push_back(tokens); });
    CHECK(produced == std::vector<int64_t>{2, 2, 2, 1});
    CHECK(finished == std::vector<size_t>{0, 2, 3, 1});
    CHECK(slots == std::vector<int64_t>{0, 1, 0, 0});
  }
}
