// The update program, shared by all buckets of a worker: gather every rank's step record (the
// figures the trainer logs and the stop flag), reduce the gradients across ranks (fixed rank
// order on the CPU; NCCL on GPUs; reduce-scatter when the optimizer state is sharded), scale by
// 1/(micro-batches x ranks), clip by the norm summed from per-slice sums, AdamW, zero the
// gradients, step + 1, and write {grad norm, lr} for the host.
#pragma once
#include <optional>

#include "dist/comm.h"
#include "dist/optimizer_distributed.h"
#include "graphs/static_io.h"
#include "runtime/optimizer.h"

namespace dflash {

struct UpdateOptions {
  Communicator* comm = nullptr;  // null: one rank
  int rank = 0;
  int micro_batches = 1;         // train-step replays per update on each rank
  size_t record_bytes = 0;       // each rank's step record, gathered in rank order (0: none)
  bool grads_reduced = false;    // the backward already all-reduced the gradients (overlap)
};

class UpdateStep {
 public:
  UpdateStep(AdamWOptimizer& optimizer, const ParameterStore& params, const UpdateOptions& options);
  // comm may be null (one worker). micro_batches: train-step replays per update on each worker.
  UpdateStep(AdamWOptimizer& optimizer, const ParameterStore& params, Communicator* comm, int rank,
             int micro_batches);
  void body() const;
  float grad_norm() const;  // after replay (and synchronize)
  float lr() const;
  void read(float out[2]) const;  // {grad norm, lr} without allocating

  // Before replay: this rank's step record (record_bytes); after: every rank's, in rank order.
  uint8_t* record() const;
  const uint8_t* records() const;
  int world() const { return world_; }

 private:
  AdamWOptimizer& optimizer_;
  const ParameterStore& params_;
  std::optional<DistributedAdamW> distributed_;  // the update over ranks when world > 1
  UpdateOptions opt_;
  int world_ = 1;
  float grad_scale_;
  StaticIO io_;
  Tensor stats_, record_, records_;
  uint8_t* record_host_ = nullptr;
  const uint8_t* records_host_ = nullptr;
};

}  // namespace dflash
