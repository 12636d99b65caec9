// `dflash-train` training: workers replaying bucket programs, gradient accumulation, warmup and
// cosine schedule, clipping, logging, periodic evaluation, atomic checkpoints with exact resume,
// and a clean stop (checkpoint first) on SIGINT/SIGTERM.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "train/config.h"
#include "train/eval.h"

namespace dflash {

// A worker's weights as floats: the f32 master and the compute copy the programs read (bf16 on a
// GPU; on the CPU the master itself).
struct ReplicaWeights {
  std::vector<float> master, compute;
};

struct TrainHooks {
  std::function<void(int64_t steps_done)> after_step;  // called on the main thread after each step
  // Tests: every worker's weights in rank order, once the starting weights are in place (random
  // init, warm start or resume) and after each step. Costs a copy; nothing when unset.
  std::function<void(int64_t steps_done, const std::vector<ReplicaWeights>& workers)> weights;
  // Tests: on worker `rank`'s thread, the {grad norm, lr} its update reported, before the ranks are
  // compared; changing them simulates a communicator that failed.
  std::function<void(int rank, float stats[2])> after_update;
  // Polled before each step, like the SIGINT/SIGTERM flag: true asks the run to stop (tests stop
  // one rank of several this way; the flag travels with the step's collectives).
  std::function<bool()> stop_requested;
};

struct TrainResult {
  int64_t start_step = 0;  // > 0 when resumed
  int64_t steps_done = 0;
  bool interrupted = false;
  std::optional<EvalResult> before, after;  // eval set figures before training and at the end
  std::filesystem::path last_checkpoint;
};

struct ClusterSpec;

// One process: the devices of runtime.devices (threads), or, when launched by torchrun or srun
// with several processes, this process's rank of the run (train/cluster.h). cluster: this
// trainer is given its ranks, communicator and coordinator (tests run ranks as threads).
TrainResult run_training(const Config& cfg, const TrainHooks& hooks = {}, const ClusterSpec* cluster = nullptr);

// Asks a running training to stop after its current step (what SIGINT and SIGTERM do).
void request_training_stop();

}  // namespace dflash
