// The update over ranks on the GPU; see optimizer_slices.h. Both multi-rank modes (sharded or not)
// run these kernels over the same slices, so they agree bit for bit; the one-GPU update
// (optimizer.cu) sums the squares in another order, so a world of 1 agrees with them within rounding.
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/optimizer_slices.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kPartials = 1024;  // blocks of the first pass; fixed so the sum order is fixed
constexpr int kThreads = 256;

__global__ void scale_and_partial(float* g, int64_t n, float scale, float* partials) {
  __shared__ float sh[kThreads];
  float s = 0;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += int64_t(kPartials) * kThreads) {
    float x = g[i] * scale;
    g[i] = x;
    s += x * x;
  }
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

__global__ void sum_partials(const float* partials, double* out) {
  __shared__ double sh[kThreads];
  double s = 0;
  for (int i = threadIdx.x; i < kPartials; i += kThreads) s += partials[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = sh[0];
}

__global__ void norm_and_lr_kernel(const double* sums, int count, float* norm, const int32_t* step, float* lr,
                                   float peak, float min_lr, int64_t warmup, int64_t total) {
  double s = 0;
  for (int i = 0; i < count; ++i) s += sums[i];
  norm[0] = float(sqrt(s));
  int64_t t = step[0];
  float value;
  if (total <= 0) {
    value = peak;
  } else if (t < warmup) {
    value = float(double(peak) * double(t + 1) / double(warmup));
  } else {
    int64_t span = total - 1 - warmup;
    double progress = span > 0 ? double(t - warmup) / double(span) : 1.0;
    if (progress > 1.0) progress = 1.0;
    value = float(min_lr + (double(peak) - min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * progress)));
  }
  lr[0] = value;
}

__global__ void adamw_slice_kernel(SliceAdamW a) {
  float clip = 1.0f;
  if (a.max_grad_norm > 0) {
    float c = a.max_grad_norm / (a.norm[0] + 1e-6f);
    clip = c < 1.0f ? c : 1.0f;
  }
  double t = double(a.step[0]) + 1.0;
  float bc1 = float(1.0 - pow(double(a.beta1), t));
  float bc2_sqrt = float(sqrt(1.0 - pow(double(a.beta2), t)));
  float lr = a.lr[0], decay = 1.0f - lr * a.weight_decay, step_size = lr / bc1;
  __nv_bfloat16* bf = static_cast<__nv_bfloat16*>(a.compute_bf16);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
    float gi = a.g[i] * clip;
    float mi = a.beta1 * a.m[i] + (1.0f - a.beta1) * gi;
    float vi = a.beta2 * a.v[i] + (1.0f - a.beta2) * gi * gi;
    a.m[i] = mi;
    a.v[i] = vi;
    float p = a.p[i] * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + a.eps);
    a.p[i] = p;
    if (bf) bf[i] = __float2bfloat16(p);
  }
}

__global__ void finish_kernel(int32_t* step, const float* norm, const float* lr, float* stats) {
  step[0] += 1;
  stats[0] = norm[0];
  stats[1] = lr[0];
}
}  // namespace

void scale_and_sum_squares(float* g, int64_t n, float scale, float* block_partials, double* out, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  scale_and_partial<<<kPartials, kThreads, 0, s>>>(g, n, scale, block_partials);
  check_launch("update: slice squares");
  sum_partials<<<1, kThreads, 0, s>>>(block_partials, out);
  check_launch("update: slice sum");
}

void norm_and_lr(const double* sums, int count, float* norm, const int32_t* step, float* lr, float peak_lr,
                 float min_lr, int64_t warmup_steps, int64_t total_steps, void* stream) {
  norm_and_lr_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(sums, count, norm, step, lr, peak_lr, min_lr,
                                                                     warmup_steps, total_steps);
  check_launch("update: norm and lr");
}

void adamw_slice(const SliceAdamW& a, void* stream) {
  if (a.n == 0) return;
  adamw_slice_kernel<<<blocks_for(a.n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(a);
  check_launch("update: adamw slice");
}

void finish_update(int32_t* step, const float* norm, const float* lr, float* stats, void* stream) {
  finish_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(step, norm, lr, stats);
  check_launch("update: finish");
}

}  // namespace dflash::kernels::cuda
