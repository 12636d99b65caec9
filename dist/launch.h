// How this process was launched: one process per GPU under torchrun (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or Slurm's srun (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID, with MASTER_ADDR/MASTER_PORT exported by the batch script), or
// neither (one process drives every configured device). torchrun's variables win when both are set.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dflash {

struct LaunchInfo {
  std::string launcher;  // "" (no launcher, or a world of one), "torchrun" or "slurm"
  int rank = 0, world = 1;
  int local_rank = 0;
  int local_world = 0;  // 0: not reported (Slurm)
  std::string master_addr;
  int master_port = 0;
  // Several processes make one run; otherwise today's one-process mode (a launcher that reports a
  // world of one changes nothing).
  bool distributed() const { return world > 1; }
  // "RANK=1 of WORLD_SIZE=2 (torchrun)" for messages.
  std::string describe() const;
};

// Reads the launcher variables through `env` (nullopt: unset). Throws one error naming the
// variable for a missing, malformed or inconsistent one.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
LaunchInfo launch_from_environment(const EnvLookup& env);
LaunchInfo launch_from_environment();  // the process environment

// The TCP port of the rendezvous: runtime.rendezvous_port, or MASTER_PORT + 1 when it is 0
// (torchrun's own store already listens on MASTER_PORT).
int rendezvous_port_for(const LaunchInfo& launch, int64_t configured_port);

// The GPU this process uses: LOCAL_RANK, or 0 when exactly one GPU is visible
// (srun --gpus-per-task=1); with runtime.devices = "cuda:a,b,..." the list's LOCAL_RANK-th entry.
// Throws naming LOCAL_RANK, the visible GPUs and CUDA_VISIBLE_DEVICES when there is none for it.
// The ids of a runtime.devices setting "cuda:I,J,..." (validated by the config parser).
std::vector<int> cuda_device_ids(const std::string& setting);
int local_gpu_for(const LaunchInfo& launch, int visible_gpus, const std::string& devices_setting,
                  const std::optional<std::string>& cuda_visible_devices);

}  // namespace dflash
