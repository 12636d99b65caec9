// Launching several processes: launcher variables (torchrun over Slurm), every bad-launch message,
// the GPU a process takes, a launched process in a build without NCCL, and the TCP rendezvous between
// two real processes (fork) on the loopback address and by host name, with its bounds, its timeouts
// and its failure notices.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <thread>

#include "dist/launch.h"
#include "dist/rendezvous.h"
#include "runtime/error.h"
#include "tests/process_util.h"
#include "tests/test_util.h"
#include "train/cluster.h"

using namespace dflash;
using dflash::test::fork_child;
using dflash::test::free_port;
using dflash::test::rendezvous_options;
using dflash::test::wait_child;

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

namespace {
EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

std::map<std::string, std::string> torchrun(int rank, int world, int local, int local_world) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(local)},
          {"LOCAL_WORLD_SIZE", std::to_string(local_world)},
          {"MASTER_ADDR", "node-a"},
          {"MASTER_PORT", "29500"}};
}

std::string launch_error(const std::map<std::string, std::string>& vars) {
  try {
    launch_from_environment(env_of(vars));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}


// 128 bytes with zeros and high bytes, like an ncclUniqueId.
std::string fake_unique_id() {
  std::string id(128, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = char((i * 37 + 11) % 256);
  id[5] = '\0';
  return id;
}

template <class F>
bool eventually(F f, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return f();
}
}  // namespace

TEST_SUITE("launch") {
  TEST_CASE("no launcher variables: one process, today's mode") {
    LaunchInfo l = launch_from_environment(env_of({}));
    CHECK_FALSE(l.distributed());
    CHECK(l.launcher.empty());
    CHECK(l.world == 1);
  }

  TEST_CASE("torchrun's variables give rank, world, local rank and master") {
    LaunchInfo l = launch_from_environment(env_of(torchrun(3, 4, 1, 2)));
    CHECK(l.launcher == "torchrun");
    CHECK(l.distributed());
    CHECK(l.rank == 3);
    CHECK(l.world == 4);
    CHECK(l.local_rank == 1);
    CHECK(l.local_world == 2);
    CHECK(l.master_addr == "node-a");
    CHECK(l.master_port == 29500);
    CHECK(rendezvous_port_for(l, 0) == 29501);
    CHECK(rendezvous_port_for(l, 40000) == 40000);
  }

  TEST_CASE("Slurm's variables, with MASTER_ADDR and MASTER_PORT from the batch script") {
    LaunchInfo l = launch_from_environment(env_of({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"},
                                                    {"MASTER_ADDR", "10.0.0.7"}, {"MASTER_PORT", "29400"}}));
    CHECK(l.launcher == "slurm");
    CHECK(l.rank == 9);
    CHECK(l.world == 16);
    CHECK(l.local_rank == 1);
    CHECK(l.local_world == 0);
    CHECK(l.master_addr == "10.0.0.7");
  }

  TEST_CASE("torchrun's variables win over Slurm's (srun torchrun ...)") {
    auto vars = torchrun(1, 2, 1, 2);
    vars.insert({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"}});
    LaunchInfo l = launch_from_environment(env_of(vars));
    CHECK(l.launcher == "torchrun");
    CHECK(l.rank == 1);
    CHECK(l.world == 2);
  }

  TEST_CASE("a world of one needs no master and stays a one-process run") {
    LaunchInfo l = launch_from_environment(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"}}));
    CHECK_FALSE(l.distributed());
  }

  TEST_CASE("every bad launch gets one error naming the variable") {
    auto t = torchrun(0, 2, 0, 2);
    auto without = [&](const char* name) {
      auto v = t;
      v.erase(name);
      return v;
    };
    auto with = [&](const char* name, const char* value) {
      auto v = t;
      v[name] = value;
      return v;
    };
    CHECK(launch_error(without("WORLD_SIZE")).find("WORLD_SIZE is not set, but RANK is") != std::string::npos);
    CHECK(launch_error(without("RANK")).find("RANK is not set") != std::string::npos);
    CHECK(launch_error(without("LOCAL_RANK")).find("LOCAL_RANK is not set") != std::string::npos);
    CHECK(launch_error(with("RANK", "one")).find("RANK=\"one\" is not a whole number (torchrun sets it)") !=
          std::string::npos);
    CHECK(launch_error(with("WORLD_SIZE", "0")).find("WORLD_SIZE=0 must lie in [1,") != std::string::npos);
    CHECK(launch_error(with("RANK", "2")).find("RANK=2 lies outside WORLD_SIZE=2 (ranks are 0..1)") !=
          std::string::npos);
    CHECK(launch_error(with("LOCAL_RANK", "2")).find("LOCAL_RANK=2 lies outside LOCAL_WORLD_SIZE=2") !=
          std::string::npos);
    CHECK(launch_error(with("LOCAL_WORLD_SIZE", "3")).find("LOCAL_WORLD_SIZE=3 exceeds WORLD_SIZE=2") !=
          std::string::npos);
    CHECK(launch_error(without("MASTER_ADDR")).find("MASTER_ADDR is not set, but WORLD_SIZE=2 processes") !=
          std::string::npos);
    CHECK(launch_error(with("MASTER_ADDR", "")).find("MASTER_ADDR is not set") != std::string::npos);
    CHECK(launch_error(without("MASTER_PORT")).find("MASTER_PORT is not set") != std::string::npos);
    CHECK(launch_error(with("MASTER_PORT", "70000")).find("MASTER_PORT=70000 must lie in [1, 65535]") !=
          std::string::npos);
    std::string slurm = launch_error({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}});
    CHECK(slurm.find("MASTER_ADDR is not set, but SLURM_NTASKS=2") != std::string::npos);
    CHECK(slurm.find("the batch script must export it") != std::string::npos);
    CHECK(launch_error({{"SLURM_PROCID", "1"}}).find("SLURM_NTASKS is not set, but SLURM_PROCID is") !=
          std::string::npos);
    CHECK(launch_error({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}})
              .find("SLURM_PROCID=4 lies outside SLURM_NTASKS=4") != std::string::npos);
    LaunchInfo top = launch_from_environment(env_of(with("MASTER_PORT", "65535")));
    CHECK_THROWS_WITH_AS(rendezvous_port_for(top, 0), doctest::Contains("MASTER_PORT=65535 leaves no port"), Error);
  }

  TEST_CASE("each process takes GPU LOCAL_RANK, or the one GPU it sees") {
    LaunchInfo l = launch_from_environment(env_of(torchrun(5, 8, 1, 4)));
    CHECK(local_gpu_for(l, 4, "auto", std::nullopt) == 1);
    CHECK(local_gpu_for(l, 4, "cuda", std::nullopt) == 1);
    CHECK(local_gpu_for(l, 1, "auto", std::string("3")) == 0);  // srun --gpus-per-task=1
    CHECK(local_gpu_for(l, 4, "cuda:3,2", std::nullopt) == 2);
    LaunchInfo far = launch_from_environment(env_of(torchrun(3, 8, 3, 4)));
    CHECK_THROWS_WITH_AS(local_gpu_for(far, 2, "auto", std::string("0,1")),
                         doctest::Contains("LOCAL_RANK=3 but only 2 GPU(s) are visible (CUDA_VISIBLE_DEVICES=\"0,1\")"),
                         Error);
    CHECK_THROWS_WITH_AS(local_gpu_for(far, 2, "auto", std::nullopt), doctest::Contains("--nproc-per-node=2"), Error);
    // The edges: LOCAL_RANK=3 needs a fourth GPU, a fourth entry in the list, and a listed id below the count seen.
    CHECK(local_gpu_for(far, 4, "auto", std::nullopt) == 3);
    CHECK_THROWS_WITH_AS(local_gpu_for(far, 3, "auto", std::nullopt),
                         doctest::Contains("LOCAL_RANK=3 but only 3 GPU(s) are visible"), Error);
    CHECK(local_gpu_for(far, 8, "cuda:0,1,2,7", std::nullopt) == 7);
    CHECK_THROWS_WITH_AS(local_gpu_for(far, 8, "cuda:0,1,2", std::nullopt),
                         doctest::Contains("LOCAL_RANK=3 but runtime.devices = \"cuda:0,1,2\" names 3 GPU(s)"), Error);
    CHECK_THROWS_WITH_AS(local_gpu_for(l, 4, "cuda:0,4", std::nullopt),
                         doctest::Contains("runtime.devices = \"cuda:0,4\" gives LOCAL_RANK=1 cuda:4, but only 4 GPU(s) are visible"),
                         Error);
    CHECK_THROWS_WITH_AS(local_gpu_for(far, 8, "cuda:0,1", std::nullopt),
                         doctest::Contains("LOCAL_RANK=3 but runtime.devices = \"cuda:0,1\" names 2 GPU(s)"), Error);
    CHECK_THROWS_WITH_AS(local_gpu_for(l, 0, "auto", std::string("")), doctest::Contains("no GPU is visible to RANK=5"),
                         Error);
    CHECK_THROWS_WITH_AS(local_gpu_for(l, 4, "cpu", std::nullopt), doctest::Contains("runtime.devices = \"cpu\""), Error);
    LaunchInfo s = launch_from_environment(env_of({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "3"},
                                                    {"MASTER_ADDR", "n1"}, {"MASTER_PORT", "1234"}}));
    CHECK_THROWS_WITH_AS(local_gpu_for(s, 2, "auto", std::nullopt), doctest::Contains("SLURM_LOCALID=3 but only 2"),
                         Error);
  }

  TEST_CASE("the refusal of a launched process without NCCL names its rank, world and launcher, and the fix") {
    LaunchInfo l;
    l.launcher = "slurm", l.rank = 3, l.world = 4;
    const std::string m = ProcessGroup::refusal_without_nccl(l);
    CHECK(m.find("this process is SLURM_PROCID=3 of SLURM_NTASKS=4 (srun), but this build has no NCCL") == 0);
    CHECK(m.find("fix: build on a machine with the CUDA toolkit and NCCL") != std::string::npos);
  }

#ifndef DFLASH_NCCL
  TEST_CASE("a launched process in a build without NCCL is refused, naming its rank, world and launcher") {
    LaunchInfo l;
    l.launcher = "torchrun", l.rank = 1, l.world = 2, l.master_addr = "127.0.0.1", l.master_port = 29500;
    std::vector<std::string> logged;
    CHECK_THROWS_WITH_AS(ProcessGroup::join(Config{}, l, [&](const std::string& s) { logged.push_back(s); }),
                         doctest::Contains("this process is RANK=1 of WORLD_SIZE=2 (torchrun), but this build has no NCCL"),
                         Error);
    CHECK(logged.empty());
  }
#endif
}

TEST_SUITE("rendezvous") {
  TEST_CASE("two processes meet on the loopback address and by host name; rank 0's bytes reach rank 1") {
    for (const char* addr : {"127.0.0.1", "localhost"}) {
      CAPTURE(addr);
      const int port = free_port();
      const std::string id = fake_unique_id();
      pid_t child = fork_child([&] {
        auto r = Rendezvous::join(rendezvous_options(1, 2, addr, port));
        if (r->payload() != id) return 1;
        std::vector<std::string> all = r->all_gather("from rank 1");
        if (all.size() != 2 || all[0] != "from rank 0" || all[1] != "from rank 1") return 2;
        r->check_same("same", "the programs");
        r->finish();
        return 0;
      });
      RendezvousOptions o0 = rendezvous_options(0, 2, addr, port);
      o0.payload = id;
      auto r = Rendezvous::join(o0);
      CHECK(r->payload() == id);
      std::vector<std::string> all = r->all_gather("from rank 0");
      REQUIRE(all.size() == 2);
      CHECK(all[1] == "from rank 1");
      r->check_same("same", "the programs");
      r->finish();
      CHECK(wait_child(child) == 0);
      CHECK_FALSE(r->failure());
    }
  }

  TEST_CASE("a master that does not answer: the timeout names the address and the port") {
    const int port = free_port();
    RendezvousOptions o = rendezvous_options(1, 2, "127.0.0.1", port, 1.0);
    const std::string want =
        "could not reach rank 0 at MASTER_ADDR=127.0.0.1 port " + std::to_string(port) + " (runtime.rendezvous_port) within 1 s";
    CHECK_THROWS_WITH_AS(Rendezvous::join(o), doctest::Contains(want.c_str()), Error);
    o.master_addr = "no-such-host.invalid";
    CHECK_THROWS_WITH_AS(Rendezvous::join(o), doctest::Contains("no-such-host.invalid"), Error);
  }

  TEST_CASE("rank 0 names the ranks that did not arrive") {
    const int port = free_port();
    CHECK_THROWS_WITH_AS(Rendezvous::join(rendezvous_options(0, 3, "127.0.0.1", port, 1.0)),
                         doctest::Contains("ranks 1, 2 did not arrive"), Error);
  }

  TEST_CASE("inconsistent worlds are refused on both sides") {
    const int port = free_port();
    pid_t child = fork_child([&] {
      try {
        Rendezvous::join(rendezvous_options(1, 3, "127.0.0.1", port));
      } catch (const Error& e) {
        return std::string(e.what()).find("reports a world of 3 processes but rank 0 has 2") != std::string::npos ? 0 : 1;
      }
      return 2;
    });
    CHECK_THROWS_WITH_AS(Rendezvous::join(rendezvous_options(0, 2, "127.0.0.1", port)),
                         doctest::Contains("rank 1 (host"), Error);
    CHECK(wait_child(child) == 0);
  }

  TEST_CASE("a rank killed after the rendezvous is named to the others, whose waits end") {
    const int port = free_port();
    pid_t child = fork_child([&] {
      auto r = Rendezvous::join(rendezvous_options(1, 2, "127.0.0.1", port));
      ::kill(::getpid(), SIGKILL);  // as kill -9
      return 0;
    });
    auto r = Rendezvous::join(rendezvous_options(0, 2, "127.0.0.1", port));
    std::atomic<bool> aborted{false};  // set on the watchdog's thread
    r->set_watch({}, [&] { aborted = true; });
    CHECK_THROWS_WITH_AS(r->all_gather("x"), doctest::Contains("rank 1 (host"), Error);
    REQUIRE(r->failure());
    CHECK(r->failure()->find("exited without finishing") != std::string::npos);
    CHECK(eventually([&] { return aborted.load(); }, 2));
    CHECK(wait_child(child) == 128 + SIGKILL);
  }

  TEST_CASE("an abort hook installed after the watchdog saw a failure still runs, once") {
    const int port = free_port();
    pid_t child = fork_child([&] {
      auto r = Rendezvous::join(rendezvous_options(1, 2, "127.0.0.1", port));
      ::kill(::getpid(), SIGKILL);
      return 0;
    });
    std::atomic<int> aborts{0};  // outlives r, whose watchdog thread counts into it
    auto r = Rendezvous::join(rendezvous_options(0, 2, "127.0.0.1", port));
    REQUIRE(eventually([&] { return r->failure().has_value(); }, 5));
    r->set_watch({}, [&] { ++aborts; });
    CHECK(eventually([&] { return aborts.load() > 0; }, 2));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK(aborts.load() == 1);
    CHECK(wait_child(child) == 128 + SIGKILL);
  }

  TEST_CASE("a rank that stops answering counts as hung after the heartbeat timeout") {
    const int port = free_port();
    pid_t child = fork_child([&] {
      auto r = Rendezvous::join(rendezvous_options(1, 2, "127.0.0.1", port));
      ::kill(::getpid(), SIGSTOP);  // every thread stops, as a hung process
      return 0;
    });
    auto r = Rendezvous::join(rendezvous_options(0, 2, "127.0.0.1", port));
    auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(r->all_gather("x"), doctest::Contains("has not answered for 2 s"), Error);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    ::kill(child, SIGKILL);
    wait_child(child);
  }

  TEST_CASE("a rank's own error reaches the others with its message, and a local poll error fails this rank") {
    const int port = free_port();
    pid_t child = fork_child([&] {
      auto r = Rendezvous::join(rendezvous_options(1, 2, "127.0.0.1", port));
      r->report_failure("the disk is full");
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      return 0;
    });
    auto r = Rendezvous::join(rendezvous_options(0, 2, "127.0.0.1", port));
    CHECK_THROWS_WITH_AS(r->all_gather("x"), doctest::Contains("stopped: the disk is full"), Error);
    CHECK(r->failure()->find("rank 1 (host") != std::string::npos);
    CHECK(wait_child(child) == 0);

    const int port2 = free_port();
    pid_t child2 = fork_child([&] {
      auto r1 = Rendezvous::join(rendezvous_options(1, 2, "127.0.0.1", port2));
      try {
        r1->all_gather("x");
      } catch (const Error& e) {
        return std::string(e.what()).find("NCCL error: unhandled system error") != std::string::npos ? 0 : 1;
      }
      return 2;
    });
    auto r0 = Rendezvous::join(rendezvous_options(0, 2, "127.0.0.1", port2));
    r0->set_watch([] { return std::optional<std::string>("NCCL error: unhandled system error"); }, [] {});
    CHECK(eventually([&] { return r0->failure().has_value(); }, 5));
    CHECK_THROWS_WITH_AS(r0->all_gather("x"), doctest::Contains("rank 0 (host"), Error);
    CHECK(wait_child(child2) == 0);
  }

  TEST_CASE("rendezvous: a port past 65535 and a rank past the world are refused; the first failure stays") {
    CHECK_ERROR(Rendezvous::join(rendezvous_options(0, 1, "127.0.0.1", 65536, 1.0)),
                "rendezvous: port 65536 (runtime.rendezvous_port) must lie in [1, 65535]");
    CHECK_ERROR(Rendezvous::join(rendezvous_options(2, 2, "127.0.0.1", free_port(), 0.2)), "rendezvous: rank 2 of world 2");

    auto r = Rendezvous::join(rendezvous_options(0, 1, "127.0.0.1", free_port(), 1.0));
    r->report_failure("the first");
    r->report_failure("the second");
    REQUIRE(r->failure());
    CHECK(r->failure()->find("stopped: the first") != std::string::npos);
    // This rank's own failure after its clean end still counts (only the watchdog's echoes do not).
    auto done = Rendezvous::join(rendezvous_options(0, 1, "127.0.0.1", free_port(), 1.0));
    done->finish();
    done->report_failure("late");
    REQUIRE(done->failure());
    CHECK(done->failure()->find("stopped: late") != std::string::npos);
  }
}
