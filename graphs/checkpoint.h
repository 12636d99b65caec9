// Recompute checkpointing: the segment runs without the tape in the forward pass, keeping only
// its inputs; when backward reaches it, it runs again with a tape of its own and backpropagates
// through that. Inside a recording the recomputation is just more kernel calls at the right place.
#pragma once
#include <functional>
#include <vector>

#include "runtime/tensor.h"

namespace dflash {

// How a body runs its checkpointable segments (a model's layers): the first `full` are
// recomputed entirely in backward, the next `partial` only in part (they keep more of their
// first run: more memory, less work), the rest are not recomputed.
struct Recompute {
  int64_t full = 0, partial = 0;
  bool operator==(const Recompute&) const = default;
};

using Segment = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Runs segment(inputs). With grad mode on, records one node that recomputes the segment in
// backward; parameters the segment uses receive their gradients then. The segment must be a
// pure function of its inputs and the parameters (same kernels every time it runs).
std::vector<Tensor> checkpoint(const char* name, const Segment& segment, const std::vector<Tensor>& inputs);

// Tensors a checkpointed segment keeps from its first run for its recomputation: results that
// are expensive to compute and small to hold (an attention's output and log-sum-exp). In the
// first run put() stores them, in order; in the recomputation take() hands them back in the
// same order, so the segment can skip that work. Kept tensors live until the segment's
// backward has run. Outside checkpointing (no grad, or no checkpoint) the stash is inactive.
class CheckpointStash {
 public:
  bool active() const { return active_; }
  bool replaying() const { return replaying_; }
  void put(std::vector<Tensor> tensors);
  std::vector<Tensor> take();

 private:
  friend std::vector<Tensor> checkpoint_with_stash(const char*, const std::function<std::vector<Tensor>(
                                                                   const std::vector<Tensor>&, CheckpointStash&)>&,
                                                   const std::vector<Tensor>&);
  bool active_ = false, replaying_ = false;
  std::vector<std::vector<Tensor>> kept_;
  size_t next_ = 0;
};

// In a recomputation: makes `skipped`, the output of an op run under SkipLaunches for its tape
// (no memory of its own), hold the values `kept` from the first run (no copy: it takes their
// storage). Same shape and dtype; call it before anything takes a view of `skipped`.
void adopt_kept_values(const Tensor& skipped, const Tensor& kept);

using StashedSegment = std::function<std::vector<Tensor>(const std::vector<Tensor>&, CheckpointStash&)>;

// checkpoint() whose segment may keep tensors from its first run for its recomputation.
std::vector<Tensor> checkpoint_with_stash(const char* name, const StashedSegment& segment,
                                          const std::vector<Tensor>& inputs);

}  // namespace dflash
