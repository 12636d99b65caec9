// A launched process whose peer dies, hangs or leaves during the rendezvous: it prints one error
// naming that rank and exits with status 1 within a bound, whatever its own threads wait on. The
// processes are real (fork); the survivor's main thread waits forever, as on a GPU stuck in a
// collective, and its abort hook never returns, as ncclCommAbort waits for the CUDA graphs that
// the main thread holds. Real GPUs and NCCL: scripts/gpu2-check.sh kill9.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "dist/rendezvous.h"
#include "runtime/error.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {
RendezvousOptions launched(int rank, int world, int port, double heartbeat_timeout_s, double exit_grace_s) {
  RendezvousOptions o;
  o.rank = rank;
  o.world = world;
  o.master_addr = "127.0.0.1";
  o.port = port;
  o.timeout_s = 20;
  o.heartbeat_s = 0.1;
  o.heartbeat_timeout_s = heartbeat_timeout_s;
  o.exit_grace_s = exit_grace_s;
  return o;
}

[[noreturn]] void wait_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// A survivor as training leaves it: its abort hook never returns and its main thread waits forever.
int stuck_survivor(int rank, int port, double heartbeat_timeout_s) {
  auto r = Rendezvous::join(launched(rank, 2, port, heartbeat_timeout_s, /*exit_grace_s=*/0.5));
  r->set_watch({}, [] { wait_forever(); });
  wait_forever();
}

// The peer: joins, lets the survivor settle, then `sig` (SIGKILL: kill -9; SIGSTOP: hung).
int victim(int rank, int port, int sig) {
  auto r = Rendezvous::join(launched(rank, 2, port, 60, 0));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(::getpid(), sig);
  wait_forever();
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::filesystem::path stderr_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("dflash-rdzv-" + std::to_string(::getpid()) + "-" + name);
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A survivor's end as every failure test wants it: status 1 within 8 s of t0, and exactly one line
// saying "error" on its stderr (err), whose text it returns.
std::string exited_with_one_error(int rc, Clock::time_point t0, const std::filesystem::path& err) {
  CHECK(rc == 1);
  CHECK(seconds_since(t0) < 8);
  const std::string text = read_text(err);
  INFO(text);
  CHECK(count(text, "error") == 1);
  return text;
}
}  // namespace

TEST_SUITE("rendezvous failure") {
  TEST_CASE("a rank killed with -9: the survivor prints one error naming it and exits 1, though its threads are stuck") {
    for (int dead : {1, 0}) {
      CAPTURE(dead);
      const int alive = 1 - dead, port = free_port();
      const auto err = stderr_file("kill9-" + std::to_string(dead));
      const auto t0 = Clock::now();
      pid_t survivor = fork_child([&] { return stuck_survivor(alive, port, 30); }, err.string());
      pid_t killed = fork_child([&] { return victim(dead, port, SIGKILL); });
      std::optional<int> rc = wait_child_for(survivor, 10);
      CHECK(wait_child(killed) == 128 + SIGKILL);
      REQUIRE_MESSAGE(rc.has_value(), "rank " << alive << " was still running 10 s after rank " << dead << " was killed");
      const std::string text = exited_with_one_error(*rc, t0, err);
      CAPTURE(text);
      CHECK(text.find("dflash-train: error: rank " + std::to_string(dead) + " (host ") != std::string::npos);
      CHECK(text.find("exited without finishing (killed or crashed; its connection ") != std::string::npos);
      std::filesystem::remove(err);
    }
  }

  TEST_CASE("a join that times out throws, and the process that catches it goes on (no exit timer armed)") {
    const int port = free_port();
    const auto err = stderr_file("join-timeout");
    pid_t child = fork_child(
        [&] {
          RendezvousOptions o = launched(0, 2, port, 30, /*exit_grace_s=*/0.5);
          o.timeout_s = 0.5;  // rank 1 never comes
          try {
            Rendezvous::join(o);
            return 2;
          } catch (const std::exception& e) {
            std::fprintf(stderr, "caught: %s\n", e.what());
          }
          std::this_thread::sleep_for(std::chrono::seconds(2));  // past the grace: still alive
          return 0;
        },
        err.string());
    std::optional<int> rc = wait_child_for(child, 20);
    REQUIRE_MESSAGE(rc.has_value(), "the process that caught the failed join was still running after 20 s");
    const std::string text = read_text(err);
    CAPTURE(text);
    CHECK(*rc == 0);
    CHECK(text.find("caught: rendezvous: rank 0 waited") != std::string::npos);
    CHECK(text.find("exits with status 1") == std::string::npos);
    std::filesystem::remove(err);
  }

  TEST_CASE("a stopped (hung) rank: the survivor names it after the heartbeat timeout and exits 1") {
    const int port = free_port();
    const auto err = stderr_file("stop");
    const auto t0 = Clock::now();
    pid_t survivor = fork_child([&] { return stuck_survivor(0, port, /*heartbeat_timeout_s=*/1); }, err.string());
    pid_t stopped = fork_child([&] { return victim(1, port, SIGSTOP); });
    std::optional<int> rc = wait_child_for(survivor, 10);
    ::kill(stopped, SIGKILL);
    wait_child(stopped);
    REQUIRE_MESSAGE(rc.has_value(), "rank 0 was still running 10 s after rank 1 stopped");
    const std::string text = exited_with_one_error(*rc, t0, err);
    CAPTURE(text);
    CHECK(text.find("dflash-train: error: rank 1 (host ") != std::string::npos);
    CHECK(text.find("has not answered for 1 s (hung, stopped or unreachable; runtime.heartbeat_timeout_s)") !=
          std::string::npos);
    std::filesystem::remove(err);
  }

  TEST_CASE("a main thread that gets free ends the process at once, with the watchdog's error line only") {
    // As ProcessGroup::fail after the collective returns: the error is not printed twice, and the
    // process does not wait for the exit timer (30 s here).
    const int port = free_port();
    const auto err = stderr_file("main");
    const auto t0 = Clock::now();
    pid_t survivor = fork_child(
        [&] {
          auto r = Rendezvous::join(launched(0, 2, port, 30, /*exit_grace_s=*/30));
          std::mutex m;
          std::condition_variable cv;
          bool aborted = false;
          r->set_watch({}, [&] {
            std::lock_guard<std::mutex> lock(m);
            aborted = true;
            cv.notify_all();
          });
          {
            std::unique_lock<std::mutex> lock(m);
            cv.wait(lock, [&] { return aborted; });
          }
          try {
            r->all_gather("step records");
          } catch (const Error& e) {
            r->report_failure(e.what());
            r->exit_now(e.what());
          }
          return 3;
        },
        err.string());
    pid_t killed = fork_child([&] { return victim(1, port, SIGKILL); });
    std::optional<int> rc = wait_child_for(survivor, 10);
    wait_child(killed);
    REQUIRE(rc.has_value());
    const std::string text = exited_with_one_error(*rc, t0, err);
    CAPTURE(text);
    CHECK(text.find("dflash-train: error: rank 1 (host ") != std::string::npos);
    std::filesystem::remove(err);
  }

  TEST_CASE("a rank that leaves during the rendezvous is named at once, not at the timeout") {
    // World 3: rank 1 arrives, gives up after 1 s and exits; rank 2 never comes.
    const int port = free_port();
    pid_t leaver = fork_child([&] {
      RendezvousOptions o = launched(1, 3, port, 30, 0);
      o.timeout_s = 1;
      try {
        Rendezvous::join(o);
      } catch (const Error&) {
        return 0;
      }
      return 1;
    });
    RendezvousOptions o0 = launched(0, 3, port, 30, 0);
    o0.timeout_s = 8;
    const auto t0 = Clock::now();
    std::string what;
    try {
      Rendezvous::join(o0);
    } catch (const Error& e) {
      what = e.what();
    }
    CAPTURE(what);
    CHECK(what.find("rendezvous: rank 1 (host ") != std::string::npos);
    CHECK(what.find(") closed its connection before every rank arrived (it exited or was killed)") != std::string::npos);
    CHECK(seconds_since(t0) < 5);
    CHECK(wait_child(leaver) == 0);
  }
}
