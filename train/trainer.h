// `dflash-train` training: workers replaying bucket programs, gradient accumulation, warmup and
// cosine schedule, clipping, logging, periodic evaluation, atomic checkpoints with exact resume,
// and a clean stop (checkpoint first) on SIGINT/SIGTERM.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>

#include "train/config.h"
#include "train/eval.h"

namespace dflash {

struct TrainHooks {
  std::function<void(int64_t steps_done)> after_step;  // called on the main thread after each step
};

struct TrainResult {
  int64_t start_step = 0;  // > 0 when resumed
  int64_t steps_done = 0;
  bool interrupted = false;
  std::optional<EvalResult> before, after;  // eval set figures before training and at the end
  std::filesystem::path last_checkpoint;
};

TrainResult run_training(const Config& cfg, const TrainHooks& hooks = {});

// Asks a running training to stop after its current step (what SIGINT and SIGTERM do).
void request_training_stop();

}  // namespace dflash
