// The memory check before startup: a bucket set whose persistent tensors alone cannot
// fit is refused with the numbers before anything is allocated, and its arithmetic cannot
// overflow (batch 1e7, batch 2^62). The estimate is a lower bound of what a replica really holds.
#include "model/target.h"
#include "tests/capture_output.h"
#include "tests/trainer_fixture.h"
#include "train/job.h"
#include "train/memory_fit.h"
#include "train/replica.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace {

std::string error_of_training(const Config& cfg) {
  try {
    run_training(cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The fixture's job (2 CPU workers, an 8 GiB arena budget between them) with one bucket of the given batch.
Config job_with_batch(const std::string& dump, const std::string& batch) {
  return small_job(dump, {"runtime.memory_limit_gb=8", "buckets=[{seq = 16, anchors = 2, batch = " + batch + "}]"}, 2);
}

}  // namespace

TEST_SUITE("bad-input-memory") {
  TEST_CASE("batch 1e7 is refused before anything is allocated, with the numbers") {
    Config cfg = job_with_batch("mem-1e7", "10000000");
    CaptureFd out(1);
    const std::string msg = error_of_training(cfg);
    const std::string log = out.text();
    INFO(msg);
    CHECK(msg.find("the bucket set does not fit on cpu:0: before any activation, each worker's persistent tensors "
                   "need at least ") != std::string::npos);
    // By hand: per sequence 3 [S] int inputs (ids, mask, the target's ids) and 2 [N] (anchors,
    // keep), each with a staging copy on the CPU, plus the f32 features [S, 2*32]:
    // 1e7 * (2 * (3*16*4 + 2*2*4) + 16*64*4) = 1e7 * 4512 bytes.
    CHECK(msg.find("bucket {seq 16, anchors 2, batch 10000000} static inputs and their staging: 42 GiB "
                   "(45120000000 bytes)") != std::string::npos);
    // Persistent tensors are checked against the machine (runtime.memory_limit_gb budgets the arena).
    CHECK(msg.find("are available (the host's available memory, split among 2 CPU workers)") != std::string::npos);
    CHECK(msg.find("Nothing was allocated") != std::string::npos);
    CHECK(msg.find("fix: lower the batch") != std::string::npos);
    CHECK(log.find("recorded programs") == std::string::npos);
    CHECK_FALSE(fs::exists(cfg.job.dump_folder / "startup.json"));
  }

  TEST_CASE("batch 2^62 overflows 64-bit byte counts and is refused as such, never wrapped") {
    const std::string msg = error_of_training(job_with_batch("mem-2p62", "4611686018427387904"));
    INFO(msg);
    CHECK(msg.find("need at least more than 2^64 bytes (the product overflows)") != std::string::npos);
    CHECK(msg.find("bucket {seq 16, anchors 2, batch 4611686018427387904} static inputs and their staging: more "
                   "than 2^64 bytes") != std::string::npos);

    // The estimate itself: no part wraps around to a small number.
    WorkerShape w;
    w.target = read_target_spec(trainer_root() / "target");
    w.drafter = drafter_spec_for(small_job("mem-2p62"), w.target);
    for (int64_t batch : {int64_t(1) << 62, INT64_MAX}) {
      w.buckets = {{16, 2, batch}};
      const PersistentNeed need = persistent_need(w);
      CHECK_FALSE(need.total.has_value());
      CHECK_FALSE(need.parts.back().bytes.has_value());
    }
    w.buckets = {{16, 2, 10000000}};
    w.cuda = true;  // bf16 features, staging in host memory: 1e7 * (3*16*4 + 2*2*4 + 16*64*2) bytes
    REQUIRE(persistent_need(w).parts.back().bytes.has_value());
    CHECK(*persistent_need(w).parts.back().bytes == uint64_t(10000000) * 2256);
  }

  TEST_CASE("the estimate holds an untied lm_head and the Adam moments, and a need equal to what is available fits") {
    setup_job(small_job("mem-parts"), [](const std::string&) {});  // writes the fixture's target when this runs first
    WorkerShape w;
    w.target = read_target_spec(trainer_root() / "target");
    w.drafter = drafter_spec_for(small_job("mem-parts"), w.target);
    w.buckets = {{16, 2, 3}};
    const uint64_t V = uint64_t(w.target.vocab_size), H = uint64_t(w.target.hidden_size);
    uint64_t params = 0;
    for (const ParamSpec& p : drafter_param_specs(w.drafter)) params += uint64_t(p.shape.numel());
    auto part = [&](const WorkerShape& x, size_t i) {
      const PersistentNeed need = persistent_need(x);
      REQUIRE(need.parts.size() > i);
      REQUIRE(need.parts[i].bytes.has_value());
      return *need.parts[i].bytes;
    };
    for (const bool cuda : {false, true}) {
      CAPTURE(cuda);
      w.cuda = cuda;
      const uint64_t elem = cuda ? 2 : 4;  // the target's weights: bf16 on a GPU, f32 on the CPU
      WorkerShape tied = w, untied = w;
      tied.target.tie_word_embeddings = true;
      untied.target.tie_word_embeddings = false;
      CHECK(part(untied, 0) - part(tied, 0) == V * H * elem);  // the lm_head's own [V, H]
      WorkerShape eval = w;
      eval.train = false;
      CHECK(part(w, 1) - part(eval, 1) == params * 8);  // Adam's m and v, f32
    }
    w.cuda = false;
    const uint64_t total = *persistent_need(w).total;
    CHECK_NOTHROW(check_persistent_fit(w, total, "cpu:0", "a test's figure"));
    CHECK_THROWS_WITH_AS(check_persistent_fit(w, total - 1, "cpu:0", "a test's figure"),
                         doctest::Contains("the bucket set does not fit on cpu:0"), Error);
  }

  TEST_CASE("the estimate is a lower bound of the persistent bytes a replica really allocates") {
    for (const bool online : {true, false}) {
      Config cfg = small_job("mem-bound");
      setup_job(cfg, [](const std::string&) {});  // writes the fixture's target when this runs first
      const TargetSpec target = read_target_spec(trainer_root() / "target");
      ReplicaOptions o;
      o.device = Device::cpu();
      o.spec = drafter_spec_for(cfg, target);
      o.target_dir = trainer_root() / "target";
      o.buckets = cfg.buckets;
      o.online = online;
      o.eval = false;
      Replica r(o);
      const size_t real = r.context().persistent_bytes();
      const PersistentNeed need = persistent_need({target, o.spec, cfg.buckets, false, true, online});
      REQUIRE(need.total.has_value());
      INFO("online " << online << ": estimate " << *need.total << ", allocated " << real);
      CHECK(*need.total <= real);
      CHECK(*need.total >= real * 8 / 10);  // and a close one (alignment and small buffers aside)
    }
  }
}
