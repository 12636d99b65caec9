// Full reductions to one element on the GPU: sum (mean is sum with a scale), forward and
// backward. Two passes over fixed ranges in double, so the result depends only on n.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int64_t kMinPerPartial = 8192;  // elements per first-pass block, at least
constexpr int64_t kMaxPartials = 1024;

int64_t per_partial(int64_t n) {
  int64_t per = (n + kMaxPartials - 1) / kMaxPartials;
  return per < kMinPerPartial ? kMinPerPartial : per;
}

// partials[p] = sum of x over [p*per, (p+1)*per), in double.
__global__ void sum_partial_kernel(const void* x, bool bf16, int64_t n, int64_t per, double* partials) {
  __shared__ double sh[kThreads / 32];
  const int64_t i0 = blockIdx.x * per, i1 = i0 + per < n ? i0 + per : n;
  double s = 0.0;
  for (int64_t i = i0 + threadIdx.x; i < i1; i += kThreads) s += load(x, bf16, i);
  s = block_sum<kThreads>(s, sh);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// out[0] = float(sum of partials) * scale, stored in out's dtype.
__global__ void sum_finish_kernel(const double* partials, int64_t P, float scale, void* out, bool bf16) {
  __shared__ double sh[kThreads / 32];
  double s = 0.0;
  for (int64_t p = threadIdx.x; p < P; p += kThreads) s += partials[p];
  s = block_sum<kThreads>(s, sh);
  if (threadIdx.x == 0) store(out, bf16, 0, float(s) * scale);
}

// dx[i] += dout[0] * scale.
__global__ void sum_backward_kernel(const void* dout, bool dout_bf16, float scale, void* dx, bool dx_bf16, int64_t n) {
  const float g = load(dout, dout_bf16, 0) * scale;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    accumulate_at(dx, dx_bf16, i, g);
}
}  // namespace

int64_t sum_partials(int64_t n) {
  if (n <= 0) return 1;
  int64_t per = per_partial(n);
  return (n + per - 1) / per;
}

// x (n), partials (sum_partials(n)) scratch, out (1) in x's dtype.
void sum_forward(const void* x, bool bf16, int64_t n, float scale, double* partials, void* out, void* stream) {
  cudaStream_t s = as_stream(stream);
  const int64_t P = sum_partials(n);
  if (n > 0) {
    sum_partial_kernel<<<unsigned(P), kThreads, 0, s>>>(x, bf16, n, per_partial(n), partials);
    check_launch("sum_forward: partials");
  }
  sum_finish_kernel<<<1, kThreads, 0, s>>>(partials, n > 0 ? P : 0, scale, out, bf16);
  check_launch("sum_forward");
}

void sum_backward(const void* dout, bool dout_bf16, float scale, void* dx, bool dx_bf16, int64_t n, void* stream) {
  if (n == 0) return;
  sum_backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(dout, dout_bf16, scale, dx, dx_bf16,
                                                                                 n);
  check_launch("sum_backward");
}

}  // namespace dflash::kernels::cuda
