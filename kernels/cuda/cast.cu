// f32 <-> bf16 conversion on the GPU: a vectorised grid-stride map (4 elements per access where
// aligned). f32 -> bf16 is the integer rounding of dflash::f32_to_bf16, so both backends give the
// same bits, NaN payloads included; bf16 -> f32 is exact.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// dflash::f32_to_bf16 (runtime/dtype.h): round to nearest even; a NaN keeps its top bits and turns quiet.
__device__ __forceinline__ uint16_t to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
__device__ __forceinline__ float from_bf16_bits(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

// src f32 (n), dst bf16 bits (n); Vec4 = src 16 bytes, dst 8 bytes per access.
template <bool Vectorised>
__global__ void f32_to_bf16_kernel(const float* src, uint16_t* dst, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  int64_t done = 0;
  if (Vectorised) {
    const int64_t nvec = n / 4;
    for (int64_t i = first; i < nvec; i += stride) {
      const float4 x = reinterpret_cast<const float4*>(src)[i];
      ushort4 y;
      y.x = to_bf16_bits(x.x);
      y.y = to_bf16_bits(x.y);
      y.z = to_bf16_bits(x.z);
      y.w = to_bf16_bits(x.w);
      reinterpret_cast<ushort4*>(dst)[i] = y;
    }
    done = nvec * 4;
  }
  for (int64_t i = done + first; i < n; i += stride) dst[i] = to_bf16_bits(src[i]);
}

// src bf16 bits (n), dst f32 (n).
template <bool Vectorised>
__global__ void bf16_to_f32_kernel(const uint16_t* src, float* dst, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  int64_t done = 0;
  if (Vectorised) {
    const int64_t nvec = n / 4;
    for (int64_t i = first; i < nvec; i += stride) {
      const ushort4 x = reinterpret_cast<const ushort4*>(src)[i];
      reinterpret_cast<float4*>(dst)[i] =
          make_float4(from_bf16_bits(x.x), from_bf16_bits(x.y), from_bf16_bits(x.z), from_bf16_bits(x.w));
    }
    done = nvec * 4;
  }
  for (int64_t i = done + first; i < n; i += stride) dst[i] = from_bf16_bits(src[i]);
}

bool aligned8(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7u) == 0; }
}  // namespace

void cast(const void* src, bool src_bf16, void* dst, bool dst_bf16, int64_t n, void* stream) {
  if (n == 0) return;
  if (src_bf16 == dst_bf16) {
    copy(dst, src, size_t(n) * (src_bf16 ? 2 : 4), stream);
    return;
  }
  cudaStream_t s = as_stream(stream);
  if (!src_bf16) {
    auto in = static_cast<const float*>(src);
    auto out = static_cast<uint16_t*>(dst);
    if (aligned16(src) && aligned8(dst))
      f32_to_bf16_kernel<true><<<blocks_for(n / 4 + 1, kThreads), kThreads, 0, s>>>(in, out, n);
    else
      f32_to_bf16_kernel<false><<<blocks_for(n, kThreads), kThreads, 0, s>>>(in, out, n);
  } else {
    auto in = static_cast<const uint16_t*>(src);
    auto out = static_cast<float*>(dst);
    if (aligned8(src) && aligned16(dst))
      bf16_to_f32_kernel<true><<<blocks_for(n / 4 + 1, kThreads), kThreads, 0, s>>>(in, out, n);
    else
      bf16_to_f32_kernel<false><<<blocks_for(n, kThreads), kThreads, 0, s>>>(in, out, n);
  }
  check_launch("cast");
}

}  // namespace dflash::kernels::cuda
