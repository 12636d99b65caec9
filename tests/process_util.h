// Test helpers for real processes: a free loopback port, the rendezvous options the tests meet with,
// a forked child (its stderr optionally to a file), and waiting for it with or without a bound.
#pragma once
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "dist/rendezvous.h"

namespace dflash::test {

// A TCP port nobody listens on right now.
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Rank `rank` of `world` meeting at addr:port, with a fast heartbeat (0.2 s, a peer gone after 2 s).
inline RendezvousOptions rendezvous_options(int rank, int world, const std::string& addr, int port,
                                            double timeout_s = 20) {
  RendezvousOptions o;
  o.rank = rank;
  o.world = world;
  o.master_addr = addr;
  o.port = port;
  o.timeout_s = timeout_s;
  o.heartbeat_s = 0.2;
  o.heartbeat_timeout_s = 2;
  return o;
}

// Runs `body` in a forked child process; its return value is the child's exit status (98: it
// threw). stderr_path non-empty: the child's stderr goes to that file.
inline pid_t fork_child(const std::function<int()>& body, const std::string& stderr_path = "") {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!stderr_path.empty()) {
      int f = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(f, STDERR_FILENO);
      ::close(f);
    }
    int code = 99;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      code = 98;
    }
    std::fflush(stderr);
    ::_exit(code);
  }
  REQUIRE(pid > 0);
  return pid;
}

// The exit status (128 + signal when killed by one).
inline int wait_child(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The exit status if the child ends within `seconds`; otherwise it is killed and nullopt returned.
inline std::optional<int> wait_child_for(pid_t pid, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() >= end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace dflash::test
