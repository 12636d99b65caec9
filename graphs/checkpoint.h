// Recompute checkpointing: the segment runs without the tape in the forward pass, keeping only
// its inputs; when backward reaches it, it runs again with a tape of its own and backpropagates
// through that. Inside a recording the recomputation is just more kernel calls at the right place.
#pragma once
#include <functional>
#include <vector>

#include "runtime/tensor.h"

namespace dflash {

using Segment = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Runs segment(inputs). With grad mode on, records one node that recomputes the segment in
// backward; parameters the segment uses receive their gradients then. The segment must be a
// pure function of its inputs and the parameters (same kernels every time it runs).
std::vector<Tensor> checkpoint(const char* name, const Segment& segment, const std::vector<Tensor>& inputs);

}  // namespace dflash
