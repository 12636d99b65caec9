// The trainer end to end on the CPU: it learns, replay equals eager, a run stopped at step 10 and
// resumed equals an uninterrupted one bit for bit, SIGINT writes a checkpoint and stops cleanly,
// offline training equals online training bit for bit, and the startup report is written.
#include <csignal>

#include "runtime/fileio.h"
#include "tests/trainer_fixture.h"
#include "train/commands.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

TEST_SUITE("trainer") {
  TEST_CASE("a short run learns: loss falls and the eval tau estimate rises") {
    Config cfg = small_job("learns", {"training.steps=120", "metrics.log_every=20"}, 120);
    TrainResult r = run_training(cfg);
    REQUIRE(r.before);
    REQUIRE(r.after);
    CHECK_FALSE(r.interrupted);
    CHECK(r.steps_done == 120);
    CHECK(r.after->loss < r.before->loss);
    CHECK(r.after->tau > r.before->tau);
    std::vector<nlohmann::json> rec = step_records(cfg.job.dump_folder);
    REQUIRE(rec.size() >= 2);
    for (const char* key : {"step", "loss", "accuracy", "tau", "grad_norm", "lr", "tokens_per_s", "step_ms", "bucket"})
      CHECK(rec.back().contains(key));
    // startup.json has the contract's keys.
    nlohmann::json s = nlohmann::json::parse(read_file_text(cfg.job.dump_folder / "startup.json"));
    CHECK(s.contains("device"));
    CHECK(s.contains("persistent_bytes"));
    REQUIRE(s["buckets"].size() == 2);
    for (const char* key : {"seq", "anchors", "batch", "kernels", "arena_bytes", "arena_bytes_without_checkpointing", "record_ms"})
      CHECK(s["buckets"][0].contains(key));
    CHECK(s["buckets"][1]["arena_bytes"].get<size_t>() < s["buckets"][1]["arena_bytes_without_checkpointing"].get<size_t>());
    CHECK(fs::exists(r.last_checkpoint / "COMPLETE.json"));
  }

  TEST_CASE("replay equals eager bit for bit for the DFlash training step") {
    Config graphs = small_job("graphs", {"training.steps=8"}, 8);
    Config eager = small_job("eager", {"training.steps=8", "runtime.graphs=false"}, 8);
    run_training(graphs);
    run_training(eager);
    auto a = step_records(graphs.job.dump_folder), b = step_records(eager.job.dump_folder);
    REQUIRE(a.size() == 8);
    REQUIRE(b.size() == 8);
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i]["loss"] == b[i]["loss"]);
      CHECK(a[i]["grad_norm"] == b[i]["grad_norm"]);
      CHECK(a[i]["tau"] == b[i]["tau"]);
    }
  }

  TEST_CASE("a run stopped at step 10 and resumed to 20 logs exactly the losses of an uninterrupted run") {
    Config straight = small_job("straight");
    run_training(straight);
    Config split = small_job("split");
    TrainHooks stop_at_10;
    stop_at_10.after_step = [](int64_t step) {
      if (step == 10) request_training_stop();
    };
    TrainResult first = run_training(split, stop_at_10);
    CHECK(first.interrupted);
    CHECK(first.steps_done == 10);
    CHECK(fs::exists(split.job.dump_folder / "checkpoints" / "step-10" / "COMPLETE.json"));
    TrainResult second = run_training(split);
    CHECK(second.start_step == 10);
    CHECK(second.steps_done == 20);
    auto a = step_records(straight.job.dump_folder), b = step_records(split.job.dump_folder);
    REQUIRE(a.size() == 20);
    REQUIRE(b.size() == 20);
    for (size_t i = 0; i < 20; ++i) {
      CAPTURE(i);
      CHECK(b[i]["step"] == a[i]["step"]);
      CHECK(b[i]["loss"] == a[i]["loss"]);
      CHECK(b[i]["grad_norm"] == a[i]["grad_norm"]);
      CHECK(b[i]["lr"] == a[i]["lr"]);
    }
  }

  TEST_CASE("SIGINT and SIGTERM write a checkpoint and stop cleanly") {
    for (int sig : {SIGINT, SIGTERM}) {
      Config cfg = small_job("signal-" + std::to_string(sig));
      TrainHooks hooks;
      hooks.after_step = [sig](int64_t step) {
        if (step == 4) std::raise(sig);
      };
      TrainResult r = run_training(cfg, hooks);
      CHECK(r.interrupted);
      CHECK(r.steps_done == 4);
      CHECK(r.last_checkpoint == cfg.job.dump_folder / "checkpoints" / "step-4");
      CHECK(fs::exists(r.last_checkpoint / "COMPLETE.json"));
    }
  }

  TEST_CASE("offline training (hidden states from dflash-train hidden) equals online training bit for bit") {
    Config online = small_job("online", {"training.steps=6"}, 6);
    run_training(online);
    Config offline = small_job("offline", {"training.steps=6", "data.mode=offline"}, 6);
    run_hidden(offline);
    CHECK(fs::exists(offline.job.dump_folder / "hidden" / "index.json"));
    run_training(offline);
    auto a = step_records(online.job.dump_folder), b = step_records(offline.job.dump_folder);
    REQUIRE(a.size() == 6);
    REQUIRE(b.size() == 6);
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i]["loss"] == b[i]["loss"]);
      CHECK(a[i]["grad_norm"] == b[i]["grad_norm"]);
    }
  }

  TEST_CASE("offline mode without hidden-state shards names the command to run") {
    Config cfg = small_job("offline-missing", {"data.mode=offline"});
    CHECK_THROWS_WITH_AS(run_training(cfg), doctest::Contains("run `dflash-train hidden --config"), Error);
  }
}

TEST_SUITE("trainer") {
  TEST_CASE("a run whose loss becomes NaN stops with an error and saves nothing of it") {
    Config cfg = small_job("diverge", {"training.lr=1e30", "training.max_grad_norm=0", "training.steps=30"}, 30);
    CHECK_THROWS_WITH_AS(run_training(cfg), doctest::Contains("training diverged at step"), Error);
    CHECK_FALSE(fs::exists(cfg.job.dump_folder / "checkpoints"));
  }
}
