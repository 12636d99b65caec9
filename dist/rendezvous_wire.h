// Internal to the rendezvous (dist/rendezvous*.cpp): the wire format (frame: magic, type,
// aux, length as u32 in network order, then `length` bytes), socket helpers, and the state the
// joining code and the watchdog share.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dist/rendezvous.h"

namespace dflash {
namespace rendezvous_detail {

using Clock = std::chrono::steady_clock;
enum Type : uint32_t { kHello = 1, kWelcome, kRefuse, kHeartbeat, kGather, kGatherResult, kFailure, kBye };

double seconds_until(Clock::time_point t);
Clock::time_point after(double seconds);
std::string host_name();

std::string frame(uint32_t type, uint32_t aux, const std::string& body);
bool send_all(int fd, const std::string& bytes);  // false when the peer is gone
struct Frame {
  uint32_t type = 0, aux = 0;
  std::string body;
};
// A complete frame from the front of `buf`, if there is one; throws on garbage.
std::optional<Frame> take_frame(std::string& buf);
// Reads one frame before `deadline`; nullopt on timeout; throws when the peer closes.
std::optional<Frame> read_frame(int fd, std::string& buf, Clock::time_point deadline);
std::string pack(const std::vector<std::string>& parts);
std::vector<std::string> unpack(const std::string& bytes);

}  // namespace rendezvous_detail

struct Rendezvous::Peer {
  int fd = -1;
  int rank = 0;
  std::string host;
  std::string inbuf;
  rendezvous_detail::Clock::time_point heard;
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
  // The watchdog saw a failure; the abort hook runs once, on the watchdog's thread, even when it
  // is installed (set_watch) after the failure.
  bool abort_wanted = false;
  std::function<std::optional<std::string>()> poll;
  std::function<void()> abort;
  // Whether this process printed its error line (at most one is printed); shared with the exit
  // timer, which may outlive this state.
  std::shared_ptr<std::atomic<bool>> printed = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace dflash
