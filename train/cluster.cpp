// ProcessGroup: the GPU, the rendezvous, the NCCL communicator and the watchdog of a launched run.
#include "train/cluster.h"

#include <unistd.h>

#include <cstdlib>

#include "runtime/error.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace dflash {

std::string ProcessGroup::refusal_without_nccl(const LaunchInfo& launch) {
  return "this process is " + launch.describe() +
         ", but this build has no NCCL: the processes of a run meet through NCCL on GPUs; fix: build on a machine "
         "with the CUDA toolkit and NCCL, or start one process without a launcher";
}

std::unique_ptr<ProcessGroup> ProcessGroup::join(const Config& cfg, const LaunchInfo& launch,
                                                 const std::function<void(const std::string&)>& log, bool with_nccl) {
#ifndef DFLASH_NCCL
  (void)log;
  (void)with_nccl;
  DF_FAIL(refusal_without_nccl(launch));
#else
  auto pg = std::unique_ptr<ProcessGroup>(new ProcessGroup());
  pg->launch_ = launch;
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  pg->device_ = local_gpu_for(launch, cuda_backend::device_count(), cfg.runtime.devices,
                              cvd ? std::optional<std::string>(cvd) : std::nullopt);
  RendezvousOptions o;
  o.rank = launch.rank;
  o.world = launch.world;
  o.master_addr = launch.master_addr;
  o.port = rendezvous_port_for(launch, cfg.runtime.rendezvous_port);
  o.port_source = cfg.runtime.rendezvous_port > 0 ? "runtime.rendezvous_port"
                                                  : "MASTER_PORT + 1; set runtime.rendezvous_port to choose another";
  o.timeout_s = cfg.runtime.rendezvous_timeout_s;
  o.heartbeat_timeout_s = cfg.runtime.heartbeat_timeout_s;
  o.exit_grace_s = 15;
  if (launch.rank == 0 && with_nccl) o.payload = NcclCommunicator::make_unique_id();
  log("rendezvous: " + launch.describe() + " on GPU cuda:" + std::to_string(pg->device_) + ", meeting rank 0 at " +
      launch.master_addr + ":" + std::to_string(o.port));
  pg->rendezvous_ = Rendezvous::join(o);
  if (!with_nccl) return pg;
  try {
    // A rank that dies now leaves ncclCommInitRank waiting: the watchdog ends this process.
    pg->comm_ = std::make_unique<NcclCommunicator>(pg->device_, launch.rank, launch.world, pg->rendezvous_->payload());
  } catch (const std::exception& e) {
    pg->fail(e.what());
  }
  NcclCommunicator* c = static_cast<NcclCommunicator*>(pg->comm_.get());
  pg->rendezvous_->set_watch([c] { return c->async_error(); }, [c] { c->abort(); });
  return pg;
#endif
}

ProcessGroup::~ProcessGroup() {
  // After a failure this process ends here rather than waiting on the communicator's teardown.
  if (rendezvous_)
    if (std::optional<std::string> f = rendezvous_->failure()) fail(*f);
  // The rendezvous goes first: its watchdog may still call into the communicator.
  rendezvous_.reset();
  comm_.reset();
}

ClusterSpec ProcessGroup::spec() const {
  ClusterSpec s;
  s.world = launch_.world;
  s.first_rank = launch_.rank;
  s.devices = {Device::cuda(device_)};
  s.comm = comm_.get();
  s.coord = rendezvous_.get();
  return s;
}

void ProcessGroup::finish() { rendezvous_->finish(); }

void ProcessGroup::fail(const std::string& message) {
  rendezvous_->report_failure(message);
  rendezvous_->exit_now(message);
}

}  // namespace dflash
