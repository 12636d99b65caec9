// The gradient reduction overlapped with the backward (runtime.overlap_reduction, CUDA): the flat
// gradient buffer is cut into buckets of half drafter layers; once the backward has finished a
// layer's MLP half, or the whole layer (Drafter::set_layer_backward_hook), an event on the compute
// stream releases a second stream, at the device's greatest priority, that all-reduces that
// bucket while the backward goes on below. The rest (layer 0's attention half and the parameters
// outside the layers, fc last of all) is reduced when the backward ends, and the compute stream
// then waits for the second stream, all inside the recorded train program.
// With gradient accumulation only the last micro-batch's program reduces (it is recorded a second
// time with the reduction armed); the update program then skips its own reduction. Buckets are
// reduced in f32, or in bf16 (converted there and back) when asked.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "runtime/optimizer.h"

namespace dflash {

using FlatRange = std::pair<int64_t, int64_t>;  // [begin, end) in elements of the flat buffers

// What the drafter's backward has finished when its hook runs for layer l: the MLP half
// (post_attention_layernorm and mlp.*: every layer, from the gradient of the residual between the
// halves) or the whole layer (l >= 1, from the gradient of the layer's input).
enum class LayerGrads { mlp, all };

// The buckets of the flat gradient buffer, from the parameter names ("layers.<l>.<name>").
// Invariant: the buckets and the rest are disjoint and cover [0, padded_numel); each parameter
// lies in exactly one of them; a bucket holds only its own half's parameters (and their padding).
struct ReductionPlan {
  std::vector<FlatRange> mlp;        // per layer: reduced when the hook says (l, mlp)
  std::vector<FlatRange> attention;  // per layer: input_layernorm, self_attn.*; reduced at (l, all), l >= 1
  std::vector<FlatRange> rest;       // in order: layer 0's attention half and everything outside the layers
};
ReductionPlan reduction_plan_of(const ParameterStore& params, int64_t layers);

class OverlappedReduction {
 public:
  // Allocates its events, stream and (bf16) scratch now, before recording.
  OverlappedReduction(Communicator* comm, int rank, const ParameterStore& params, ReductionPlan plan, bool bf16);
  ~OverlappedReduction();

  // Inside a program body: arm() before the backward whose gradients are final, finish() after.
  void arm() { armed_ = true; }
  void after_layer(int64_t layer, LayerGrads done);  // the drafter's hook; a no-op unless armed
  void finish();                                     // reduce the rest, join the second stream, disarm

 private:
  void reduce(int64_t begin, int64_t end);
  Communicator* comm_;
  int rank_;
  const ParameterStore& params_;
  ReductionPlan plan_;
  bool bf16_;
  bool armed_ = false;
  int device_ = 0;
  void* stream_ = nullptr;
  std::vector<void*> ready_;  // per (layer, half), then the rest: the compute stream reached it
  void* done_ = nullptr;      // the second stream's work is complete
  Tensor scratch_;            // bf16 copy of the largest bucket
};

}  // namespace dflash
