// The rendezvous after the join: control messages in a star around rank 0 (gather, failure,
// goodbye) and the watchdog thread (heartbeats, closed or silent peers, local errors, abort).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <thread>

#include "runtime/error.h"
#include "runtime/rendezvous.h"
#include "runtime/rendezvous_wire.h"

namespace dflash {

using namespace rendezvous_detail;

namespace {
void send_to(Rendezvous::Peer& p, const std::string& bytes) {
  std::lock_guard<std::mutex> lock(p.send_mutex);
  if (!p.gone) send_all(p.fd, bytes);
}
}  // namespace

void Rendezvous::report_failure(const std::string& message) {
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
