// The drafter's inference forward (docs/MODEL.md, "Speculative decoding"): one block of bs tokens at
// positions start .. start+bs-1 whose queries see the cached context K/V of positions 0..start-1
// and the whole block, exactly training's mask for an anchor at `start` (the training attention
// op with N = 1 and anchor = start). The context K/V of a position never changes once computed,
// so it is cached per layer and appended as positions are committed; the block's K/V are
// overwritten by the next block. start, the append offset and the row count live on the device.
#pragma once
#include <cstdint>
#include <vector>

#include "model/drafter.h"

namespace dflash {

class DrafterDecoder {
 public:
  // context_capacity: the positions the context cache holds. embed_tokens and lm_head are the
  // target's. Caches are persistent tensors of the current context in the drafter's dtype.
  DrafterDecoder(const Drafter& drafter, Tensor embed_tokens, int64_t context_capacity);

  // Target features [R, F*H] of positions at .. at+R-1 (at i32 [1]); the first count (i32 [1],
  // or undefined for R) rows become context: their K/V are written into every layer's cache.
  void append_context(const Tensor& features, const Tensor& at, const Tensor& count) const;
  // ids i32 [L] at positions start .. start+L-1 (start i32 [1]) -> [L, H] after the final norm, for
  // a block of L <= bs tokens (L < bs: the shortened last block of a decode whose budget ends
  // inside a block; its queries see the context and the L block keys, as if bs were L).
  Tensor block(const Tensor& ids, const Tensor& start) const;

  const DrafterSpec& spec() const { return drafter_.spec(); }
  int64_t context_capacity() const { return capacity_; }

 private:
  const Drafter& drafter_;
  Tensor embed_, inv_freq_, keep_;
  int64_t capacity_;
  std::vector<Tensor> k_cache_, v_cache_;  // per layer [capacity + bs, nkv, hd]: context rows, then the block's
};

}  // namespace dflash
