// Argument checks the decode-path ops share (runtime/ops/decode.cpp, slot_cache.cpp); defined in
// decode.cpp. Not part of the public op API.
#pragma once
#include <initializer_list>

#include "runtime/tensor.h"

namespace dflash::ops::detail {

// Refuses inputs that require grad: the decode ops have no backward (they serve decoding).
void refuse_grad(const char* op, std::initializer_list<const Tensor*> ts);

// The checks cached and slot attention share, once the caller has checked q's rank (3-D [n, nh, hd]),
// the caches' rank (k_cache [..., nkv, hd]) and that v_cache has k_cache's shape: the head dims equal
// and in [1, kCachedAttentionMaxHeadDim], the query heads a positive multiple of the kv heads, a
// cache with rows, the scale finite and > 0, one float dtype for all three, and no input requiring grad.
void check_cache_attention(const char* op, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                           float scale);

}  // namespace dflash::ops::detail
