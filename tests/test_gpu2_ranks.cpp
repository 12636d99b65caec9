// Two GPUs through NCCL (run on a 2-GPU host: ./build/dflash-tests -ts='gpu2*'): the trainer on
// cuda:0,1 gives the same metrics bit for bit with the optimizer state sharded or not and with the
// reduction overlapped or not; two trainers driving one GPU each (the in-process stand-in for two
// processes: the same NCCL collectives, a ThreadCoordinator instead of the TCP rendezvous) equal
// one trainer driving both. The multi-process runs themselves are in scripts/gpu2-check.sh.
#ifdef DFLASH_CUDA
#include <thread>

#include "dist/coordinator.h"
#include "runtime/fileio.h"
#include "tests/gpu_test_util.h"
#include "tests/trainer_fixture.h"
#include "train/checkpoint.h"
#include "train/cluster.h"
#include "train/sharded_checkpoint.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;

namespace {
#define REQUIRE_TWO_GPUS()                                                                              \
  REQUIRE_GPU();                                                                                        \
  if (::dflash::cuda_backend::device_count() < 2) FAIL("the gpu2 suites need a host with two GPUs")

Config gpu_job(const std::string& dump, std::vector<std::string> extra) {
  extra.push_back("runtime.devices=cuda:0,1");
  extra.push_back("training.steps=20");
  extra.push_back("data.eval=");
  return small_job(dump, extra, 20);
}

void check_same(const Config& a, const Config& b) {
  auto x = step_records(a.job.dump_folder), y = step_records(b.job.dump_folder);
  REQUIRE(x.size() == 20);
  REQUIRE(y.size() == 20);
  for (size_t i = 0; i < x.size(); ++i) {
    CAPTURE(i);
    for (const char* key : {"loss", "accuracy", "tau", "grad_norm", "lr"}) CHECK(x[i][key] == y[i][key]);
  }
}
}  // namespace

TEST_SUITE("gpu2-ranks") {
  TEST_CASE("cuda:0,1: sharded == unsharded and overlap on == off, bit for bit over 20 steps") {
    REQUIRE_TWO_GPUS();
    Config plain = gpu_job("gpu2-plain", {});
    Config sharded = gpu_job("gpu2-sharded", {"runtime.shard_optimizer=true"});
    Config overlap = gpu_job("gpu2-overlap", {"runtime.overlap_reduction=true"});
    Config both = gpu_job("gpu2-both", {"runtime.overlap_reduction=true", "runtime.shard_optimizer=true"});
    for (const Config* c : {&plain, &sharded, &overlap, &both}) run_training(*c);
    check_same(plain, sharded);
    check_same(plain, overlap);
    check_same(plain, both);
    CHECK(is_sharded_checkpoint(checkpoint_dir(sharded.job.dump_folder, 20)));
    nlohmann::json a = nlohmann::json::parse(read_file_text(plain.job.dump_folder / "startup.json"));
    nlohmann::json b = nlohmann::json::parse(read_file_text(sharded.job.dump_folder / "startup.json"));
    CHECK(b["persistent_bytes"].get<size_t>() < a["persistent_bytes"].get<size_t>());
    // With accumulation only the last micro-batch's program reduces.
    Config accum_plain = gpu_job("gpu2-accum-plain", {"training.grad_accum=3"});
    Config accum_overlap = gpu_job("gpu2-accum-overlap", {"training.grad_accum=3", "runtime.overlap_reduction=true"});
    run_training(accum_plain);
    run_training(accum_overlap);
    check_same(accum_plain, accum_overlap);
    // bf16 buckets: a different rounding, the same course.
    Config bf16 = gpu_job("gpu2-bf16", {"runtime.overlap_reduction=true", "runtime.reduce_dtype=bf16"});
    run_training(bf16);
    auto x = step_records(plain.job.dump_folder), y = step_records(bf16.job.dump_folder);
    REQUIRE(y.size() == 20);
    CHECK(x[0]["loss"] == y[0]["loss"]);
    CHECK(std::fabs(x[19]["loss"].get<double>() - y[19]["loss"].get<double>()) < 0.05 * x[19]["loss"].get<double>());
  }

  TEST_CASE("two trainers driving one GPU each == one trainer driving both (NCCL), sharded too") {
    REQUIRE_TWO_GPUS();
    for (bool shard : {false, true}) {
      CAPTURE(shard);
      const std::string s = shard ? "true" : "false";
      Config one = gpu_job("gpu2-one-" + s, {"runtime.shard_optimizer=" + s});
      run_training(one);
      Config two = gpu_job("gpu2-two-" + s, {"runtime.shard_optimizer=" + s});
      NcclCommunicator comm({0, 1});
      ThreadCoordinator coord(2);
      std::vector<std::string> errors(2);
      std::vector<std::thread> threads;
      for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
          ClusterSpec spec;
          spec.world = 2;
          spec.first_rank = r;
          spec.devices = {Device::cuda(r)};
          spec.comm = &comm;
          spec.coord = &coord.handle(r);
          try {
            run_training(two, {}, &spec);
          } catch (const std::exception& e) {
            errors[size_t(r)] = e.what();
          }
        });
      for (auto& t : threads) t.join();
      CHECK(errors[0] == "");
      CHECK(errors[1] == "");
      check_same(one, two);
    }
  }
}
#endif
