// Concatenation of two row-major blocks on the GPU: forward copies bytes (any dtype) in the
// widest unit the sizes and addresses allow; backward splits a float gradient and accumulates
// each part into its input (a dtype flag per pointer).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// a (outer, A), b (outer, B), y (outer, A + B), in units of U.
template <class U>
__global__ void concat_forward_kernel(const U* a, const U* b, U* y, int64_t outer, int64_t A, int64_t B) {
  const int64_t W = A + B, n = outer * W;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = e / W, k = e % W;
    y[e] = k < A ? a[o * A + k] : b[o * B + (k - A)];
  }
}

template <class U>
void launch_forward(const void* a, const void* b, void* y, int64_t outer, size_t a_bytes, size_t b_bytes,
                    cudaStream_t s) {
  const int64_t A = int64_t(a_bytes / sizeof(U)), B = int64_t(b_bytes / sizeof(U));
  concat_forward_kernel<U><<<blocks_for(outer * (A + B), kThreads), kThreads, 0, s>>>(
      static_cast<const U*>(a), static_cast<const U*>(b), static_cast<U*>(y), outer, A, B);
}

// dy (outer, A + B), da (outer, A), db (outer, B); da or db may be null.
__global__ void concat_backward_kernel(const void* dy, bool dy_bf16, void* da, bool da_bf16, void* db, bool db_bf16,
                                       int64_t outer, int64_t A, int64_t B) {
  const int64_t W = A + B, n = outer * W;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = e / W, k = e % W;
    if (k < A) {
      if (da) accumulate_at(da, da_bf16, o * A + k, load(dy, dy_bf16, e));
    } else if (db) {
      accumulate_at(db, db_bf16, o * B + (k - A), load(dy, dy_bf16, e));
    }
  }
}
}  // namespace

void concat_forward(const void* a, const void* b, void* y, int64_t outer, size_t a_inner_bytes, size_t b_inner_bytes,
                    void* stream) {
  if (outer == 0 || a_inner_bytes + b_inner_bytes == 0) return;
  cudaStream_t s = as_stream(stream);
  auto fits = [&](size_t u) {
    return a_inner_bytes % u == 0 && b_inner_bytes % u == 0 && reinterpret_cast<uintptr_t>(a) % u == 0 &&
           reinterpret_cast<uintptr_t>(b) % u == 0 && reinterpret_cast<uintptr_t>(y) % u == 0;
  };
  if (fits(16)) launch_forward<uint4>(a, b, y, outer, a_inner_bytes, b_inner_bytes, s);
  else if (fits(8)) launch_forward<uint2>(a, b, y, outer, a_inner_bytes, b_inner_bytes, s);
  else if (fits(4)) launch_forward<uint32_t>(a, b, y, outer, a_inner_bytes, b_inner_bytes, s);
  else if (fits(2)) launch_forward<uint16_t>(a, b, y, outer, a_inner_bytes, b_inner_bytes, s);
  else launch_forward<uint8_t>(a, b, y, outer, a_inner_bytes, b_inner_bytes, s);
  check_launch("concat_forward");
}

void concat_backward(const void* dy, bool dy_bf16, void* da, bool da_bf16, void* db, bool db_bf16, int64_t outer,
                     int64_t a_inner, int64_t b_inner, void* stream) {
  const int64_t n = outer * (a_inner + b_inner);
  if (n == 0 || (!da && !db)) return;
  concat_backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(dy, dy_bf16, da, da_bf16, db,
                                                                                    db_bf16, outer, a_inner, b_inner);
  check_launch("concat_backward");
}

}  // namespace dflash::kernels::cuda
