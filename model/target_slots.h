// The frozen target over a KV cache of fixed slots, for batched decoding (`dflash-train
// generate`): S slots of C positions each, per layer [S, C, nkv, hd]. A pass takes n rows, each
// with its own token, slot and position (i32 [n] on the device; position -1 marks a padding row),
// writes every real row's key and value into its slot at its position, and returns the rows'
// last hidden states after the final norm. One recorded pass serves every mix of slots and
// lengths: a decode step is one row per slot, a prefill chunk the rows of several prompts.
// Invariant: a row at position p reads its slot's rows 0..p only, all written by this request
// (its prompt, then its steps), so a slot needs no clearing when it takes a new request.
#pragma once
#include <cstdint>
#include <vector>

#include "model/target.h"

namespace dflash {

class SlotTargetDecoder {
 public:
  // K/V caches of `slots` x `capacity` positions per layer: persistent tensors of the current
  // context, in the target's dtype.
  SlotTargetDecoder(const Target& target, int64_t slots, int64_t capacity);

  // ids, slot, pos i32 [n] -> hidden [n, H]: the last layer's output after the final norm
  // (lm_head's input; 0-based rows as given). Runs under NoGrad; recordable.
  Tensor pass(const Tensor& ids, const Tensor& slot, const Tensor& pos) const;

  const Target& target() const { return target_; }
  int64_t slots() const { return slots_; }
  int64_t capacity() const { return capacity_; }
  // Bytes of the K/V caches of `slots` x `capacity` positions at these dims and element size.
  static uint64_t cache_bytes(const TargetSpec& spec, int64_t slots, int64_t capacity, int64_t element_bytes);

 private:
  const Target& target_;
  int64_t slots_, capacity_;
  std::vector<Tensor> k_cache_, v_cache_;  // per layer [slots, capacity, nkv, hd]
};

}  // namespace dflash
