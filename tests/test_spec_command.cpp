// dflash-train spec on the golden case (tests/golden/dflash-spec): the printed figures (tau, micro
// tau, SGLang's accept length, the histogram; the last line JSON), the timing figures from hand-made
// per-prompt results, prompts from the eval data (sequences trained on from the start skipped), stop
// ids from the target's eos_token_id or the config (below the vocabulary), the export's block size, a
// wrong rollback caught by the lossless check, and every bad input refused with one clear message.
#include <fstream>

#include "data/data.h"
#include "tests/spec_test_util.h"
#include "tests/target_fixtures.h"
#include "train/config.h"
#include "train/spec_eval.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace {

// What run_spec printed, and its figures.
struct SpecRun {
  SpecFigures figures;
  std::string out;
  std::vector<std::string> lines() const {
    std::vector<std::string> v;
    size_t a = 0;
    for (size_t b; (b = out.find('\n', a)) != std::string::npos; a = b + 1) v.push_back(out.substr(a, b - a));
    return v;
  }
};

// Runs run_spec with stdout captured.
SpecRun capture_spec(const Config& cfg, const SpecCommandOptions& o) {
  SpecRun r;
  r.out = capture_stdout([&] { r.figures = run_spec(cfg, o); });
  return r;
}

// A config over the golden target (target_dir: the golden one or an edited copy).
Config spec_config(const TempDir& tmp, const std::string& extra = "", fs::path target_dir = {},
                   const std::string& data_extra = "") {
  if (target_dir.empty()) target_dir = golden_dir() / "target-qwen3";
  const std::string toml = "[job]\ndump_folder = \"" + (tmp / "dump").string() + "\"\n[target]\npath = \"" +
                           target_dir.string() +
                           "\"\nlayer_ids = [1, 2]\n[drafter]\nnum_hidden_layers = 2\nblock_size = 16\n"
                           "mask_token_id = 319\n[data]\ntrain = \"" +
                           (golden_spec_dir() / "prompts.jsonl").string() + "\"\n" + data_extra +
                           "[runtime]\ndevices = \"cpu\"\n[[buckets]]\nseq = 64\nanchors = 4\nbatch = 1\n" + extra;
  return parse_config(toml, tmp / "spec.toml");
}

SpecCommandOptions golden_options(int64_t max_new = 40) {
  SpecCommandOptions o;
  o.drafter = golden_spec_dir() / "drafter";
  o.prompts = golden_spec_dir() / "prompts.jsonl";
  o.max_new_tokens = max_new;
  return o;
}

fs::path write_prompts(const TempDir& tmp, const std::string& name, const std::string& text) {
  fs::path p = tmp / name;
  std::ofstream(p) << text;
  return p;
}

// A copy of the golden target whose config.json is edited (the weights are linked, not copied).
fs::path target_copy(const TempDir& tmp, const std::function<void(json&)>& edit) {
  fs::path dir = tmp / "target";
  fs::create_directories(dir);
  fs::copy_file(golden_dir() / "target-qwen3" / "config.json", dir / "config.json");
  fs::create_symlink(golden_dir() / "target-qwen3" / "model.safetensors", dir / "model.safetensors");
  edit_config(dir, edit);
  return dir;
}

// A copy of the golden drafter export whose config.json is edited.
fs::path drafter_copy(const TempDir& tmp, const std::function<void(json&)>& edit) {
  fs::path dir = tmp / "drafter";
  fs::create_directories(dir);
  fs::copy_file(golden_spec_dir() / "drafter" / "config.json", dir / "config.json");
  fs::create_symlink(golden_spec_dir() / "drafter" / "model.safetensors", dir / "model.safetensors");
  edit_config(dir, edit);
  return dir;
}

}  // namespace

TEST_SUITE("spec") {
  TEST_CASE("summarize_spec: tokens/s, speedup and lossless from the per-prompt TPOTs, computed by hand") {
    // Two prompts, timed: TPOT with the drafter 1.0/10 and 0.2/4 s (mean 0.075), alone 2.0/10 and
    // 0.8/4 s (mean 0.2); the second prompt differs within the tolerance.
    SpecPromptResult a, b;
    a.new_tokens = 10, a.produced = {3, 3, 4}, a.spec_s = 1.0, a.target_s = 2.0;
    b.new_tokens = 4, b.produced = {4}, b.spec_s = 0.2, b.target_s = 0.8, b.first_difference = 7;
    SpecFigures f = summarize_spec({a, b}, 4);
    CHECK(f.timed);
    CHECK(f.tokens_per_s == doctest::Approx(1 / 0.075).epsilon(1e-12));
    CHECK(f.tokens_per_s_target == doctest::Approx(5.0).epsilon(1e-12));
    CHECK(f.speedup == doctest::Approx(0.2 / 0.075).epsilon(1e-12));
    CHECK(f.tolerated == 1);
    CHECK(f.tau == doctest::Approx((10.0 / 3 + 4.0) / 2).epsilon(1e-12));
    CHECK(f.tau_micro == doctest::Approx(14.0 / 4).epsilon(1e-12));
    CHECK(f.accept_length == doctest::Approx((10.0 / 3 + 4.0) / 2).epsilon(1e-12));
    CHECK(f.histogram == std::vector<int64_t>{0, 0, 2, 2});
    const nlohmann::json j = f.to_json();
    CHECK(j.at("speedup").get<double>() == doctest::Approx(0.2 / 0.075).epsilon(1e-12));
    CHECK(j.at("lossless") == false);
    CHECK(j.at("tolerated_differences") == 1);
    // Without the baseline on one prompt: no timing figures at all.
    b.target_s.reset();
    SpecFigures untimed = summarize_spec({a, b}, 4);
    CHECK_FALSE(untimed.timed);
    CHECK_FALSE(untimed.to_json().contains("speedup"));
    // A prompt whose prefill token was a stop id ran no round: it has no tau, so the macro means
    // leave it out (as the reference's mean over requests with acceptance lengths does).
    SpecPromptResult none;
    none.new_tokens = 1, none.spec_s = 0.1, none.target_s = 0.1;
    SpecFigures with_none = summarize_spec({a, none}, 4);
    CHECK(with_none.prompts == 2);
    CHECK(with_none.tau == doctest::Approx(10.0 / 3).epsilon(1e-12));
    CHECK(with_none.accept_length == doctest::Approx(10.0 / 3).epsilon(1e-12));
    CHECK(with_none.tau_micro == doctest::Approx(10.0 / 3).epsilon(1e-12));
  }

  TEST_CASE("spec --output: one record per prompt with the golden completion and the reference's counts") {
    TempDir tmp("spec-output");
    SpecCommandOptions o = golden_options();
    o.output = tmp / "records.jsonl";
    SpecRun r = capture_spec(spec_config(tmp), o);
    GoldenSpec g = read_golden_spec();
    std::ifstream in(o.output);
    std::string line;
    size_t i = 0;
    for (; std::getline(in, line); ++i) {
      REQUIRE(i < g.cases.size());
      const GoldenSpecCase& c = g.cases[i];
      json j = json::parse(line);
      CHECK(j.at("prompt_ids") == json(c.prompt));
      CHECK(j.at("output_ids") == json(std::vector<int32_t>(c.output.begin() + long(c.prompt.size()), c.output.end())));
      CHECK(j.at("finish") == "length");
      CHECK(j.at("produced_per_round") == json(c.produced));
      CHECK(j.at("tau").get<double>() == doctest::Approx(c.tau).epsilon(1e-12));
      CHECK(j.at("new_tokens") == 40);
      CHECK(j.at("accepted_per_round").size() == c.produced.size());
    }
    CHECK(i == g.cases.size());
    CHECK_FALSE(fs::exists(o.output.string() + ".tmp"));
    CHECK(r.out.find("per-prompt records: " + o.output.string()) != std::string::npos);
    // With a stop id the record says "stop" and ends at it.
    o.prompts = write_prompts(tmp, "p0.jsonl", "{\"input_ids\": [51, 109, 295, 121]}\n");
    capture_spec(spec_config(tmp, "[eval]\nspec_stop_token_ids = [284]\n"), o);
    std::ifstream stopped(o.output);
    REQUIRE(std::getline(stopped, line));
    json j = json::parse(line);
    CHECK(j.at("output_ids") == json({3, 284}));
    CHECK(j.at("finish") == "stop");
    // A folder that does not exist: refused before any decoding, with the fix.
    o.output = tmp / "no-such-dir" / "r.jsonl";
    CHECK_ERROR(capture_spec(spec_config(tmp), o), "--output " + o.output.string() + ": cannot write");
  }

  TEST_CASE("dflash-train spec reproduces the golden figures and prints them, the last line JSON") {
    TempDir tmp("spec-cmd");
    SpecRun r = capture_spec(spec_config(tmp), golden_options());
    const SpecFigures& f = r.figures;
    CHECK(f.tau == doctest::Approx(1.480775).epsilon(1e-6));
    CHECK(f.tau_micro == doctest::Approx(1.238095).epsilon(1e-6));
    CHECK(f.accept_length == doctest::Approx((40.0 / 14 + 40.0 / 37 + 40.0 / 39 + 40.0 / 36) / 4).epsilon(1e-9));
    CHECK(f.rounds == 126);
    CHECK(f.new_tokens == 160);
    CHECK(f.block_size == 4);  // the export's, not drafter.block_size = 16 of the config
    REQUIRE(f.histogram.size() == 4);
    GoldenSpec g = read_golden_spec();
    std::vector<int64_t> want(4, 0);
    for (const GoldenSpecCase& c : g.cases)
      for (int64_t p : c.produced) ++want[size_t(p - 1)];
    CHECK(f.histogram == want);
    for (size_t i = 0; i < g.cases.size(); ++i) CHECK(f.prompt_tau[i] == doctest::Approx(g.cases[i].tau).epsilon(1e-12));
    CHECK(f.timed);
    CHECK(f.tolerated == 0);
    CHECK(f.tokens_per_s > 0);
    CHECK(f.tokens_per_s_target > 0);
    CHECK(f.speedup == doctest::Approx(f.tokens_per_s / f.tokens_per_s_target).epsilon(1e-9));

    std::vector<std::string> lines = r.lines();
    REQUIRE(!lines.empty());
    json last = json::parse(lines.back());
    CHECK(last.at("tau").get<double>() == doctest::Approx(1.480775).epsilon(1e-6));
    CHECK(last.at("tau_micro").get<double>() == doctest::Approx(1.238095).epsilon(1e-6));
    CHECK(last.at("histogram") == json(want));
    CHECK(last.at("lossless").get<bool>());
    for (const char* key : {"accept_length", "tokens_per_s", "tokens_per_s_target", "speedup", "prompt_tau"})
      CHECK(last.contains(key));
    CHECK(r.out.find("prompt 1/4 (" + (golden_spec_dir() / "prompts.jsonl").string() + ":1): 4 + 40 tokens, 14 rounds, "
                     "tau 2.7857, accept length 2.8571") != std::string::npos);
    CHECK(r.out.find("note: the drafter's block size 4") != std::string::npos);
    CHECK(r.out.find("lossless: every output equals the target's own greedy decoding") != std::string::npos);
  }

  TEST_CASE("without --prompts, the eval data's sequences are cut before their first loss_mask = 1") {
    TempDir tmp("spec-eval-prompts");
    GoldenSpec g = read_golden_spec();
    std::ofstream eval(tmp / "eval.jsonl"), as_prompts(tmp / "prompts.jsonl");
    for (const GoldenSpecCase& c : g.cases) {
      std::vector<int32_t> mask(c.output.size(), 1);
      std::fill(mask.begin(), mask.begin() + long(c.prompt.size()), 0);
      eval << json{{"input_ids", c.output}, {"loss_mask", mask}}.dump() << "\n";
      as_prompts << json{{"input_ids", c.output}, {"loss_mask", mask}}.dump() << "\n";
    }
    eval << json{{"input_ids", {1, 2}}, {"loss_mask", {1, 1}}}.dump() << "\n";  // no prompt part: skipped
    eval.close();
    as_prompts.close();
    SpecCommandOptions o = golden_options();
    o.prompts.clear();
    SpecRun r = capture_spec(spec_config(tmp, "", {}, "eval = \"" + (tmp / "eval.jsonl").string() + "\"\n"), o);
    CHECK(r.figures.prompts == 4);
    CHECK(r.figures.tau == doctest::Approx(1.480775).epsilon(1e-6));
    CHECK(r.out.find("prompts: 4 from " + (tmp / "eval.jsonl").string() +
                     " (each cut before its first loss_mask = 1); 1 sequences without a prompt part skipped") !=
          std::string::npos);
    // A prompts file of training-data lines: each is cut the same way.
    o.prompts = tmp / "prompts.jsonl";
    CHECK(capture_spec(spec_config(tmp), o).figures.tau == doctest::Approx(1.480775).epsilon(1e-6));
    o.prompts.clear();
    // No --prompts and no data.eval: refused with the fix.
    CHECK_ERROR(capture_spec(spec_config(tmp), o), "spec needs prompts: pass --prompts FILE.jsonl, or set data.eval");
  }

  TEST_CASE("stop ids: the target's eos_token_id (int or list), the config's override, and ignore_eos") {
    TempDir tmp("spec-stop");
    fs::path one = write_prompts(tmp, "p0.jsonl", "{\"input_ids\": [51, 109, 295, 121]}\n");
    SpecCommandOptions o = golden_options();
    o.prompts = one;
    // The README's example: with stop id 284, prompt 0 ends after one round as prompt + [3, 284].
    fs::path eos_int = target_copy(tmp, [](json& j) { j["eos_token_id"] = 284; });
    SpecRun r = capture_spec(spec_config(tmp, "", eos_int), o);
    CHECK(r.figures.new_tokens == 2);
    CHECK(r.figures.rounds == 1);
    CHECK(r.out.find("stop ids [284] (the target's eos_token_id)") != std::string::npos);
    fs::remove_all(tmp / "target");
    fs::path eos_list = target_copy(tmp, [](json& j) { j["eos_token_id"] = {7, 284}; });
    CHECK(capture_spec(spec_config(tmp, "", eos_list), o).figures.new_tokens == 2);
    SpecRun ignored = capture_spec(spec_config(tmp, "[eval]\nspec_ignore_eos = true\n", eos_list), o);
    CHECK(ignored.figures.new_tokens == 40);
    SpecRun listed = capture_spec(spec_config(tmp, "[eval]\nspec_stop_token_ids = [284]\n"), o);
    CHECK(listed.figures.new_tokens == 2);
    CHECK(listed.out.find("stop ids [284] (eval.spec_stop_token_ids)") != std::string::npos);
  }

  TEST_CASE("the export's block size is honoured: a block of 2 drafts one token per round") {
    TempDir tmp("spec-block");
    SpecCommandOptions o = golden_options();
    o.drafter = drafter_copy(tmp, [](json& j) { j["block_size"] = 2; });
    SpecRun r = capture_spec(spec_config(tmp), o);
    CHECK(r.figures.block_size == 2);
    CHECK(r.out.find("note: the drafter's block size 2 (from " + o.drafter.string() +
                     ") is used, not drafter.block_size = 16 of the config") != std::string::npos);
    CHECK(r.figures.histogram.size() == 2);
    CHECK(r.figures.tolerated == 0);  // still lossless
    CHECK(r.figures.tau <= 2.0);
    CHECK(r.figures.tau >= 1.0);
  }

  TEST_CASE("a deliberately wrong rollback (off by one position) fails the lossless check") {
    TempDir tmp("spec-rollback");
    for (int32_t bias : {1, -1}) {
      CAPTURE(bias);
      SpecCommandOptions o = golden_options();
      o.rollback_bias = bias;
      CHECK_ERROR(capture_spec(spec_config(tmp), o), "lossless check failed: " +
                                                         (golden_spec_dir() / "prompts.jsonl").string() + ":");
    }
  }

  TEST_CASE("spec: prompts from data skip sequences trained on from the start; stop ids must lie below the vocab") {
    MemoryDataset data({{{1, 2, 3}, {0, 1, 1}}, {{4, 5}, {1, 1}}, {{6, 7}, {0, 0}}}, 10, "d.jsonl");
    int64_t skipped = -1;
    std::vector<SpecPrompt> prompts = spec_prompts_from_data(data, &skipped);
    REQUIRE(prompts.size() == 1);
    CHECK(prompts[0].ids == std::vector<int32_t>{1});
    CHECK(prompts[0].where == "d.jsonl sequence 0");
    CHECK(skipped == 2);

    EvalConfig e;
    e.spec_stop_token_ids = {9};
    std::string source;
    CHECK(spec_stop_ids(e, "unused", 10, &source) == std::vector<int32_t>{9});
    CHECK(source == "eval.spec_stop_token_ids");
    e.spec_stop_token_ids = {3, 10};
    CHECK_ERROR(spec_stop_ids(e, "unused", 10, &source),
                "eval.spec_stop_token_ids holds 10, outside the target's vocabulary [0, 10)");
  }
}

TEST_SUITE("bad-input") {
  TEST_CASE("spec: an empty prompt, ids outside the vocabulary and malformed lines are refused by file and line") {
    TempDir tmp("spec-bad-prompts");
    SpecCommandOptions o = golden_options();
    o.prompts = write_prompts(tmp, "empty.jsonl", "{\"input_ids\": [1, 2]}\n\n{\"input_ids\": []}\n");
    CHECK_ERROR(capture_spec(spec_config(tmp), o), o.prompts.string() + ":3: the prompt is empty");
    o.prompts = write_prompts(tmp, "vocab.jsonl", "{\"input_ids\": [1, 320]}\n");
    CHECK_ERROR(capture_spec(spec_config(tmp), o),
                o.prompts.string() + ":1: token 320 at position 1 is outside the target's vocabulary [0, 320)");
    o.prompts = write_prompts(tmp, "json.jsonl", "{\"input_ids\": [1, 2]\n");
    CHECK_ERROR(capture_spec(spec_config(tmp), o), o.prompts.string() + ":1: not valid JSON");
    o.prompts = write_prompts(tmp, "key.jsonl", "{\"ids\": [1, 2]}\n");
    CHECK_ERROR(capture_spec(spec_config(tmp), o), o.prompts.string() + ":1: no \"input_ids\" array");
    o.prompts = write_prompts(tmp, "neg.jsonl", "{\"input_ids\": [1, -2]}\n");
    CHECK_ERROR(capture_spec(spec_config(tmp), o), o.prompts.string() + ":1: input_ids holds -2, not a token id");
    o.prompts = write_prompts(tmp, "mask.jsonl", "{\"input_ids\": [1, 2], \"loss_mask\": [1, 1]}\n");
    CHECK_ERROR(capture_spec(spec_config(tmp), o), o.prompts.string() + ":1: the prompt is empty");
    o.prompts = write_prompts(tmp, "masklen.jsonl", "{\"input_ids\": [1, 2], \"loss_mask\": [0]}\n");
    CHECK_ERROR(capture_spec(spec_config(tmp), o), o.prompts.string() + ":1: loss_mask must be an array as long");
    o.prompts = tmp / "missing.jsonl";
    CHECK_ERROR(capture_spec(spec_config(tmp), o), "prompts file " + o.prompts.string() + " not found");
  }

  TEST_CASE("spec: prompt + max_new beyond max_position_embeddings, and max_new below 1, are refused") {
    TempDir tmp("spec-bad-len");
    CHECK_ERROR(capture_spec(spec_config(tmp), golden_options(253)),
                ":1: the prompt's 4 tokens plus max_new_tokens 253 = 257 positions, beyond the target's "
                "max_position_embeddings 256");
    CHECK_ERROR(capture_spec(spec_config(tmp), golden_options(0)), "--max-new-tokens 0: it must be at least 1");
  }

  TEST_CASE("spec: a prompt longer than the decoder's recorded capacity is refused") {
    CpuRuntime rt;
    GoldenSpecModels m(Device::cpu(), [] {
      SpecDecoderOptions o;
      o.max_len = 44;
      return o;
    }());
    CHECK_ERROR(m.decoder->decode({1, 2, 3, 4}, 41, {}, true),
                "the prompt's 4 tokens plus max_new_tokens 41 = 45 positions, beyond the 44 the decoder's KV caches "
                "were recorded for");
    CHECK_ERROR(m.decoder->decode({}, 4, {}, false), "the prompt is empty");
  }

  TEST_CASE("spec: a drafter whose dims disagree with the target is refused, naming the dim") {
    TempDir tmp("spec-bad-dims");
    SpecCommandOptions o = golden_options();
    o.drafter = drafter_copy(tmp, [](json& j) { j["hidden_size"] = 32; });
    CHECK_ERROR(capture_spec(spec_config(tmp), o), "its hidden_size is 32 but the target's is 64");
    fs::remove_all(tmp / "drafter");
    o.drafter = drafter_copy(tmp, [](json& j) { j["num_target_layers"] = 6; });
    CHECK_ERROR(capture_spec(spec_config(tmp), o),
                "it was trained on a target of 6 layers (num_target_layers) but this one has 4");
    fs::remove_all(tmp / "drafter");
    o.drafter = drafter_copy(tmp, [](json& j) { j["vocab_size"] = 400; });
    CHECK_ERROR(capture_spec(spec_config(tmp), o), "its vocab_size is 400 but the target's is 320");
  }

  TEST_CASE("spec: a bad eos_token_id or stop id is refused, naming the key") {
    TempDir tmp("spec-bad-eos");
    fs::path bad = target_copy(tmp, [](json& j) { j["eos_token_id"] = "x"; });
    CHECK_ERROR(capture_spec(spec_config(tmp, "", bad), golden_options()), "eos_token_id holds \"x\"");
    fs::remove_all(tmp / "target");
    bad = target_copy(tmp, [](json& j) { j["eos_token_id"] = {7, 320}; });  // the vocabulary is [0, 320)
    CHECK_ERROR(capture_spec(spec_config(tmp, "", bad), golden_options()), "eos_token_id holds 320");
    CHECK_ERROR(capture_spec(spec_config(tmp, "[eval]\nspec_stop_token_ids = [320]\n"), golden_options()),
                "eval.spec_stop_token_ids holds 320, outside the target's vocabulary [0, 320)");
  }
}
