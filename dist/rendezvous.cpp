// The rendezvous: listening, connecting (getaddrinfo, retries until the timeout), the join's
// checks, and the connection's lifetime. The watchdog and the control messages are in
// rendezvous_watch.cpp.
#include "dist/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "dist/rendezvous_wire.h"
#include "runtime/error.h"

namespace dflash {

using namespace rendezvous_detail;

namespace {
void tune(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

// A listening socket on every address (IPv6 dual stack, else IPv4).
int listen_on(int port, const RendezvousOptions& o) {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1, zero = 0;
  if (fd >= 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a = {};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(uint16_t(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      int err = errno;
      ::close(fd);
      fd = -1;
      if (err != EAFNOSUPPORT && err != EADDRNOTAVAIL)
        DF_FAIL("rendezvous: rank 0 cannot listen on port " << port << " (" << o.port_source << "): " << std::strerror(err)
                                                           << "; fix: choose a free port with runtime.rendezvous_port "
                                                           << "(the default is MASTER_PORT + 1)");
    }
  }
  if (fd < 0) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    DF_CHECK(fd >= 0, "rendezvous: socket: " << std::strerror(errno));
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(uint16_t(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      int err = errno;
      ::close(fd);
      DF_FAIL("rendezvous: rank 0 cannot listen on port " << port << " (" << o.port_source << "): " << std::strerror(err)
                                                         << "; fix: choose a free port with runtime.rendezvous_port "
                                                         << "(the default is MASTER_PORT + 1)");
    }
  }
  DF_CHECK(::listen(fd, 1024) == 0, "rendezvous: listen on port " << port << ": " << std::strerror(errno));
  return fd;
}

// Connects to addr:port, retrying (rank 0 may start later) until `deadline`.
int connect_to(const RendezvousOptions& o, Clock::time_point deadline) {
  const std::string where = o.addr_source + "=" + o.master_addr + " port " + std::to_string(o.port) + " (" +
                            o.port_source + ")";
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  std::string last = "no attempt";
  for (;;) {
    addrinfo* list = nullptr;
    int g = ::getaddrinfo(o.master_addr.c_str(), std::to_string(o.port).c_str(), &hints, &list);
    if (g != 0) {
      if (g != EAI_AGAIN)
        DF_FAIL("rendezvous: " << o.addr_source << "=\"" << o.master_addr << "\" cannot be resolved: " << gai_strerror(g)
                               << "; fix: set it to rank 0's host name or address, reachable from every node");
      last = gai_strerror(g);
    }
    for (addrinfo* a = list; a; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        ::freeaddrinfo(list);
        tune(fd);
        return fd;
      }
      last = std::strerror(errno);
      ::close(fd);
    }
    if (list) ::freeaddrinfo(list);
    if (seconds_until(deadline) <= 0)
      DF_FAIL("rendezvous: rank " << o.rank << " could not reach rank 0 at " << where << " within " << o.timeout_s
                                  << " s (last error: " << last << "); fix: check that rank 0 is running, that "
                                  << o.addr_source << " names its host, and that the port is open between the nodes");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}
}  // namespace

Rendezvous::Rendezvous(const RendezvousOptions& o) : opt_(o), st_(std::make_unique<State>()) {}

std::unique_ptr<Rendezvous> Rendezvous::join(const RendezvousOptions& o) {
  DF_CHECK(o.world >= 1 && o.rank >= 0 && o.rank < o.world, "rendezvous: rank " << o.rank << " of world " << o.world);
  DF_CHECK(o.port >= 1 && o.port <= 65535, "rendezvous: port " << o.port << " (" << o.port_source
                                                               << ") must lie in [1, 65535]");
  std::unique_ptr<Rendezvous> r(new Rendezvous(o));
  const Clock::time_point deadline = after(o.timeout_s);
  const std::string me = host_name();
  if (o.rank == 0) {
    r->payload_ = o.payload;
    int lfd = listen_on(o.port, o);
    std::vector<std::unique_ptr<Peer>> by_rank(size_t(o.world));
    int arrived = 1;
    auto refuse_all = [&](const std::string& msg) {
      for (auto& p : by_rank)
        if (p) send_all(p->fd, frame(kRefuse, 0, msg));
      for (auto& p : by_rank)
        if (p) ::close(p->fd);
      ::close(lfd);
      DF_FAIL(msg);
    };
    while (arrived < o.world) {
      const double left = seconds_until(deadline);
      if (left <= 0) {
        std::string missing;
        for (int k = 1; k < o.world; ++k)
          if (!by_rank[size_t(k)]) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
        refuse_all("rendezvous: rank 0 waited " + std::to_string(int(o.timeout_s)) + " s on port " +
                   std::to_string(o.port) + " (" + o.port_source + ") but ranks " + missing +
                   " did not arrive; fix: start every one of the " + std::to_string(o.world) +
                   " processes (with srun or torchrun), and check that they reach " + o.addr_source + "=" +
                   o.master_addr + " on that port");
      }
      // The listening socket and every rank that arrived: one that dies while others are still
      // missing is named now, not at the timeout.
      std::vector<pollfd> fds{{lfd, POLLIN, 0}};
      for (auto& p : by_rank)
        if (p) fds.push_back({p->fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), int(std::min(left, 1.0) * 1000) + 1) <= 0) continue;
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Peer* p = nullptr;
        for (auto& q : by_rank)
          if (q && q->fd == fds[i].fd) p = q.get();
        char tmp[4096];
        ssize_t n = ::recv(p->fd, tmp, sizeof tmp, MSG_DONTWAIT);
        if (n > 0) p->inbuf.append(tmp, size_t(n));  // read by the watchdog after the join
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) continue;
        refuse_all("rendezvous: rank " + std::to_string(p->rank) + " (host " + p->host +
                   ") closed its connection before every rank arrived (it exited or was killed); fix: see that "
                   "rank's log, then start all " + std::to_string(o.world) + " processes again");
      }
      if (!(fds[0].revents & POLLIN)) continue;
      int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      tune(fd);
      auto peer = std::make_unique<Peer>();
      peer->fd = fd;
      std::optional<Frame> hello;
      try {
        hello = read_frame(fd, peer->inbuf, std::min(deadline, after(10)));
      } catch (const Error&) {
      }
      if (!hello || hello->type != kHello) {  // not one of ours (a port scanner, a stale client)
        ::close(fd);
        continue;
      }
      std::vector<std::string> f = unpack(hello->body);
      if (f.size() != 3) {
        ::close(fd);
        continue;
      }
      const int rank = std::atoi(f[0].c_str()), world = std::atoi(f[1].c_str());
      peer->rank = rank;
      peer->host = f[2];
      if (world != o.world) {
        by_rank.push_back(std::move(peer));
        refuse_all("rendezvous: rank " + std::to_string(rank) + " (host " + f[2] + ") reports a world of " +
                   std::to_string(world) + " processes but rank 0 has " + std::to_string(o.world) +
                   "; fix: start every process with the same WORLD_SIZE / SLURM_NTASKS");
      }
      if (rank < 1 || rank >= o.world || by_rank[size_t(rank)]) {
        by_rank.push_back(std::move(peer));
        refuse_all("rendezvous: two processes claim rank " + std::to_string(rank) + " (hosts " + f[2] + " and " +
                   (rank >= 1 && rank < o.world && by_rank[size_t(rank)] ? by_rank[size_t(rank)]->host : me) +
                   "); fix: give every process its own RANK / SLURM_PROCID");
      }
      by_rank[size_t(rank)] = std::move(peer);
      ++arrived;
    }
    ::close(lfd);
    for (int k = 1; k < o.world; ++k) {
      Peer& p = *by_rank[size_t(k)];
      send_all(p.fd, frame(kWelcome, 0, o.payload));
      p.heard = Clock::now();
      r->st_->peers.push_back(std::move(by_rank[size_t(k)]));
    }
  } else {
    int fd = connect_to(o, deadline);
    auto peer = std::make_unique<Peer>();
    peer->fd = fd;
    peer->rank = 0;
    peer->host = o.master_addr;
    DF_CHECK(send_all(fd, frame(kHello, 0, pack({std::to_string(o.rank), std::to_string(o.world), me}))),
             "rendezvous: rank 0 at " << o.master_addr << " port " << o.port << " closed the connection");
    std::optional<Frame> reply;
    try {
      reply = read_frame(fd, peer->inbuf, deadline);
    } catch (const Error& e) {
      ::close(fd);
      DF_FAIL("rendezvous: rank 0 at " << o.addr_source << "=" << o.master_addr << " port " << o.port << " ("
                                       << o.port_source << ") dropped the connection during the rendezvous ("
                                       << e.what() << ")");
    }
    if (!reply) {
      ::close(fd);
      DF_FAIL("rendezvous: rank 0 at " << o.addr_source << "=" << o.master_addr << " port " << o.port << " ("
                                       << o.port_source << ") accepted rank " << o.rank
                                       << " but the rendezvous did not complete within " << o.timeout_s
                                       << " s; fix: start every one of the " << o.world << " processes");
    }
    if (reply->type == kRefuse) {
      ::close(fd);
      DF_FAIL(reply->body);
    }
    DF_CHECK(reply->type == kWelcome, "rendezvous: unexpected reply from rank 0");
    r->payload_ = reply->body;
    peer->heard = Clock::now();
    r->st_->peers.push_back(std::move(peer));
  }
  r->joined_ = true;
  r->start_io();
  return r;
}

void Rendezvous::start_io() {
  if (opt_.world > 1) io_ = std::thread([this] { io_loop(); });
}

void Rendezvous::stop_io() {
  st_->stop = true;
  if (io_.joinable()) io_.join();
}

Rendezvous::~Rendezvous() {
  bool clean;
  {
    std::lock_guard<std::mutex> lock(st_->mutex);
    clean = st_->finished || st_->failure.has_value();
  }
  // A join that failed has thrown its own error, and no exit timer may outlive it (a process that
  // goes on after catching it, as a library caller or a test, must not end 15 s later).
  if (joined_ && !clean) report_failure("stopped with an error");
  stop_io();
  for (auto& p : st_->peers) ::close(p->fd);
}

std::optional<std::string> Rendezvous::failure() const {
  std::lock_guard<std::mutex> lock(st_->mutex);
  return st_->failure;
}

void Rendezvous::set_watch(std::function<std::optional<std::string>()> poll, std::function<void()> abort) {
  std::lock_guard<std::mutex> lock(st_->mutex);
  st_->poll = std::move(poll);
  st_->abort = std::move(abort);
}

}  // namespace dflash
