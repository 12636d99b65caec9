// One run over several ranks, with ranks that are trainers in threads of one process sharing a
// ThreadCommunicator and a ThreadCoordinator: the CPU stand-in for one process per GPU (the
// trainer cannot tell them apart; only the communicator and the coordinator differ). Checked
// against a one-process run with worker threads: same metrics bit for bit, sharded == unsharded,
// a stop on one rank stops all after the same step, resume (also on another world size, and a
// plain checkpoint into a sharded run), the sharded checkpoint layout read by export and eval, and
// the ranks' agreement checks.
#include <unistd.h>

#include <thread>

#include "dist/coordinator.h"
#include "dist/rendezvous.h"
#include "runtime/fileio.h"
#include "runtime/safetensors.h"
#include "tests/trainer_fixture.h"
#include "train/checkpoint.h"
#include "train/cluster.h"
#include "train/commands.h"
#include "train/export.h"
#include "train/sharded_checkpoint.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace {
struct RankRun {
  std::vector<TrainResult> results;
  std::vector<std::string> errors;  // "" when the rank finished
};

// `world` trainers, one rank each, in threads; cfg_of(rank) and hooks_of(rank) give each its own; wrap(rank, real)
// may put a coordinator in front of a rank's real one (nullptr: none).
using CoordinatorWrap = std::function<std::unique_ptr<Coordinator>(int, Coordinator&)>;
RankRun run_ranks(int world, const std::function<Config(int)>& cfg_of,
                  const std::function<TrainHooks(int)>& hooks_of = {}, const CoordinatorWrap& wrap = {}) {
  ThreadCommunicator comm(world);
  ThreadCoordinator coord(world);
  RankRun out;
  out.results.resize(size_t(world));
  out.errors.resize(size_t(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      ClusterSpec spec;
      spec.world = world;
      spec.first_rank = r;
      spec.devices = {Device::cpu(r)};
      spec.comm = &comm;
      std::unique_ptr<Coordinator> wrapped = wrap ? wrap(r, coord.handle(r)) : nullptr;
      spec.coord = wrapped ? wrapped.get() : &coord.handle(r);
      try {
        out.results[size_t(r)] = run_training(cfg_of(r), hooks_of ? hooks_of(r) : TrainHooks{}, &spec);
      } catch (const std::exception& e) {
        out.errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

RankRun run_ranks(int world, const Config& cfg) {
  return run_ranks(world, [&](int) { return cfg; });
}

void check_same_records(const fs::path& a_dump, const fs::path& b_dump, size_t steps) {
  auto a = step_records(a_dump), b = step_records(b_dump);
  REQUIRE(a.size() == steps);
  REQUIRE(b.size() == steps);
  for (size_t i = 0; i < steps; ++i) {
    CAPTURE(i);
    for (const char* key : {"step", "loss", "accuracy", "tau", "grad_norm", "lr", "bucket"}) CHECK(a[i][key] == b[i][key]);
  }
}

std::vector<float> all_exported(const fs::path& checkpoint) {
  fs::path out = checkpoint.parent_path().parent_path() / ("export-all-" + checkpoint.filename().string());
  run_export(checkpoint, out, "f32");
  SafeTensors st(out / "model.safetensors");
  std::vector<float> all;
  for (const std::string& n : st.names()) {
    std::vector<float> v = st.read_floats(n);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}
}  // namespace

TEST_SUITE("ranks") {
  TEST_CASE("2 ranks as separate trainers log exactly what one trainer with 2 worker threads logs") {
    Config threads = small_job("ranks-threads", {"training.steps=8"}, 8);
    run_training(threads);
    Config ranks = small_job("ranks-ranks", {"training.steps=8"}, 8);
    RankRun run = run_ranks(2, ranks);
    REQUIRE(run.errors[0] == "");
    REQUIRE(run.errors[1] == "");
    check_same_records(threads.job.dump_folder, ranks.job.dump_folder, 8);
    // Rank 0 alone logs (one metrics.jsonl, one startup.json, the eval figures).
    CHECK(run.results[0].after.has_value());
    CHECK_FALSE(run.results[1].after.has_value());
    CHECK(run.results[0].after->loss == run_eval(threads, run.results[0].last_checkpoint).loss);
    nlohmann::json s = nlohmann::json::parse(read_file_text(ranks.job.dump_folder / "startup.json"));
    CHECK(s["workers"] == 2);
    CHECK(all_exported(run.results[0].last_checkpoint) == all_exported(checkpoint_dir(threads.job.dump_folder, 8)));
  }

  TEST_CASE("sharded == unsharded bit for bit (threads and ranks, 2 and 3 ranks), with a smaller state per rank") {
    for (int world : {2, 3}) {
      CAPTURE(world);
      const std::string w = std::to_string(world);
      Config plain = small_job("shard-plain-" + w, {"training.steps=6", "runtime.cpu_workers=" + w}, 6);
      Config sharded = small_job("shard-threads-" + w, {"training.steps=6", "runtime.cpu_workers=" + w,
                                                        "runtime.shard_optimizer=true"}, 6);
      TrainResult a = run_training(plain);
      TrainResult b = run_training(sharded);
      check_same_records(plain.job.dump_folder, sharded.job.dump_folder, 6);
      CHECK(is_sharded_checkpoint(b.last_checkpoint));
      CHECK_FALSE(is_sharded_checkpoint(a.last_checkpoint));
      CHECK(all_exported(a.last_checkpoint) == all_exported(b.last_checkpoint));
      nlohmann::json sa = nlohmann::json::parse(read_file_text(plain.job.dump_folder / "startup.json"));
      nlohmann::json sb = nlohmann::json::parse(read_file_text(sharded.job.dump_folder / "startup.json"));
      CHECK(sb["shard_optimizer"] == true);
      CHECK(sb["persistent_bytes"].get<size_t>() < sa["persistent_bytes"].get<size_t>());
      Config ranks = small_job("shard-ranks-" + w, {"training.steps=6", "runtime.shard_optimizer=true"}, 6);
      RankRun run = run_ranks(world, ranks);
      for (const std::string& e : run.errors) CHECK(e == "");
      check_same_records(plain.job.dump_folder, ranks.job.dump_folder, 6);
    }
  }

  TEST_CASE("a stop on one rank stops every rank after the same step; the checkpoint resumes exactly") {
    for (bool shard : {false, true}) {
      CAPTURE(shard);
      const std::string tag = shard ? "sharded" : "plain";
      const std::string key = std::string("runtime.shard_optimizer=") + (shard ? "true" : "false");
      Config straight = small_job("stop-straight-" + tag, {"training.steps=10", key}, 10);
      run_training(straight);
      Config split = small_job("stop-split-" + tag, {"training.steps=10", key}, 10);
      std::atomic<int64_t> done{0};
      RankRun first = run_ranks(
          2, [&](int) { return split; },
          [&](int rank) {
            TrainHooks h;
            if (rank == 1) {
              h.after_step = [&](int64_t step) { done = step; };
              h.stop_requested = [&] { return done.load() >= 4; };  // rank 1 only, before step 5
            }
            return h;
          });
      REQUIRE(first.errors[0] == "");
      REQUIRE(first.errors[1] == "");
      for (const TrainResult& r : first.results) {
        CHECK(r.interrupted);
        CHECK(r.steps_done == 5);
      }
      CHECK(fs::exists(split.job.dump_folder / "checkpoints" / "step-5" / "COMPLETE.json"));
      CHECK(is_sharded_checkpoint(split.job.dump_folder / "checkpoints" / "step-5") == shard);
      RankRun second = run_ranks(2, split);
      REQUIRE(second.errors[0] == "");
      CHECK(second.results[0].start_step == 5);
      CHECK(second.results[1].steps_done == 10);
      check_same_records(straight.job.dump_folder, split.job.dump_folder, 10);
    }
  }

  TEST_CASE("2 ranks for 10 steps, then 1 rank with grad_accum doubled: the run continues as the 2-rank run") {
    Config straight = small_job("world-straight", {"runtime.shard_optimizer=true"}, 20);
    RankRun base = run_ranks(2, straight);
    REQUIRE(base.errors[0] == "");
    Config split = small_job("world-split", {"runtime.shard_optimizer=true"}, 20);
    std::atomic<int64_t> done{0};
    RankRun first = run_ranks(
        2, [&](int) { return split; },
        [&](int rank) {
          TrainHooks h;
          h.after_step = [&](int64_t step) { done = step; };
          h.stop_requested = [&done, rank] { return rank == 0 && done.load() >= 9; };
          return h;
        });
    REQUIRE(first.errors[0] == "");
    REQUIRE(first.results[0].steps_done == 10);
    // Continue from the step-10 checkpoint on one rank with twice the accumulation.
    Config one = small_job("world-split", {"runtime.cpu_workers=1", "training.grad_accum=4"}, 20);
    TrainResult r = run_training(one);
    CHECK(r.start_step == 10);
    CHECK(r.steps_done == 20);
    auto a = step_records(straight.job.dump_folder), b = step_records(split.job.dump_folder);
    REQUIRE(a.size() == 20);
    REQUIRE(b.size() == 20);
    double worst = 0;
    for (size_t i = 0; i < 20; ++i) {
      CAPTURE(i);
      const double la = a[i]["loss"].get<double>(), lb = b[i]["loss"].get<double>();
      if (i <= 10) CHECK(la == lb);  // step 11's loss comes from step 10's parameters, restored exactly
      else CHECK(std::fabs(la - lb) <= 1e-4 * std::fabs(la));
      worst = std::max(worst, std::fabs(la - lb) / std::fabs(la));
      CHECK(a[i]["lr"] == b[i]["lr"]);
    }
    MESSAGE("2 ranks -> 1 rank with grad_accum doubled: largest relative loss difference " << worst);
  }

  TEST_CASE("a plain checkpoint resumes into a sharded run (2 workers): the run continues bit for bit") {
    // Each worker takes its slice of the plain checkpoint's Adam m and v (and its step); sharded ==
    // unsharded bit for bit (above), so the resumed run must log the uninterrupted plain run's steps.
    const std::vector<std::string> keys = {"training.steps=8", "runtime.cpu_workers=2"};
    Config straight = small_job("resplit-straight", keys, 8);
    run_training(straight);
    Config split = small_job("resplit-split", keys, 8);
    TrainHooks stop_at_4;
    stop_at_4.after_step = [](int64_t step) {
      if (step == 4) request_training_stop();
    };
    TrainResult first = run_training(split, stop_at_4);
    REQUIRE(first.steps_done == 4);
    REQUIRE_FALSE(is_sharded_checkpoint(checkpoint_dir(split.job.dump_folder, 4)));
    std::vector<std::string> sharded_keys = keys;
    sharded_keys.push_back("runtime.shard_optimizer=true");
    TrainResult second = run_training(small_job("resplit-split", sharded_keys, 8));
    CHECK(second.start_step == 4);
    CHECK(second.steps_done == 8);
    CHECK(is_sharded_checkpoint(second.last_checkpoint));
    check_same_records(straight.job.dump_folder, split.job.dump_folder, 8);
  }

  TEST_CASE("eval and export read the sharded layout; it resumes into an unsharded run") {
    Config sharded = small_job("layout-sharded", {"training.steps=3", "runtime.shard_optimizer=true"}, 3);
    TrainResult r = run_training(sharded);
    const fs::path dir = r.last_checkpoint;
    REQUIRE(is_sharded_checkpoint(dir));
    for (const char* f : {"shard-00000-of-00002.safetensors", "shard-00001-of-00002.safetensors", "manifest.json",
                          "state.json", "drafter_config.json", "COMPLETE.json"})
      CHECK(fs::exists(dir / f));
    CHECK_FALSE(fs::exists(dir / "params.safetensors"));
    EvalResult e = run_eval(sharded, dir);
    CHECK(e.loss == r.after->loss);
    // A sharded run warm-starts from it (every rank writes its part of the masters).
    Config warm = small_job("layout-warm", {"training.steps=2", "runtime.shard_optimizer=true",
                                            "drafter.init=" + dir.string()}, 2);
    TrainResult w = run_training(warm);
    CHECK(w.steps_done == 2);
    CHECK(w.before->loss == e.loss);  // the same parameters before any step
    Config more = small_job("layout-sharded", {"training.steps=5"}, 5);  // unsharded now
    TrainResult m = run_training(more);
    CHECK(m.start_step == 3);
    CHECK_FALSE(is_sharded_checkpoint(m.last_checkpoint));
    // A damaged shard is found by its checksum and skipped on resume.
    fs::path shard = dir / "shard-00001-of-00002.safetensors";
    std::string bytes = read_file_text(shard);
    bytes[bytes.size() - 3] ^= 0x40;
    write_file_atomic(shard, bytes);
    CHECK(checkpoint_problem(dir).value().find("shard-00001-of-00002.safetensors has checksum") != std::string::npos);
  }

  TEST_CASE("the trainer's control messages over the TCP rendezvous (ranks as threads): the same run") {
    Config plain = small_job("tcp-plain", {"training.steps=6", "runtime.shard_optimizer=true"}, 6);
    run_training(plain);
    Config tcp = small_job("tcp-ranks", {"training.steps=6", "runtime.shard_optimizer=true"}, 6);
    ThreadCommunicator comm(2);
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    const int port = 20000 + int(::getpid() % 20000);
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        try {
          RendezvousOptions o;
          o.rank = r;
          o.world = 2;
          o.master_addr = "127.0.0.1";
          o.port = port;
          o.timeout_s = 30;
          std::unique_ptr<Rendezvous> rdzv = Rendezvous::join(o);
          ClusterSpec spec;
          spec.world = 2;
          spec.first_rank = r;
          spec.devices = {Device::cpu(r)};
          spec.comm = &comm;
          spec.coord = rdzv.get();
          run_training(tcp, {}, &spec);
          rdzv->finish();
        } catch (const std::exception& e) {
          errors[size_t(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    CHECK(errors[0] == "");
    CHECK(errors[1] == "");
    check_same_records(plain.job.dump_folder, tcp.job.dump_folder, 6);
  }

  TEST_CASE("dflash-train hidden splits the data across 3 ranks; offline training from it equals online training") {
    Config online = small_job("hidden-online", {"training.steps=5"}, 5);
    run_training(online);
    Config offline = small_job("hidden-offline", {"training.steps=5", "data.mode=offline"}, 5);
    ThreadCoordinator coord(3);
    std::vector<std::string> errors(3);
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r)
      threads.emplace_back([&, r] {
        ClusterSpec spec;
        spec.world = 3;
        spec.first_rank = r;
        spec.devices = {Device::cpu(r)};
        spec.coord = &coord.handle(r);
        try {
          run_hidden(offline, &spec);
        } catch (const std::exception& e) {
          errors[size_t(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (const std::string& e : errors) CHECK(e == "");
    nlohmann::json index = nlohmann::json::parse(read_file_text(offline.job.dump_folder / "hidden" / "index.json"));
    CHECK(index["sequences"] == 48);
    CHECK(index["shards"].size() == 3);
    CHECK(index["shards"][2]["file"] == "hidden-p00002-00000.bin");
    run_training(offline);
    check_same_records(online.job.dump_folder, offline.job.dump_folder, 5);
  }

  TEST_CASE("runtime.overlap_reduction on CPU workers leaves the reduction to the update: the same run") {
    Config off = small_job("overlap-off", {"training.steps=4"}, 4);
    Config on = small_job("overlap-on", {"training.steps=4", "runtime.overlap_reduction=true"}, 4);
    run_training(off);
    run_training(on);
    check_same_records(off.job.dump_folder, on.job.dump_folder, 4);
  }

  TEST_CASE("ranks with different configurations or programs refuse to run, naming the difference") {
    Config base = small_job("agree", {"training.steps=2"}, 2);
    Config other = small_job("agree", {"training.steps=2", "training.lr=0.001"}, 2);
    RankRun run = run_ranks(2, [&](int rank) { return rank == 0 ? base : other; });
    for (const std::string& e : run.errors) {
      CAPTURE(e);
      CHECK(e.find("rank 1 differs from rank 0 in the configuration: rank 0 has \"training.lr = 0.003\", it has "
                   "\"training.lr = 0.001\"") != std::string::npos);
    }
  }

  TEST_CASE("ranks whose recorded programs differ (one of another build) refuse to run, naming the program") {
    // Rank 1 reports its programs as a rank of another build would: the same configuration, one
    // program with ten times the kernels. Everything else reaches the real coordinator unchanged.
    class OtherBuild : public Coordinator {
     public:
      explicit OtherBuild(Coordinator& real) : real_(real) {}
      int rank() const override { return real_.rank(); }
      int size() const override { return real_.size(); }
      std::vector<std::string> all_gather(const std::string& mine) override {
        std::string s = mine;
        const size_t at = s.starts_with("parameters = ") ? s.find(" kernels, arena ") : std::string::npos;
        if (at != std::string::npos) s.insert(at, "0");
        return real_.all_gather(s);
      }
      void report_failure(const std::string& message) override { real_.report_failure(message); }
      std::optional<std::string> failure() const override { return real_.failure(); }

     private:
      Coordinator& real_;
    };
    Config cfg = small_job("programs", {"training.steps=2"}, 2);
    RankRun run = run_ranks(2, [&](int) { return cfg; }, {}, [](int rank, Coordinator& real) {
      return rank == 1 ? std::unique_ptr<Coordinator>(new OtherBuild(real)) : nullptr;
    });
    for (const std::string& e : run.errors) {
      CAPTURE(e);
      CHECK(e.find("rank 1 differs from rank 0 in the recorded buckets and programs: rank 0 has \"program ") !=
            std::string::npos);
      CHECK(e.find("0 kernels, arena ") != std::string::npos);
      CHECK(e.find("fix: start every rank with the same build, config and data") != std::string::npos);
    }
    CHECK(step_records(cfg.job.dump_folder).empty());  // refused before the first step
  }

  TEST_CASE("a rank that fails makes the others stop with its error instead of waiting") {
    Config base = small_job("fail-one", {"training.steps=6"}, 6);
    RankRun run = run_ranks(
        2, [&](int) { return base; },
        [&](int rank) {
          TrainHooks h;
          if (rank == 1)
            h.after_step = [](int64_t step) {
              if (step == 3) throw Error("the disk is full");
            };
          return h;
        });
    CHECK(run.errors[1] == "the disk is full");
    CHECK(run.errors[0].find("rank 1 stopped: the disk is full") != std::string::npos);
  }
}
