// The rendezvous: sockets, framing, the join, and the watchdog thread (heartbeats, failures).
// Frame: magic, type, aux, length (u32 each, network order), then `length` bytes.
#include "runtime/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

#include "runtime/error.h"

namespace dflash {

namespace {
using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x44465256;  // "DFRV"
constexpr uint32_t kMaxFrame = 64u << 20;
enum Type : uint32_t { kHello = 1, kWelcome, kRefuse, kHeartbeat, kGather, kGatherResult, kFailure, kBye };

double seconds_until(Clock::time_point t) { return std::chrono::duration<double>(t - Clock::now()).count(); }
Clock::time_point after(double s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

std::string frame(uint32_t type, uint32_t aux, const std::string& body) {
  uint32_t h[4] = {htonl(kMagic), htonl(type), htonl(aux), htonl(uint32_t(body.size()))};
  std::string out(reinterpret_cast<const char*>(h), sizeof h);
  return out + body;
}

// Sends all bytes; false when the peer is gone.
bool send_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

struct Frame {
  uint32_t type = 0, aux = 0;
  std::string body;
};

// A complete frame from the front of `buf`, if there is one; throws on garbage.
std::optional<Frame> take_frame(std::string& buf) {
  if (buf.size() < 16) return std::nullopt;
  uint32_t h[4];
  std::memcpy(h, buf.data(), 16);
  if (ntohl(h[0]) != kMagic) throw Error("not a dflash rendezvous message");
  const uint32_t len = ntohl(h[3]);
  if (len > kMaxFrame) throw Error("a rendezvous message of " + std::to_string(len) + " bytes is too large");
  if (buf.size() < 16 + size_t(len)) return std::nullopt;
  Frame f{ntohl(h[1]), ntohl(h[2]), buf.substr(16, len)};
  buf.erase(0, 16 + size_t(len));
  return f;
}

// Reads one frame before `deadline`; nullopt on timeout; throws when the peer closes.
std::optional<Frame> read_frame(int fd, std::string& buf, Clock::time_point deadline) {
  for (;;) {
    if (auto f = take_frame(buf)) return f;
    const double left = seconds_until(deadline);
    if (left <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, int(std::min(left, 1.0) * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char tmp[4096];
    ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(n == 0 ? "the connection was closed" : std::string("recv: ") + std::strerror(errno));
    buf.append(tmp, size_t(n));
  }
}

std::string pack(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) {
    uint32_t n = htonl(uint32_t(p.size()));
    out.append(reinterpret_cast<const char*>(&n), 4);
    out += p;
  }
  return out;
}

std::vector<std::string> unpack(const std::string& bytes) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at + 4 <= bytes.size()) {
    uint32_t n;
    std::memcpy(&n, bytes.data() + at, 4);
    n = ntohl(n);
    at += 4;
    DF_CHECK(at + n <= bytes.size(), "rendezvous: a malformed gather result");
    out.push_back(bytes.substr(at, n));
    at += n;
  }
  return out;
}

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

struct Rendezvous::Peer {
  int fd = -1;
  int rank = 0;
  std::string host;
  std::string inbuf;
  Clock::time_point heard;
  std::atomic<bool> gone{false};  // said goodbye or closed
  std::mutex send_mutex;
  std::deque<std::string> gathers;  // rank 0: this peer's gather contributions, oldest first
};

struct Rendezvous::State {
  mutable std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::unique_ptr<Peer>> peers;  // rank 0: ranks 1..W-1; others: rank 0
  std::deque<std::string> results;           // others: gather results from rank 0
  std::optional<std::string> failure;
  std::atomic<bool> stop{false};
  bool aborted = false, finished = false;
  std::function<std::optional<std::string>()> poll;
  std::function<void()> abort;
};

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
      pollfd p{lfd, POLLIN, 0};
      if (::poll(&p, 1, int(std::min(left, 1.0) * 1000) + 1) <= 0) continue;
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
  if (!clean) report_failure("stopped with an error");
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

namespace {
void send_to(Rendezvous::Peer& p, const std::string& bytes) {
  std::lock_guard<std::mutex> lock(p.send_mutex);
  if (!p.gone) send_all(p.fd, bytes);
}
}  // namespace

void Rendezvous::report_failure(const std::string& message) {
  std::function<void()> abort;
  std::string text;
  {
    std::lock_guard<std::mutex> lock(st_->mutex);
    if (st_->failure) return;
    text = "rank " + std::to_string(opt_.rank) + " (host " + host_name() + ") stopped: " + message;
    st_->failure = text;
    st_->cv.notify_all();
  }
  for (auto& p : st_->peers) send_to(*p, frame(kFailure, uint32_t(opt_.rank), text));
}

std::vector<std::string> Rendezvous::all_gather(const std::string& mine) {
  if (opt_.world == 1) return {mine};
  State& s = *st_;
  if (opt_.rank == 0) {
    std::vector<std::string> all(size_t(opt_.world));
    all[0] = mine;
    {
      std::unique_lock<std::mutex> lock(s.mutex);
      s.cv.wait(lock, [&] {
        if (s.failure) return true;
        for (auto& p : s.peers)
          if (p->gathers.empty() && p->gone) {
            s.failure = "rank " + std::to_string(p->rank) + " (host " + p->host +
                        ") finished while rank 0 was waiting for it; the ranks disagree on the run's course";
            return true;
          }
        for (auto& p : s.peers)
          if (p->gathers.empty()) return false;
        return true;
      });
      if (s.failure) DF_FAIL(*s.failure);
      for (auto& p : s.peers) {
        all[size_t(p->rank)] = std::move(p->gathers.front());
        p->gathers.pop_front();
      }
    }
    const std::string out = frame(kGatherResult, 0, pack(all));
    for (auto& p : s.peers) send_to(*p, out);
    return all;
  }
  send_to(*s.peers[0], frame(kGather, uint32_t(opt_.rank), mine));
  std::unique_lock<std::mutex> lock(s.mutex);
  s.cv.wait(lock, [&] {
    if (s.results.empty() && s.peers[0]->gone && !s.failure)
      s.failure = "rank 0 finished while rank " + std::to_string(opt_.rank) + " was waiting for it";
    return s.failure || !s.results.empty();
  });
  if (s.results.empty()) DF_FAIL(*s.failure);
  std::vector<std::string> all = unpack(s.results.front());
  s.results.pop_front();
  return all;
}

void Rendezvous::finish() {
  {
    std::lock_guard<std::mutex> lock(st_->mutex);
    if (st_->finished) return;
    st_->finished = true;
  }
  for (auto& p : st_->peers) send_to(*p, frame(kBye, uint32_t(opt_.rank), ""));
  stop_io();
}

// The watchdog: reads every frame, sends heartbeats, notices closed or silent peers and local
// errors; at the first failure it aborts the communicator, tells the others, and (exit_grace_s)
// ends the process if the main thread does not.
void Rendezvous::io_loop() {
  State& s = *st_;
  Clock::time_point next_beat = Clock::now();
  auto fail = [&](const std::string& text, int culprit) {
    std::function<void()> abort;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      if (s.failure) return;
      s.failure = text;
      s.cv.notify_all();
      if (!s.aborted) {
        s.aborted = true;
        abort = s.abort;
      }
    }
    for (auto& p : s.peers)
      if (p->rank != culprit) send_to(*p, frame(kFailure, uint32_t(culprit), text));
    if (abort) abort();
    if (opt_.exit_grace_s > 0) {
      const double grace = opt_.exit_grace_s;
      std::thread([text, grace] {
        std::this_thread::sleep_for(std::chrono::duration<double>(grace));
        std::fprintf(stderr, "dflash-train: error: %s (exiting: this rank cannot continue without it)\n", text.c_str());
        std::fflush(stderr);
        ::_exit(1);
      }).detach();
    }
  };
  while (!s.stop) {
    const Clock::time_point now = Clock::now();
    if (now >= next_beat) {
      for (auto& p : s.peers) send_to(*p, frame(kHeartbeat, uint32_t(opt_.rank), ""));
      next_beat = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt_.heartbeat_s));
      std::function<std::optional<std::string>()> poll;
      {
        std::lock_guard<std::mutex> lock(s.mutex);
        poll = s.poll;
      }
      if (poll && !failure())
        if (std::optional<std::string> err = poll())
          fail("rank " + std::to_string(opt_.rank) + " (host " + host_name() + "): " + *err, opt_.rank);
    }
    std::vector<pollfd> fds;
    for (auto& p : s.peers) fds.push_back({p->gone ? -1 : p->fd, POLLIN, 0});
    int r = ::poll(fds.data(), fds.size(), 100);
    if (r < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      Peer& p = *s.peers[i];
      if (p.gone) continue;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char tmp[65536];
        ssize_t n = ::recv(p.fd, tmp, sizeof tmp, MSG_DONTWAIT);
        if (n > 0) {
          p.inbuf.append(tmp, size_t(n));
          p.heard = Clock::now();
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          {
            std::lock_guard<std::mutex> lock(p.send_mutex);
            p.gone = true;
          }
          fail("rank " + std::to_string(p.rank) + " (host " + p.host + ") exited without finishing (killed or crashed); "
               "this rank stops too",
               p.rank);
          continue;
        }
      }
      try {
        while (auto f = take_frame(p.inbuf)) {
          if (f->type == kGather && opt_.rank == 0) {
            std::lock_guard<std::mutex> lock(s.mutex);
            p.gathers.push_back(std::move(f->body));
            s.cv.notify_all();
          } else if (f->type == kGatherResult) {
            std::lock_guard<std::mutex> lock(s.mutex);
            s.results.push_back(std::move(f->body));
            s.cv.notify_all();
          } else if (f->type == kFailure) {
            fail(f->body, int(f->aux));
          } else if (f->type == kBye) {
            {
              std::lock_guard<std::mutex> lock(p.send_mutex);
              p.gone = true;
            }
            std::lock_guard<std::mutex> lock(s.mutex);
            s.cv.notify_all();
          }
        }
      } catch (const Error& e) {
        p.gone = true;
        fail("rank " + std::to_string(p.rank) + " (host " + p.host + ") sent a malformed message: " + e.what(), p.rank);
      }
      if (!p.gone && seconds_until(p.heard) < -opt_.heartbeat_timeout_s)
        fail("rank " + std::to_string(p.rank) + " (host " + p.host + ") has not answered for " +
                 std::to_string(int(opt_.heartbeat_timeout_s)) + " s (hung, stopped or unreachable); this rank stops too",
             p.rank);
    }
  }
}

}  // namespace dflash
