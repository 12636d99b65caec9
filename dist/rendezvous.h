// The TCP rendezvous of a multi-process run and the connection kept open afterwards: rank 0
// listens on runtime.rendezvous_port, every other rank connects to MASTER_ADDR (a name or an
// address, resolved with getaddrinfo), and rank 0 hands each of them its payload (the
// ncclUniqueId). The connections then carry only control messages (Coordinator), heartbeats and
// failure notices, in a star around rank 0: a rank that exits or stops answering is named to
// every other rank, which aborts its NCCL communicator and exits. Tensors never travel here.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dist/coordinator.h"

namespace dflash {

struct RendezvousOptions {
  int rank = 0, world = 1;
  std::string master_addr;  // the others connect here; rank 0 listens on every address
  int port = 0;
  double timeout_s = 300;           // joining: the master answering and every rank arriving
  double heartbeat_s = 1;           // interval between heartbeats
  double heartbeat_timeout_s = 30;  // silence after which a rank counts as hung
  // > 0 (a launched process): the first failure ends the process with status 1 after this long at
  // the latest, whatever its threads wait on (a GPU stuck in a collective, ncclCommAbort waiting
  // for the CUDA graphs that hold its collectives); one the watchdog sees (another rank's, an
  // NCCL error) is printed at once. 0: the failure is only recorded (tests).
  double exit_grace_s = 0;
  std::string payload;  // rank 0's bytes for every rank
  // Names the variables / keys in messages ("MASTER_ADDR", "runtime.rendezvous_port").
  std::string addr_source = "MASTER_ADDR", port_source = "runtime.rendezvous_port";
};

class Rendezvous : public Coordinator {
 public:
  // Blocks until every rank has joined or throws: an unresolvable address, a port that cannot be
  // bound, a master that does not answer or ranks that do not arrive within timeout_s (naming the
  // address, the port and the missing ranks), or inconsistent ranks.
  static std::unique_ptr<Rendezvous> join(const RendezvousOptions& options);
  ~Rendezvous() override;  // without finish(): tells the others this rank stopped

  int rank() const override { return opt_.rank; }
  int size() const override { return opt_.world; }
  const std::string& payload() const { return payload_; }

  std::vector<std::string> all_gather(const std::string& mine) override;
  void report_failure(const std::string& message) override;
  std::optional<std::string> failure() const override;

  // The watchdog's hooks, called on its thread: `poll` about once per heartbeat (a non-empty
  // result is a local failure, e.g. an NCCL async error); `abort` once, at the first failure it
  // sees, after the exit timer is armed (a hook that never returns still ends the process), or
  // at once if that failure came before the hook.
  void set_watch(std::function<std::optional<std::string>()> poll, std::function<void()> abort);

  // Ends this process now with status 1, without unwinding (destructors could wait forever on a
  // GPU whose collective lost its peer). Prints "dflash-train: error: <message>" unless an error
  // line was printed already (the watchdog prints the failures it sees, with the rank's name).
  [[noreturn]] void exit_now(const std::string& message);

  // A clean end: the others stop watching this rank; the connection closes.
  void finish();

  struct Peer;
  struct State;

 private:
  explicit Rendezvous(const RendezvousOptions& options);
  void io_loop();
  void start_io();
  void stop_io();
  // The first failure wins: recorded (waits end), told to every rank but `culprit`, and with
  // exit_grace_s > 0 it arms the exit timer (and is printed when `print`). False: not the first.
  bool record_failure(const std::string& text, int culprit, bool print);
  RendezvousOptions opt_;
  bool joined_ = false;  // join returned it: only then can its end leave others waiting (a failed join throws instead)
  std::string payload_;
  std::unique_ptr<State> st_;
  std::thread io_;
};

}  // namespace dflash
