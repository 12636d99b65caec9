// RMSNorm on the GPU over rows of D: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps). One warp
// per row (16-byte accesses where aligned). The weight gradient is a two-pass reduction over
// fixed row ranges, so every sum has a fixed order.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;  // one warp per row
constexpr int64_t kMinDwRows = 64;            // rows per dw partial, at least
constexpr int64_t kMaxDwPartials = 512;

// x, y (rows, D), w (D), rstd (rows) or null. N elements per access; D % N == 0.
template <class T, int N>
__global__ void rmsnorm_forward_kernel(const T* x, const T* w, T* y, float* rstd, int64_t rows, int64_t D, float eps) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const T* xr = x + r * D;
  T* yr = y + r * D;
  float ss = 0.0f;
  for (int64_t j = int64_t(lane) * N; j < D; j += 32 * N) {
    Vec<T, N> v = *reinterpret_cast<const Vec<T, N>*>(xr + j);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      float f = to_float(v.v[k]);
      ss += f * f;
    }
  }
  ss = warp_sum(ss);
  const float s = 1.0f / sqrtf(ss / float(D) + eps);
  if (rstd && lane == 0) rstd[r] = s;
  for (int64_t j = int64_t(lane) * N; j < D; j += 32 * N) {
    Vec<T, N> v = *reinterpret_cast<const Vec<T, N>*>(xr + j), wv = *reinterpret_cast<const Vec<T, N>*>(w + j), o;
#pragma unroll
    for (int k = 0; k < N; ++k) o.v[k] = from_float<T>(to_float(v.v[k]) * s * to_float(wv.v[k]));
    *reinterpret_cast<Vec<T, N>*>(yr + j) = o;
  }
}

template <class T, int N>
void launch_forward(const void* x, const void* w, void* y, float* rstd, int64_t rows, int64_t D, float eps,
                    cudaStream_t s) {
  unsigned grid = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  rmsnorm_forward_kernel<T, N><<<grid, kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(w),
                                                          static_cast<T*>(y), rstd, rows, D, eps);
}

// x, dy, dx (rows, D); w (D); rstd (rows). One warp per row:
//   dx_k += rstd * w_k * dy_k - rstd^3 / D * x_k * sum_j(dy_j * w_j * x_j)
__global__ void rmsnorm_dx_kernel(const void* x, const void* w, bool xw_bf16, const float* rstd, const void* dy,
                                  bool dy_bf16, void* dx, bool dx_bf16, int64_t rows, int64_t D) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const int64_t base = r * D;
  float dot = 0.0f;
  for (int64_t j = lane; j < D; j += 32)
    dot += load(dy, dy_bf16, base + j) * load(w, xw_bf16, j) * load(x, xw_bf16, base + j);
  dot = warp_sum(dot);
  const float s = rstd[r], c = s * s * s * dot / float(D);
  for (int64_t j = lane; j < D; j += 32)
    accumulate_at(dx, dx_bf16, base + j,
                  s * load(w, xw_bf16, j) * load(dy, dy_bf16, base + j) - c * load(x, xw_bf16, base + j));
}

// partials (P, D): partials[p, j] = sum over rows [p*rows_per, (p+1)*rows_per) of dy*x*rstd, in row order.
__global__ void rmsnorm_dw_partial_kernel(const void* x, bool x_bf16, const float* rstd, const void* dy, bool dy_bf16,
                                          float* partials, int64_t rows, int64_t D, int64_t rows_per) {
  const int64_t r0 = blockIdx.x * rows_per, r1 = r0 + rows_per < rows ? r0 + rows_per : rows;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    float acc = 0.0f;
    for (int64_t r = r0; r < r1; ++r) acc += load(dy, dy_bf16, r * D + j) * load(x, x_bf16, r * D + j) * rstd[r];
    partials[blockIdx.x * D + j] = acc;
  }
}

// dw[j] += sum_p partials[p, j], in order of p.
__global__ void rmsnorm_dw_finish_kernel(const float* partials, int64_t P, void* dw, bool dw_bf16, int64_t D) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < D; j += int64_t(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
    for (int64_t p = 0; p < P; ++p) acc += partials[p * D + j];
    accumulate_at(dw, dw_bf16, j, acc);
  }
}

int64_t dw_rows_per_partial(int64_t rows) {
  int64_t per = (rows + kMaxDwPartials - 1) / kMaxDwPartials;
  return per < kMinDwRows ? kMinDwRows : per;
}
}  // namespace

int64_t rmsnorm_dw_partials(int64_t rows) {
  if (rows <= 0) return 0;
  int64_t per = dw_rows_per_partial(rows);
  return (rows + per - 1) / per;
}

// x, y (rows, D), w (D), one dtype; rstd (rows) f32 or null.
void rmsnorm_forward(const void* x, const void* w, void* y, bool bf16, float* rstd, int64_t rows, int64_t D, float eps,
                     void* stream) {
  if (rows == 0 || D == 0) return;
  cudaStream_t s = as_stream(stream);
  const bool aligned = aligned16(x) && aligned16(w) && aligned16(y);
  if (bf16) {
    if (aligned && D % 8 == 0) launch_forward<bf16_t, 8>(x, w, y, rstd, rows, D, eps, s);
    else launch_forward<bf16_t, 1>(x, w, y, rstd, rows, D, eps, s);
  } else {
    if (aligned && D % 4 == 0) launch_forward<float, 4>(x, w, y, rstd, rows, D, eps, s);
    else launch_forward<float, 1>(x, w, y, rstd, rows, D, eps, s);
  }
  check_launch("rmsnorm_forward");
}

void rmsnorm_backward(const void* x, const void* w, bool xw_bf16, const float* rstd, const void* dy, bool dy_bf16,
                      void* dx, bool dx_bf16, void* dw, bool dw_bf16, float* dw_partials, int64_t rows, int64_t D,
                      void* stream) {
  if (rows == 0 || D == 0) return;
  cudaStream_t s = as_stream(stream);
  if (dx) {
    unsigned grid = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    rmsnorm_dx_kernel<<<grid, kThreads, 0, s>>>(x, w, xw_bf16, rstd, dy, dy_bf16, dx, dx_bf16, rows, D);
    check_launch("rmsnorm_backward: dx");
  }
  if (dw) {
    const int64_t per = dw_rows_per_partial(rows), P = rmsnorm_dw_partials(rows);
    rmsnorm_dw_partial_kernel<<<unsigned(P), kThreads, 0, s>>>(x, xw_bf16, rstd, dy, dy_bf16, dw_partials, rows, D, per);
    check_launch("rmsnorm_backward: dw partials");
    rmsnorm_dw_finish_kernel<<<blocks_for(D, kThreads), kThreads, 0, s>>>(dw_partials, P, dw, dw_bf16, D);
    check_launch("rmsnorm_backward: dw");
  }
}

}  // namespace dflash::kernels::cuda
