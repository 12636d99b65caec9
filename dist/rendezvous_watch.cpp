// The rendezvous after the join: control messages in a star around rank 0 (gather, failure,
// goodbye), the watchdog thread (heartbeats, closed or silent peers, local errors, abort) and the
// end of a process after a failure (one error line, then _exit).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "dist/rendezvous.h"
#include "dist/rendezvous_wire.h"
#include "runtime/error.h"

namespace dflash {

using namespace rendezvous_detail;

namespace {
void send_to(Rendezvous::Peer& p, const std::string& bytes) {
  std::lock_guard<std::mutex> lock(p.send_mutex);
  if (!p.gone) send_all(p.fd, bytes);
}

// write(2) takes no lock: a thread blocked in stdio cannot hold up the last words of a process.
void write_stderr(const std::string& line) {
  for (size_t at = 0; at < line.size();) {
    ssize_t n = ::write(STDERR_FILENO, line.data() + at, line.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    at += size_t(n);
  }
}

// At most one error line per process.
void print_error_once(std::atomic<bool>& printed, const std::string& text) {
  if (!printed.exchange(true)) write_stderr("dflash-train: error: " + text + "\n");
}
}  // namespace

bool Rendezvous::record_failure(const std::string& text, int culprit, bool print) {
  State& s = *st_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.failure) return false;
    // What the watchdog sees after this rank's clean end (finish() follows the run's last
    // collective on every rank) is no failure of this run: typically a peer that leaves without
    // its goodbye because it heard ours first and so sent none.
    if (print && s.finished) return false;
    s.failure = text;
  }
  if (opt_.exit_grace_s > 0) {
    if (print) print_error_once(*s.printed, text);
    // Armed before anything that can block (telling the others, the abort hook): whatever this
    // process's threads wait on, it ends within exit_grace_s.
    const double grace = opt_.exit_grace_s;
    const int rank = opt_.rank;
    std::shared_ptr<std::atomic<bool>> printed = s.printed;
    std::thread([printed, text, grace, rank] {
      std::this_thread::sleep_for(std::chrono::duration<double>(grace));
      print_error_once(*printed, text);
      char note[160];
      std::snprintf(note, sizeof note, "dflash-train: rank %d exits with status 1: it was still waiting %g s after the "
                    "failure\n", rank, grace);
      write_stderr(note);
      ::_exit(1);
    }).detach();
  }
  // The others hear of it before this rank's waits end (and it possibly exits).
  for (auto& p : s.peers)
    if (p->rank != culprit) send_to(*p, frame(kFailure, uint32_t(culprit), text));
  std::lock_guard<std::mutex> lock(s.mutex);
  s.cv.notify_all();
  return true;
}

void Rendezvous::report_failure(const std::string& message) {
  record_failure("rank " + std::to_string(opt_.rank) + " (host " + host_name() + ") stopped: " + message, opt_.rank,
                 /*print=*/false);
}

void Rendezvous::exit_now(const std::string& message) {
  print_error_once(*st_->printed, message);
  std::fflush(stdout);
  ::_exit(1);
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
// errors. Only the abort hook may wait on the main thread (stuck on a GPU, or holding what
// ncclCommAbort waits for), and it runs after the exit timer is armed.
void Rendezvous::io_loop() {
  State& s = *st_;
  Clock::time_point next_beat = Clock::now();
  const std::string me = "rank " + std::to_string(opt_.rank);
  auto abort_if_wanted = [&] {
    std::function<void()> abort;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      if (s.abort_wanted && s.abort && !s.aborted) {
        s.aborted = true;
        abort = s.abort;
      }
    }
    if (abort) abort();  // may block (ncclCommAbort): the exit timer is already armed
  };
  auto fail = [&](const std::string& text, int culprit) {
    if (!record_failure(text, culprit, /*print=*/true)) return;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.abort_wanted = true;
    }
    abort_if_wanted();
  };
  while (!s.stop) {
    abort_if_wanted();  // a hook installed after the failure was seen
    const Clock::time_point now = Clock::now();
    const bool beat = now >= next_beat;
    if (beat) {
      for (auto& p : s.peers) send_to(*p, frame(kHeartbeat, uint32_t(opt_.rank), ""));
      next_beat = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt_.heartbeat_s));
    }
    std::vector<pollfd> fds;
    for (auto& p : s.peers) fds.push_back({p->gone ? -1 : p->fd, POLLIN, 0});
    int r = ::poll(fds.data(), fds.size(), 100);
    if (r < 0 && errno != EINTR) {
      fail(me + ": the rendezvous watchdog cannot watch the other ranks (poll: " + std::strerror(errno) + ")", opt_.rank);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // stays to run a hook installed later
      continue;
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      Peer& p = *s.peers[i];
      if (p.gone) continue;
      const std::string who = "rank " + std::to_string(p.rank) + " (host " + p.host + ")";
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char tmp[65536];
        ssize_t n = ::recv(p.fd, tmp, sizeof tmp, MSG_DONTWAIT);
        if (n > 0) {
          p.inbuf.append(tmp, size_t(n));
          p.heard = Clock::now();
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          const std::string how = n == 0                ? "its connection closed"
                                  : errno == ECONNRESET ? "its connection was reset"
                                                        : std::string("its connection broke: ") + std::strerror(errno);
          {
            std::lock_guard<std::mutex> lock(p.send_mutex);
            p.gone = true;
          }
          fail(who + " exited without finishing (killed or crashed; " + how + "); " + me + " stops too", p.rank);
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
        fail(who + " sent a malformed message: " + e.what(), p.rank);
      }
      if (!p.gone && seconds_until(p.heard) < -opt_.heartbeat_timeout_s)
        fail(who + " has not answered for " + std::to_string(int(opt_.heartbeat_timeout_s)) +
                 " s (hung, stopped or unreachable; runtime.heartbeat_timeout_s); " + me + " stops too",
             p.rank);
    }
    // Local errors after the peers: when a rank dies, NCCL's error here is the echo, its closed
    // connection the cause.
    if (beat) {
      std::function<std::optional<std::string>()> poll;
      {
        std::lock_guard<std::mutex> lock(s.mutex);
        poll = s.poll;
      }
      if (poll && !failure()) {
        std::optional<std::string> err;
        try {
          err = poll();
        } catch (const std::exception& e) {
          err = std::string("the watchdog's check failed: ") + e.what();
        }
        if (err) fail(me + " (host " + host_name() + "): " + *err, opt_.rank);
      }
    }
  }
}

}  // namespace dflash
