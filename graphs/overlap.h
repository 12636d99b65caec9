// The gradient reduction overlapped with the backward (runtime.overlap_reduction, CUDA): the flat
// gradient buffer is cut into buckets of whole drafter layers; once the backward has finished a
// layer (Drafter::set_layer_backward_hook), an event on the compute stream releases a second
// stream that all-reduces that layer's bucket while the backward goes on with the layers below.
// The rest (layer 0 and the parameters outside the layers) is reduced when the backward ends, and
// the compute stream then waits for the second stream, all inside the recorded train program.
// With gradient accumulation only the last micro-batch's program reduces (it is recorded a second
// time with the reduction armed); the update program then skips its own reduction. Buckets are
// reduced in f32, or in bf16 (converted there and back) when asked.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/comm.h"
#include "runtime/optimizer.h"

namespace dflash {

class OverlappedReduction {
 public:
  // layer_ranges[l] = [begin, end) of layer l's gradients in the flat buffer (l >= 1 are
  // buckets; everything outside them is reduced at the end). Allocates its events, stream and
  // (bf16) scratch now, before recording.
  OverlappedReduction(Communicator* comm, int rank, const ParameterStore& params,
                      std::vector<std::pair<int64_t, int64_t>> layer_ranges, bool bf16);
  ~OverlappedReduction();

  // Inside a program body: arm() before the backward whose gradients are final, finish() after.
  void arm() { armed_ = true; }
  void after_layer(int64_t layer);  // the drafter's hook; a no-op unless armed
  void finish();                    // reduce the rest, join the second stream, disarm

  size_t buckets() const { return ranges_.size(); }

 private:
  void reduce(int64_t begin, int64_t end);
  Communicator* comm_;
  int rank_;
  const ParameterStore& params_;
  std::vector<std::pair<int64_t, int64_t>> ranges_;  // per layer; [0, 0) when not a bucket
  std::vector<std::pair<int64_t, int64_t>> rest_;
  bool bf16_;
  bool armed_ = false;
  int device_ = 0;
  void* stream_ = nullptr;
  std::vector<void*> ready_;  // per bucket (and rest): the compute stream reached it
  void* done_ = nullptr;      // the second stream's work is complete
  Tensor scratch_;            // bf16 copy of the largest bucket
  size_t next_event_ = 0;
};

// The flat ranges of each drafter layer's parameters ("layers.<l>." names), from the store.
std::vector<std::pair<int64_t, int64_t>> layer_ranges_of(const ParameterStore& params, int64_t layers);

}  // namespace dflash
