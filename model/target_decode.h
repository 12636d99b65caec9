// The frozen target over a KV cache, for decoding (docs/MODEL.md, "Speculative decoding"): a causal
// pass over n new tokens on top of the cached positions (a prefill chunk, a verify block of bs,
// or a one-token step) that appends their keys and values and returns their last hidden states
// and the features of target.layer_ids. The cache length lives on the device (an i32 [1]), so
// one recorded pass serves every position; rolling back is writing a smaller length (rows past
// it are stale and never read: a pass writes its rows before its attention reads them).
#pragma once
#include <cstdint>
#include <vector>

#include "model/target.h"

namespace dflash {

class TargetDecoder {
 public:
  // K/V caches of `capacity` positions per layer: persistent tensors of the current context, in
  // the target's dtype.
  TargetDecoder(const Target& target, int64_t capacity);

  struct Pass {
    Tensor features;  // [n, F*H]: layer_ids' outputs at the n positions (undefined unless asked)
    Tensor hidden;    // [n, H]: the last layer's output after the final norm (lm_head's input)
  };
  // ids i32 [n] at positions pos0 .. pos0+n-1 (pos0 = the cache length, i32 [1] on the device);
  // count (i32 [1], or undefined for n) says how many of the n rows are real: only those are
  // cached. Runs under NoGrad; recordable.
  Pass pass(const Tensor& ids, const Tensor& pos0, const Tensor& count, bool want_features) const;

  const Target& target() const { return target_; }
  int64_t capacity() const { return capacity_; }

 private:
  const Target& target_;
  int64_t capacity_;
  std::vector<Tensor> k_cache_, v_cache_;  // per layer [capacity, nkv, hd]
};

}  // namespace dflash
