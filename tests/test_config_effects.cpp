// Training keys and their exact effects: the logged lr follows the documented schedule for
// warmup_ratio and min_lr_ratio; eval runs at exactly the steps eval_every names and evaluates
// the weights of that step; checkpoint.every and checkpoint.keep give exactly the expected
// checkpoint sets; checkpoint.resume = false starts over; memory_limit_gb is the arena budget
// to the byte; arena_gb lets every bucket recompute less, and startup names the value that ends
// recomputation when memory allows; drafter.rope_theta is the drafter's rope base.
#include <set>

#include "runtime/fileio.h"
#include "tests/micro_batch_gradients.h"
#include "tests/reference_update.h"
#include "graphs/startup_report.h"
#include "tests/trainer_fixture.h"
#include "train/commands.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace {
// The step numbers N of the checkpoints/step-N directories under a dump folder.
std::set<int64_t> checkpoint_steps(const fs::path& dump) {
  std::set<int64_t> out;
  if (!fs::exists(dump / "checkpoints")) return out;
  for (const auto& e : fs::directory_iterator(dump / "checkpoints")) {
    std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0) out.insert(std::stoll(name.substr(5)));
  }
  return out;
}

// Every record of metrics.jsonl, in order.
std::vector<nlohmann::json> all_records(const fs::path& dump) {
  std::vector<nlohmann::json> out;
  std::string text = read_file_text(dump / "metrics.jsonl");
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    out.push_back(nlohmann::json::parse(text.substr(pos, end - pos)));
    pos = end + 1;
  }
  return out;
}
}  // namespace

TEST_SUITE("config-effects") {
  TEST_CASE("training.warmup_ratio and training.min_lr_ratio: the logged lr is the documented schedule") {
    // (warmup_ratio, min_lr_ratio) over 10 steps: no warmup; 3 warmup steps to a floor of half
    // the peak; warmup over every step (the cosine never starts); round(0.25 * 10) = 3 (ties away).
    for (auto [warmup, floor] : {std::pair<double, double>{0.0, 0.0}, {0.3, 0.5}, {1.0, 0.0}, {0.25, 0.1}}) {
      CAPTURE(warmup);
      CAPTURE(floor);
      std::string tag = std::to_string(int(warmup * 100)) + "-" + std::to_string(int(floor * 100));
      Config cfg = small_job("schedule-" + tag,
                             {"training.steps=10", "training.warmup_ratio=" + std::to_string(warmup),
                              "training.min_lr_ratio=" + std::to_string(floor), "data.eval=\"\""},
                             10);
      run_training(cfg);
      reference::Hyper h;
      h.lr = cfg.training.lr;
      h.warmup_ratio = warmup;
      h.min_lr_ratio = floor;
      h.steps = 10;
      std::vector<nlohmann::json> rec = step_records(cfg.job.dump_folder);
      REQUIRE(rec.size() == 10);
      for (int64_t s = 1; s <= 10; ++s) {
        CAPTURE(s);
        double want = reference::lr_at(h, s);
        CHECK(rec[size_t(s - 1)]["lr"].get<double>() == doctest::Approx(want).epsilon(1e-6));
      }
      // The edges in plain numbers: the last step runs at the floor, the last warmup step at the peak.
      if (warmup < 1.0) CHECK(rec.back()["lr"].get<double>() == doctest::Approx(floor * h.lr).epsilon(1e-6));
      int64_t wu = reference::warmup_steps(h);
      if (wu > 0) CHECK(rec[size_t(wu - 1)]["lr"].get<double>() == doctest::Approx(h.lr).epsilon(1e-6));
    }
  }

  TEST_CASE("training.eval_every: eval runs after exactly steps 3 and 6 of 7, on that step's weights") {
    Config cfg = small_job("eval-every", {"training.steps=7", "training.eval_every=3", "checkpoint.every=3"}, 7);
    run_training(cfg);
    std::vector<std::string> order;
    nlohmann::json at3;
    for (const nlohmann::json& r : all_records(cfg.job.dump_folder)) {
      if (r.contains("eval")) order.push_back(r["eval"].get<std::string>());
      else order.push_back("step " + std::to_string(r["step"].get<int64_t>()));
      if (r.contains("eval") && r["eval"] == "eval at step 3") at3 = r;
    }
    CHECK(order == std::vector<std::string>{"eval before training", "step 1", "step 2", "step 3", "eval at step 3",
                                            "step 4", "step 5", "step 6", "eval at step 6", "step 7",
                                            "eval after training"});
    // The eval at step 3 is `dflash-train eval` of the step-3 checkpoint, figure for figure.
    EvalResult e = run_eval(cfg, cfg.job.dump_folder / "checkpoints" / "step-3");
    CHECK(at3["loss"].get<double>() == e.loss);
    CHECK(at3["accuracy"].get<double>() == e.accuracy);
    CHECK(at3["tau"].get<double>() == e.tau);
    CHECK(at3["blocks"].get<int64_t>() == e.blocks);
    CHECK(at3["tokens"].get<int64_t>() == e.tokens);
  }

  TEST_CASE("checkpoint.every = 2 and checkpoint.keep = 2: exactly the expected checkpoints exist after each step") {
    Config cfg = small_job("ckpt-every-keep",
                           {"training.steps=7", "checkpoint.every=2", "checkpoint.keep=2", "data.eval=\"\""}, 7);
    std::vector<std::set<int64_t>> seen;  // before step s's own save (after_step runs first)
    TrainHooks hooks;
    hooks.after_step = [&](int64_t) { seen.push_back(checkpoint_steps(cfg.job.dump_folder)); };
    TrainResult r = run_training(cfg, hooks);
    using S = std::set<int64_t>;
    CHECK(seen == std::vector<S>{S{}, S{}, S{2}, S{2}, S{2, 4}, S{2, 4}, S{4, 6}});
    CHECK(checkpoint_steps(cfg.job.dump_folder) == S{6, 7});  // the final save, then the newest two
    CHECK(r.last_checkpoint == cfg.job.dump_folder / "checkpoints" / "step-7");
  }

  TEST_CASE("checkpoint.resume = false starts from step 0 beside a complete checkpoint and repeats the first run") {
    Config first = small_job("no-resume", {"training.steps=4", "data.eval=\"\""}, 4);
    run_training(first);
    REQUIRE(checkpoint_steps(first.job.dump_folder) == std::set<int64_t>{4});
    // A fresh run refuses an existing metrics.jsonl (tests/test_metrics_log.cpp): the first run's goes aside.
    const std::vector<nlohmann::json> before = step_records(first.job.dump_folder);
    fs::rename(first.job.dump_folder / "metrics.jsonl", first.job.dump_folder / "metrics-first.jsonl");
    Config again = small_job("no-resume", {"training.steps=4", "data.eval=\"\"", "checkpoint.resume=false"}, 4);
    TrainResult r = run_training(again);
    CHECK(r.start_step == 0);
    CHECK(r.steps_done == 4);
    std::vector<nlohmann::json> rec = step_records(first.job.dump_folder);
    REQUIRE(before.size() == 4);
    REQUIRE(rec.size() == 4);
    for (size_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(rec[i]["step"] == before[i]["step"]);
      CHECK(rec[i]["loss"] == before[i]["loss"]);
      CHECK(rec[i]["grad_norm"] == before[i]["grad_norm"]);
    }
    // With resume on (the default) the same folder continues from step 4 instead.
    TrainResult resumed = run_training(small_job("no-resume", {"training.steps=5", "data.eval=\"\""}, 5));
    CHECK(resumed.start_step == 4);
  }

  TEST_CASE("runtime.memory_limit_gb is the arena budget to the byte, split among CPU workers") {
    // The largest program's arena, from a run without a limit (the default job has 2 CPU workers).
    Config probe = small_job("memory-probe", {"training.steps=1", "data.eval=\"\""}, 1);
    run_training(probe);
    nlohmann::json startup = nlohmann::json::parse(read_file_text(probe.job.dump_folder / "startup.json"));
    const int64_t arena = startup["arena_bytes"].get<int64_t>();
    REQUIRE(arena > 0);
    auto limit = [](int64_t bytes) {  // exact in binary: bytes / 2^30
      char buf[64];
      std::snprintf(buf, sizeof buf, "runtime.memory_limit_gb=%.17g", double(bytes) / double(1ull << 30));
      return std::string(buf);
    };
    Config fits = small_job("memory-fits", {"training.steps=1", "data.eval=\"\"", limit(2 * arena)}, 1);
    CHECK(run_training(fits).steps_done == 1);
    Config short_by_one = small_job("memory-short", {"training.steps=1", "data.eval=\"\"", limit(2 * arena - 2)}, 1);
    const std::string needs = "(" + std::to_string(arena) + " bytes) on top of";
    const std::string available = "(" + std::to_string(arena - 1) + " bytes) are available";
    CHECK_THROWS_WITH_AS(run_training(short_by_one), doctest::Contains(needs.c_str()), Error);
    CHECK_THROWS_WITH_AS(run_training(short_by_one), doctest::Contains(available.c_str()), Error);
  }

  TEST_CASE("runtime.arena_gb: an arena that holds every bucket without recomputation recomputes nothing, same losses") {
    Config least = small_job("arena-least", {"training.steps=2", "data.eval=\"\""}, 1);
    run_training(least);
    nlohmann::json s0 = nlohmann::json::parse(read_file_text(least.job.dump_folder / "startup.json"));
    int64_t recomputed = 0, without = 0;
    for (const nlohmann::json& p : s0["buckets"]) {
      recomputed += p["recomputed_segments"].get<int64_t>();
      without = std::max(without, p["arena_bytes_without_checkpointing"].get<int64_t>());
    }
    REQUIRE(recomputed > 0);  // the smallest arena makes the largest bucket recompute
    char budget[64];
    std::snprintf(budget, sizeof budget, "runtime.arena_gb=%.17g", double(without) / double(1ull << 30));
    Config roomy = small_job("arena-roomy", {"training.steps=2", "data.eval=\"\"", budget}, 1);
    run_training(roomy);
    nlohmann::json s1 = nlohmann::json::parse(read_file_text(roomy.job.dump_folder / "startup.json"));
    for (const nlohmann::json& p : s1["buckets"]) CHECK(p["recomputed_segments"].get<int64_t>() == 0);
    CHECK(s1["arena_bytes"].get<int64_t>() == without);
    // Recomputation is bit for bit the same as none: the losses agree exactly.
    const std::vector<nlohmann::json> a = step_records(least.job.dump_folder), b = step_records(roomy.job.dump_folder);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i]["loss"].get<double>() == b[i]["loss"].get<double>());
  }

  TEST_CASE("startup names the runtime.arena_gb that ends recomputation when memory allows it, and that value does") {
    const fs::path root = trainer_root(), config = root / "hint.toml", log = root / "hint.log";
    write_file_atomic(config, small_job_toml("hint-dump", 1));
    const fs::path binary = fs::canonical("/proc/self/exe").parent_path() / "dflash-train";
    REQUIRE_MESSAGE(fs::exists(binary), binary.string() << " is missing: build the dflash-train target too");
    auto run = [&](const std::string& extra) {
      const std::string cmd = binary.string() + " --config " + config.string() +
                              " --training.steps=1 --data.eval=\"\" --metrics.progress=false --checkpoint.every=0 " +
                              extra + " > " + log.string() + " 2>&1";
      REQUIRE(std::system(cmd.c_str()) == 0);
      return read_file_text(log);
    };
    if (available_memory_bytes(Device::cpu()) < (2ull << 30)) {
      MESSAGE("skipped: under 2 GiB of host memory free, so no hint is due");
      return;
    }
    const std::string out = run("");
    INFO(out);
    const size_t at = out.find("runtime.arena_gb = ");
    REQUIRE(at != std::string::npos);  // the smallest arena recomputes, and this host has room
    CHECK(out.find("hint: ") != std::string::npos);
    const double gb = std::stod(out.substr(at + 19));
    // Nothing recomputes under the named budget.
    char budget[64];
    std::snprintf(budget, sizeof budget, "--runtime.arena_gb=%.2f", gb);
    const std::string roomy = run(budget);
    CHECK(roomy.find("hint: ") == std::string::npos);  // a budget was set: no hint
    const nlohmann::json s = nlohmann::json::parse(read_file_text(root / "hint-dump" / "startup.json"));
    for (const nlohmann::json& p : s["programs"]) CHECK(p["recomputed_segments"].get<int64_t>() == 0);
    // A memory limit a byte below the arena without checkpointing (per worker; the job's two CPU
    // workers split the limit): no hint, since the value could not be used.
    int64_t without = 0;
    for (const nlohmann::json& p : s["programs"])
      without = std::max(without, p["arena_bytes_without_checkpointing"].get<int64_t>());
    std::snprintf(budget, sizeof budget, "--runtime.memory_limit_gb=%.17g", double(2 * without - 2) / double(1ull << 30));
    CHECK(run(budget).find("hint: ") == std::string::npos);
  }

  TEST_CASE("recompute_hint: growth times the workers sharing the memory, plus 1 GiB, must be free") {
    StartupReport r;
    r.arena_bytes = 2ull << 30;
    ProgramReport p;
    p.name = "train/4096";
    p.recomputed = 5, p.segments = 5;
    p.arena_bytes = 2ull << 30;
    p.arena_bytes_without_checkpointing = (6ull << 30) - (1ull << 20);  // 6 GiB - 1 MiB: rounds up to 6.00
    r.programs = {p};
    const size_t growth = p.arena_bytes_without_checkpointing - r.arena_bytes, gib = 1ull << 30;
    CHECK(recompute_hint(r, false, growth + gib, 1, 0).find("runtime.arena_gb = 6.00 ") != std::string::npos);
    CHECK(recompute_hint(r, false, growth + gib - 1, 1, 0).empty());
    CHECK(recompute_hint(r, false, 2 * growth + gib - 1, 2, 0).empty());  // two CPU workers grow two arenas
    CHECK_FALSE(recompute_hint(r, false, 2 * growth + gib, 2, 0).empty());
    CHECK(recompute_hint(r, true, 100 * gib, 1, 0).empty());  // runtime.arena_gb was set
    CHECK(recompute_hint(r, false, 100 * gib, 1, p.arena_bytes_without_checkpointing - 1).empty());
    CHECK_FALSE(recompute_hint(r, false, 100 * gib, 1, p.arena_bytes_without_checkpointing).empty());
    r.programs[0].recomputed = 0;  // nothing recomputes: nothing to buy back
    CHECK(recompute_hint(r, false, 100 * gib, 1, 0).empty());
  }

  TEST_CASE("drafter.rope_theta is the drafter's rope base: the first step's loss is that of a drafter built with it") {
    Config cfg = small_job("rope-theta", {"training.steps=1", "data.eval=\"\"", "drafter.rope_theta=500"}, 1);
    std::vector<float> start;
    TrainHooks hooks;
    hooks.weights = [&](int64_t step, const std::vector<ReplicaWeights>& w) {
      if (step == 0) start = w[0].master;
    };
    run_training(cfg, hooks);
    const double logged = step_records(cfg.job.dump_folder).at(0)["loss"].get<double>();
    // The step's micro-batches through a drafter whose spec is set directly, not from the key
    // (theta 0: the spec the config gives without the key, i.e. the target's base).
    auto first_step_loss = [&](double theta) {
      Config plain = small_job("rope-theta", {"training.steps=1", "data.eval=\"\""}, 1);
      MicroBatchGradients micro(plain, [theta](DrafterSpec& s) {
        if (theta > 0) s.rope_theta = theta;
      });
      const int64_t n = plain.training.grad_accum * plain.runtime.cpu_workers;
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += micro.gradient(start, micro.next()).figures.loss;
      return sum / double(n);
    };
    CHECK(logged == first_step_loss(500));
    CHECK(logged != first_step_loss(0));  // the key matters here: the target's base is not 500
    nlohmann::json exported =
        nlohmann::json::parse(read_file_text(cfg.job.dump_folder / "checkpoints" / "step-1" / "drafter_config.json"));
    CHECK(exported["rope_theta"].get<double>() == 500.0);
  }
}
