// spec_tau in training ([eval] spec_prompts, spec_every, spec_max_new_tokens): measured before,
// during and after training in online and offline mode, split over two CPU workers, and equal to
// what `dflash-train spec` reports for the final checkpoint; bad spec prompts refused at startup.
#include "tests/spec_test_util.h"
#include "tests/target_fixtures.h"
#include "tests/trainer_fixture.h"
#include "train/commands.h"
#include "train/spec_eval.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace {
// The spec_tau records of a dump folder's metrics.jsonl.
std::vector<nlohmann::json> spec_records(const fs::path& dump) {
  std::ifstream in(dump / "metrics.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("spec_tau")) out.push_back(j);
  }
  return out;
}

std::vector<std::string> spec_keys(const fs::path& prompts, int64_t every) {
  return {"eval.spec_prompts=" + prompts.string(), "eval.spec_every=" + std::to_string(every),
          "eval.spec_max_new_tokens=12", "eval.spec_ignore_eos=true"};
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
}  // namespace

TEST_SUITE("spec") {
  TEST_CASE("training logs spec_tau before, every spec_every steps and after; it equals spec on the checkpoint") {
    const fs::path prompts = trainer_root() / "data" / "eval.jsonl";  // data lines: cut before the response
    Config cfg = small_job("spec-online", with({"training.steps=4"}, spec_keys(prompts, 2)), 4);
    std::string out = capture_stdout([&] { run_training(cfg); });
    CHECK(out.find("spec_tau: 8 prompts from " + prompts.string() + " split over 2 worker(s), max_new_tokens 12") !=
          std::string::npos);
    std::vector<nlohmann::json> rec = spec_records(cfg.job.dump_folder);
    REQUIRE(rec.size() == 3);
    CHECK(rec[0]["step"] == 0);
    CHECK(rec[0]["eval"] == "spec_tau before training");
    CHECK(rec[1]["step"] == 2);
    CHECK(rec[2]["step"] == 4);
    CHECK(rec[2]["eval"] == "spec_tau after training");
    for (const auto& r : rec) {
      CHECK(r["spec_tau"].get<double>() >= 1.0);
      CHECK(r["spec_tau"].get<double>() <= 4.0);
      CHECK(r.contains("spec_tau_micro"));
      CHECK(r.contains("spec_accept_length"));
    }
    CHECK(step_records(cfg.job.dump_folder).size() == 4);  // the step records are untouched
    // The same measurement by the spec command (one decoder) on the final checkpoint.
    SpecCommandOptions o;
    o.drafter = cfg.job.dump_folder / "checkpoints" / "step-4";
    o.prompts = prompts;
    SpecFigures f;
    capture_stdout([&] { f = run_spec(cfg, o); });
    CHECK(f.prompts == 8);
    CHECK(f.tau == rec[2]["spec_tau"].get<double>());
    CHECK(f.tau_micro == rec[2]["spec_tau_micro"].get<double>());
  }

  TEST_CASE("offline mode loads the target for spec_tau and says so at startup") {
    const fs::path prompts = trainer_root() / "data" / "eval.jsonl";
    Config cfg = small_job("spec-offline", with({"training.steps=2", "data.mode=offline"}, spec_keys(prompts, 0)), 2);
    capture_stdout([&] { run_hidden(cfg); });
    std::string out = capture_stdout([&] { run_training(cfg); });
    CHECK(out.find("offline mode: the target is loaded to decode eval.spec_prompts (spec_tau)") != std::string::npos);
    std::vector<nlohmann::json> rec = spec_records(cfg.job.dump_folder);
    REQUIRE(rec.size() == 2);
    CHECK(rec[0]["step"] == 0);
    CHECK(rec[1]["step"] == 2);
  }
}

TEST_SUITE("bad-input") {
  TEST_CASE("training with bad eval.spec_prompts is refused at startup, naming the file and line") {
    TempDir tmp("spec-train-bad");
    Config missing = small_job("spec-bad", spec_keys(tmp / "nope.jsonl", 0), 2);
    CHECK_ERROR(capture_stdout([&] { run_training(missing); }), "prompts file " + (tmp / "nope.jsonl").string() + " not found");
    std::ofstream(tmp / "p.jsonl") << "{\"input_ids\": [1, 64]}\n";
    Config vocab = small_job("spec-bad", spec_keys(tmp / "p.jsonl", 0), 2);
    CHECK_ERROR(capture_stdout([&] { run_training(vocab); }),
                "eval.spec_prompts " + (tmp / "p.jsonl").string() +
                    ":1: token 64 at position 1 is outside the target's vocabulary [0, 64)");
  }
}
