// Shared by the attention kernels over KV caches (cached_attention.cu, slot_attention.cu): tiles of
// 32 rows of bf16 keys, values or queries loaded into f32 shared memory in 16-byte packs.
#pragma once
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace dflash::kernels::cuda {

// Rows [0, 32) of T tiles of HD columns into f32 shared memory: element (j, d) of tile t is
// src[t][at(j, d)] when valid(j) and d < hd, else 0, stored at dst[t][j * stride[t] + d]. Every
// thread first issues all its 16-byte loads (T * HD / 32 of them), then stores, so the tiles wait
// about one memory latency together.
template <int HD, int Threads, int T, class At, class Valid>
__device__ __forceinline__ void load_tiles_packs(float* const (&dst)[T], const int (&stride)[T],
                                                 const bf16_t* const (&src)[T], int64_t hd, At at, Valid valid) {
  constexpr int kPacksPerRow = HD / 8, kPerThread = 32 * kPacksPerRow / Threads;
  static_assert(kPerThread >= 1 && 32 * kPacksPerRow % Threads == 0, "cached attention: packs must split evenly");
  uint4 raw[T][kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int p = k * Threads + int(threadIdx.x), j = p / kPacksPerRow, d0 = (p % kPacksPerRow) * 8;
    const bool on = d0 < hd && valid(j);
    const int64_t off = on ? at(j, d0) : 0;
#pragma unroll
    for (int t = 0; t < T; ++t)
      raw[t][k] = on ? *reinterpret_cast<const uint4*>(src[t] + off) : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int p = k * Threads + int(threadIdx.x), j = p / kPacksPerRow, d0 = (p % kPacksPerRow) * 8;
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const bf16_t* e = reinterpret_cast<const bf16_t*>(&raw[t][k]);
#pragma unroll
      for (int i = 0; i < 8; ++i) dst[t][j * stride[t] + d0 + i] = __bfloat162float(e[i]);
    }
  }
}

}  // namespace dflash::kernels::cuda
