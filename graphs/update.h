// The update program, shared by all buckets of a worker: all-reduce the gradients across
// workers (fixed rank order), scale by 1/(micro-batches x workers), clip, AdamW, zero the
// gradients, step + 1, and write {grad norm, lr} for the host.
#pragma once
#include "graphs/static_io.h"
#include "runtime/comm.h"
#include "runtime/optimizer.h"

namespace dflash {

class UpdateStep {
 public:
  // comm may be null (one worker). micro_batches: train-step replays per update on each worker.
  UpdateStep(AdamWOptimizer& optimizer, const ParameterStore& params, Communicator* comm, int rank,
             int micro_batches);
  void body() const;
  float grad_norm() const;  // after replay (and synchronize)
  float lr() const;
  void read(float out[2]) const;  // {grad norm, lr} without allocating

 private:
  AdamWOptimizer& optimizer_;
  const ParameterStore& params_;
  Communicator* comm_;
  int rank_;
  float grad_scale_;
  StaticIO io_;
  Tensor stats_;
};

}  // namespace dflash
