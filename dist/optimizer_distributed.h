// The AdamW step over several ranks (the distributed optimizer): the same update as
// AdamWOptimizer::update, with the gradients reduced across ranks and, when the parameter store is
// sharded (ZeRO-1), AdamW on this rank's slice and the compute weights all-gathered afterwards.
#pragma once
#include "dist/comm.h"
#include "runtime/optimizer.h"

namespace dflash {

// Wraps one rank's optimizer; it owns only the per-slice sums that the ranks exchange. Built
// before recording (it allocates them), used while recording the update program.
class DistributedAdamW {
 public:
  // world > 1: the number of ranks whose gradients meet in the update.
  DistributedAdamW(AdamWOptimizer& optimizer, int world);

  // Kernel calls of one update of rank `rank`: the gradients are all-reduced (or, when sharded,
  // reduce-scattered) through comm unless `grads_reduced` (the backward did it), the norm is the sum
  // of per-slice partial sums in rank order (the same slices in both modes, so sharded == unsharded
  // bit for bit whenever the reduced gradients are), then clip, lr, AdamW on this rank's slice
  // (sharded, then the compute weights are all-gathered) or on everything, zero grads, step + 1.
  // Writes {grad norm before clipping, lr used} to stats_out f32[2].
  void update(float grad_scale, const Tensor& stats_out, Communicator* comm, int rank, bool grads_reduced) const;

 private:
  AdamWOptimizer& optimizer_;
  ParameterStore& params_;
  Tensor slice_sums_;  // f64 [world]: per-slice sums of squared gradients
};

}  // namespace dflash
