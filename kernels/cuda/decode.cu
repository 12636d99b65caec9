// The decode path's small kernels on the GPU (kernels/cpu/decode.cpp is the reference): row copies
// at device-side offsets, positions from a device-side base, argmax with the top-2 margin.
#include <cfloat>
#include <climits>
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_kernels.h"

namespace dflash::kernels::cuda {

namespace {

// Copies min(n, count) rows of `units` U each; offsets and count are read on the device, so the
// grid is sized for n rows and the surplus threads return.
template <class U>
__global__ void copy_rows_kernel(U* dst, int64_t dst_rows, const int32_t* dst_at, const U* src, int64_t src_rows,
                                 const int32_t* src_at, int64_t n, const int32_t* count, int64_t units) {
  const int64_t d0 = dst_at ? dst_at[0] : 0, s0 = src_at ? src_at[0] : 0;
  int64_t rows = count ? count[0] : n;
  if (rows > n) rows = n;
  const int64_t total = rows * units, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += stride) {
    const int64_t r = i / units, u = i - r * units, di = d0 + r, si = s0 + r;
    if (di < 0 || di >= dst_rows || si < 0 || si >= src_rows) continue;
    dst[di * units + u] = src[si * units + u];
  }
}

__global__ void arange_kernel(const int32_t* base, int64_t n, int32_t* out) {
  const int32_t b = base[0];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = b + int32_t(i);
}

// (value, index) pairs: the larger value wins, a tie goes to the smaller index (the first maximum).
__device__ __forceinline__ void better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) v = ov, i = oi;
}

constexpr int kArgmaxThreads = 256;

// One CTA per row: the first maximum and its value, then the largest other entry.
__global__ void argmax_kernel(const void* x, bool bf16, int64_t V, int32_t* index, float* margin, float* top) {
  __shared__ float sv[kArgmaxThreads / 32];
  __shared__ int si[kArgmaxThreads / 32];
  const int64_t row = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float v = -INFINITY;
  int i = INT_MAX;
  for (int64_t j = threadIdx.x; j < V; j += kArgmaxThreads) better(v, i, load(x, bf16, row * V + j), int(j));
  for (int o = 16; o > 0; o >>= 1) better(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
  if (lane == 0) sv[warp] = v, si[warp] = i;
  __syncthreads();
  float best = sv[0];
  int best_i = si[0];
  for (int w = 1; w < kArgmaxThreads / 32; ++w) better(best, best_i, sv[w], si[w]);
  __syncthreads();  // every thread has read sv before it is reused
  float second = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += kArgmaxThreads)
    if (j != best_i) second = fmaxf(second, load(x, bf16, row * V + j));
  for (int o = 16; o > 0; o >>= 1) second = fmaxf(second, __shfl_xor_sync(0xffffffffu, second, o));
  if (lane == 0) sv[warp] = second;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w) second = fmaxf(second, sv[w]);
    second = fmaxf(second, sv[0]);
    index[row] = best_i;
    margin[row] = best - second;
    top[row] = best;
  }
}

}  // namespace

void copy_rows(void* dst, int64_t dst_rows, const int32_t* dst_at, const void* src, int64_t src_rows,
               const int32_t* src_at, int64_t n, const int32_t* count, size_t row_bytes, void* stream) {
  if (n == 0 || row_bytes == 0) return;
  constexpr int kThreads = 256;
  cudaStream_t s = as_stream(stream);
  if (row_bytes % 16 == 0 && aligned16(dst) && aligned16(src)) {
    const int64_t units = int64_t(row_bytes / 16);
    copy_rows_kernel<<<blocks_for(n * units, kThreads), kThreads, 0, s>>>(
        static_cast<uint4*>(dst), dst_rows, dst_at, static_cast<const uint4*>(src), src_rows, src_at, n, count, units);
  } else if (row_bytes % 4 == 0 && (reinterpret_cast<uintptr_t>(dst) & 3u) == 0 &&
             (reinterpret_cast<uintptr_t>(src) & 3u) == 0) {
    const int64_t units = int64_t(row_bytes / 4);
    copy_rows_kernel<<<blocks_for(n * units, kThreads), kThreads, 0, s>>>(
        static_cast<uint32_t*>(dst), dst_rows, dst_at, static_cast<const uint32_t*>(src), src_rows, src_at, n, count,
        units);
  } else {
    const int64_t units = int64_t(row_bytes);
    copy_rows_kernel<<<blocks_for(n * units, kThreads), kThreads, 0, s>>>(
        static_cast<uint8_t*>(dst), dst_rows, dst_at, static_cast<const uint8_t*>(src), src_rows, src_at, n, count,
        units);
  }
  check_launch("copy_rows");
}

void arange_from(const int32_t* base, int64_t n, int32_t* out, void* stream) {
  if (n == 0) return;
  arange_kernel<<<blocks_for(n, 256), 256, 0, as_stream(stream)>>>(base, n, out);
  check_launch("arange_from");
}

void argmax_rows(const void* x, bool bf16, int64_t n, int64_t V, int32_t* index, float* margin, float* top,
                 void* stream) {
  if (n == 0) return;
  argmax_kernel<<<unsigned(n), kArgmaxThreads, 0, as_stream(stream)>>>(x, bf16, V, index, margin, top);
  check_launch("argmax_rows");
}

}  // namespace dflash::kernels::cuda
