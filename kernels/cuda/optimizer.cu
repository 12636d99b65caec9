// The optimizer update on the GPU: scale, deterministic global norm, clip, lr schedule from the
// step counter, AdamW on f32 masters with the bf16 compute copy, zero grads, step + 1.
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kPartials = 1024;  // blocks of the norm's first pass; fixed so the sum order is fixed
constexpr int kThreads = 256;

__global__ void scale_and_partial_norm(float* g, int64_t n, float scale, float* partials) {
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

__global__ void finish_norm_and_lr(const float* partials, float* norm, const int32_t* step, float* lr, float peak,
                                   float min_lr, int64_t warmup, int64_t total) {
  __shared__ double sh[kThreads];
  double s = 0;
  for (int i = threadIdx.x; i < kPartials; i += kThreads) s += partials[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  norm[0] = float(sqrt(sh[0]));
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

__global__ void adamw_kernel(OptimizerArgs a) {
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
    a.g[i] = 0.0f;
    if (bf) bf[i] = __float2bfloat16(p);
  }
}

__global__ void finish_step(int32_t* step, const float* norm, const float* lr, float* stats) {
  step[0] += 1;
  stats[0] = norm[0];
  stats[1] = lr[0];
}

__global__ void to_bf16(const float* src, __nv_bfloat16* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16(src[i]);
}
}  // namespace

void optimizer_update(const OptimizerArgs& a, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  scale_and_partial_norm<<<kPartials, kThreads, 0, s>>>(a.g, a.n, a.grad_scale, a.partials);
  check_launch("optimizer: norm");
  finish_norm_and_lr<<<1, kThreads, 0, s>>>(a.partials, a.norm, a.step, a.lr, a.peak_lr, a.min_lr, a.warmup_steps,
                                           a.total_steps);
  check_launch("optimizer: lr");
  adamw_kernel<<<blocks_for(a.n, 256), 256, 0, s>>>(a);
  check_launch("optimizer: adamw");
  finish_step<<<1, 1, 0, s>>>(a.step, a.norm, a.lr, a.stats);
  check_launch("optimizer: step");
}

void convert_f32_to_bf16(const void* src, void* dst, int64_t n, void* stream) {
  if (n == 0) return;
  to_bf16<<<blocks_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(src), static_cast<__nv_bfloat16*>(dst), n);
  check_launch("convert_f32_to_bf16");
}

}  // namespace dflash::kernels::cuda
