// Where a trainer stands in a run: which ranks of how many it drives, on which devices, and the
// communicator (tensors) and coordinator (control messages) that join it to the other ranks.
// Three ways to get one: one process driving all configured devices (threads, today's mode), one
// process per GPU launched by torchrun or srun (ProcessGroup: rendezvous, NCCL, watchdog), or
// ranks that are trainers in threads of one process sharing a ThreadCommunicator (the CPU
// stand-in for processes in tests).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "dist/coordinator.h"
#include "dist/launch.h"
#include "dist/rendezvous.h"
#include "runtime/device.h"
#include "train/config.h"

namespace dflash {

struct ClusterSpec {
  int world = 1;                 // ranks in the run
  int first_rank = 0;            // this trainer drives ranks first_rank .. first_rank + devices.size() - 1
  std::vector<Device> devices;   // one per rank this trainer drives
  Communicator* comm = nullptr;  // over all ranks (null: one rank)
  Coordinator* coord = nullptr;  // over the trainers of the run
};

// This process's place in a run started by torchrun or srun.
class ProcessGroup {
 public:
  // Picks this process's GPU, meets the others at the rendezvous (rank 0 hands out the NCCL id),
  // builds the NCCL communicator (ncclCommInitRank) and arms the watchdog: a rank that exits or
  // stops answering, or an NCCL error, is printed at once naming the rank, aborts the
  // communicator and ends this process with status 1 (runtime.heartbeat_timeout_s + 15 s at
  // most after a rank hangs, 15 s after one exits), whatever its threads wait on.
  // with_nccl = false: only the rendezvous and the watchdog (dflash-train hidden, whose ranks
  // exchange nothing but their file lists).
  static std::unique_ptr<ProcessGroup> join(const Config& cfg, const LaunchInfo& launch,
                                            const std::function<void(const std::string&)>& log, bool with_nccl = true);
  // What join says to a launched process in a build without NCCL (naming its rank, world and launcher).
  static std::string refusal_without_nccl(const LaunchInfo& launch);
  ~ProcessGroup();
  ClusterSpec spec() const;
  Coordinator& coordinator() { return *rendezvous_; }
  // The run is over for this rank: the others stop watching it.
  void finish();
  // This rank stops with an error: the others stop too, naming it, and this process ends now
  // with status 1 after one error line (`message`, or the failure the watchdog printed). It does
  // not unwind: after a failure, destroying CUDA graphs, buffers or the communicator can wait
  // forever for a peer that is gone.
  [[noreturn]] void fail(const std::string& message);

 private:
  LaunchInfo launch_;
  int device_ = 0;
  std::unique_ptr<Rendezvous> rendezvous_;
  std::unique_ptr<Communicator> comm_;
};

}  // namespace dflash
