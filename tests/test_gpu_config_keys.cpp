// Config keys read only where NCCL is built (train/cluster.cpp, a launched run's rendezvous):
// runtime.rendezvous_timeout_s bounds rank 0's wait for the other ranks. Suite "gpu-config-keys";
// the other keys: tests/test_config_keys.cpp.
#ifdef DFLASH_NCCL
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>

#include "tests/config_test_util.h"
#include "tests/process_util.h"
#include "train/cluster.h"

using namespace dflash;
using namespace dflash::test;

TEST_SUITE("gpu-config-keys") {
  TEST_CASE("runtime.rendezvous_timeout_s: rank 0 waits that long for a rank that never comes, then names it") {
    LaunchInfo launch;  // rank 0 of two (torchrun); rank 1 never starts
    launch.launcher = "torchrun";
    launch.rank = 0;
    launch.world = 2;
    launch.local_rank = 0;
    launch.local_world = 1;
    launch.master_addr = "127.0.0.1";
    launch.master_port = free_port();
    const int port = free_port();
    const Config cfg = config::parse(config::kMinimal, {"runtime.rendezvous_timeout_s=1",
                                                        "runtime.rendezvous_port=" + std::to_string(port)});
    const auto t0 = std::chrono::steady_clock::now();
    auto waited = std::async(std::launch::async, [&]() -> std::string {
      try {
        ProcessGroup::join(cfg, launch, [](const std::string&) {}, /*with_nccl=*/false);
        return "joined";
      } catch (const std::exception& e) {
        return e.what();
      }
    });
    if (waited.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      FAIL_CHECK("rank 0 still waits after 60 s: runtime.rendezvous_timeout_s = 1 was not honoured");
      std::fflush(nullptr);
      std::_Exit(1);  // a join cannot be cancelled
    }
    const std::string what = waited.get();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(what.find("rendezvous: rank 0 waited 1 s on port " + std::to_string(port)) != std::string::npos);
    CHECK(what.find("but ranks 1 did not arrive") != std::string::npos);
    CHECK(seconds < 30);
  }
}
#endif
