// The optimizer update on the GPU: deterministic global norm of the scaled gradients, clip, lr
// schedule from the step counter, AdamW on f32 masters with the bf16 compute copy, zero grads (when asked),
// step + 1. Three kernels: a read-only norm pass, a one-thread finish (norm, lr, step
// coefficients, step + 1, stats) and the AdamW pass (16-byte accesses where aligned).
//
// Gradient scaling: g_used = (g * grad_scale) * clip, both products rounded to f32 as when the
// scaled gradient was written back by the norm pass, and the norm is sqrt(sum (g * grad_scale)^2)
// over those same f32 products: the grad norm of the averaged gradient, unchanged. Only where
// the scaled value lives changed (a register instead of a rewrite of g), saving 8 bytes/element.
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kPartials = 1024;  // blocks of the norm pass; fixed, so the sum order depends only on n
constexpr int kThreads = 256;
constexpr int64_t kNormStride = int64_t(kPartials) * kThreads;  // threads of the norm pass

// What the AdamW pass needs from the finish (written into partials[0..3] once the norm is summed).
enum Coefficient { kClip, kDecay, kStepSize, kBc2Sqrt, kCoefficients };

// partials[b] = sum of (g*scale)^2 over the float4 packs b*256 + t + k*kNormStride (t < 256, k >= 0),
// each thread's packs in order of k with one accumulator per lane of the pack, then the 4 lanes,
// then the elements after the last whole pack (all of them when g is not 16-byte aligned, packs
// = 0) strided the same way, then the block in fixed order. The order depends only on n.
__global__ void __launch_bounds__(kThreads)
    partial_norm_kernel(const float* g, int64_t n, int64_t packs, float scale, float* partials) {
  __shared__ float warp_totals[kThreads / 32];
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  auto add = [&](const float4 v) {
    const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float x = __fmul_rn(e[j], scale);
      s[j] = __fmaf_rn(x, x, s[j]);
    }
  };
  const float4* g4 = reinterpret_cast<const float4*>(g);
  int64_t k = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  for (; k + kNormStride < packs; k += 2 * kNormStride) {  // two independent loads in flight
    const float4 a = g4[k], b = g4[k + kNormStride];
    add(a);
    add(b);
  }
  if (k < packs) add(g4[k]);
  float total = __fadd_rn(__fadd_rn(s[0], s[1]), __fadd_rn(s[2], s[3]));
  for (int64_t i = packs * 4 + blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += kNormStride) {
    const float x = __fmul_rn(g[i], scale);
    total = __fmaf_rn(x, x, total);
  }
  total = block_sum<kThreads>(total, warp_totals);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// One block: norm = sqrt(sum of the partials, in double, fixed tree); then thread 0 computes the
// lr from the step (as kernels/cpu lr_schedule), the clip factor and the AdamW coefficients
// (bias corrections in double, once per step), writes them to partials[0..3], adds 1 to the step
// and writes stats = {norm, lr}. The AdamW pass reads the coefficients, never the step.
__global__ void __launch_bounds__(kThreads) finish_kernel(OptimizerArgs a) {
  __shared__ double sh[kThreads];
  double s = 0;
  for (int i = threadIdx.x; i < kPartials; i += kThreads) s += a.partials[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  const float norm = float(sqrt(sh[0]));
  a.norm[0] = norm;
  const int64_t t = a.step[0];
  float lr;
  if (a.total_steps <= 0) {
    lr = a.peak_lr;
  } else if (t < a.warmup_steps) {
    lr = float(double(a.peak_lr) * double(t + 1) / double(a.warmup_steps));
  } else {
    const int64_t span = a.total_steps - 1 - a.warmup_steps;
    double progress = span > 0 ? double(t - a.warmup_steps) / double(span) : 1.0;
    if (progress > 1.0) progress = 1.0;
    lr = float(a.min_lr + (double(a.peak_lr) - a.min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * progress)));
  }
  a.lr[0] = lr;
  // The f32 roundings of the former per-thread prologue of the AdamW kernel, pinned by intrinsics.
  float clip = 1.0f;
  if (a.max_grad_norm > 0) {
    const float c = __fdiv_rn(a.max_grad_norm, __fadd_rn(norm, 1e-6f));
    clip = c < 1.0f ? c : 1.0f;
  }
  const double tt = double(t) + 1.0;
  const float bc1 = float(1.0 - pow(double(a.beta1), tt));
  const float bc2_sqrt = float(sqrt(1.0 - pow(double(a.beta2), tt)));
  a.partials[kClip] = clip;
  a.partials[kDecay] = __fmaf_rn(-lr, a.weight_decay, 1.0f);  // 1 - lr * wd
  a.partials[kStepSize] = __fdiv_rn(lr, bc1);
  a.partials[kBc2Sqrt] = bc2_sqrt;
  a.step[0] = int32_t(t + 1);
  a.stats[0] = norm;
  a.stats[1] = lr;
}

// AdamW on element i with the exact roundings of the original scalar kernel (CPU reference:
// kernels/cpu/optimizer.cpp, the same formula in the same order):
//   gi = (g*scale)*clip; m = fma(gi, 1-b1, b1*m); v = fma(v, b2, ((1-b2)*gi)*gi);
//   p = p*decay - (step_size*m) / (sqrt(v)/bc2_sqrt + eps)
struct AdamWElement {
  float scale, clip, beta1, one_minus_beta1, beta2, one_minus_beta2, decay, step_size, bc2_sqrt, eps;
  __device__ __forceinline__ void operator()(float g, float& m, float& v, float& p) const {
    const float gi = __fmul_rn(__fmul_rn(g, scale), clip);
    m = __fmaf_rn(gi, one_minus_beta1, __fmul_rn(beta1, m));
    v = __fmaf_rn(v, beta2, __fmul_rn(__fmul_rn(gi, one_minus_beta2), gi));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), bc2_sqrt), eps);
    p = __fsub_rn(__fmul_rn(p, decay), __fdiv_rn(__fmul_rn(step_size, m), denom));
  }
};

// p, g, m, v (n) f32, bf (n) bf16 or null. float4 packs [0, packs), then the rest one by one.
// g is zeroed when a.zero_grads; bf gets p rounded to nearest even.
__global__ void __launch_bounds__(kThreads) adamw_kernel(OptimizerArgs a, int64_t packs) {
  const float* coef = a.partials;
  const AdamWElement f{a.grad_scale,   coef[kClip],  a.beta1,         __fsub_rn(1.0f, a.beta1),
                       a.beta2,        __fsub_rn(1.0f, a.beta2), coef[kDecay], coef[kStepSize],
                       coef[kBc2Sqrt], a.eps};
  bf16_t* bf = static_cast<bf16_t*>(a.compute_bf16);
  const int64_t stride = int64_t(gridDim.x) * kThreads, first = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  for (int64_t k = first; k < packs; k += stride) {
    const float4 g = reinterpret_cast<const float4*>(a.g)[k];
    float4 m = reinterpret_cast<const float4*>(a.m)[k], v = reinterpret_cast<const float4*>(a.v)[k];
    float4 p = reinterpret_cast<const float4*>(a.p)[k];
    f(g.x, m.x, v.x, p.x);
    f(g.y, m.y, v.y, p.y);
    f(g.z, m.z, v.z, p.z);
    f(g.w, m.w, v.w, p.w);
    reinterpret_cast<float4*>(a.m)[k] = m;
    reinterpret_cast<float4*>(a.v)[k] = v;
    reinterpret_cast<float4*>(a.p)[k] = p;
    if (a.zero_grads) reinterpret_cast<float4*>(a.g)[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (bf) reinterpret_cast<uint2*>(bf)[k] = make_uint2(pack_bf16x2(p.x, p.y), pack_bf16x2(p.z, p.w));
  }
  for (int64_t i = packs * 4 + first; i < a.n; i += stride) {
    float m = a.m[i], v = a.v[i], p = a.p[i];
    f(a.g[i], m, v, p);
    a.m[i] = m;
    a.v[i] = v;
    a.p[i] = p;
    if (a.zero_grads) a.g[i] = 0.0f;
    if (bf) bf[i] = __float2bfloat16(p);
  }
}

__global__ void to_bf16(const float* src, __nv_bfloat16* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16(src[i]);
}
}  // namespace

void optimizer_update(const OptimizerArgs& a, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool g_aligned = aligned16(a.g);
  partial_norm_kernel<<<kPartials, kThreads, 0, s>>>(a.g, a.n, g_aligned ? a.n / 4 : 0, a.grad_scale, a.partials);
  check_launch("optimizer: norm");
  finish_kernel<<<1, kThreads, 0, s>>>(a);
  check_launch("optimizer: norm, lr and step");
  const bool aligned = g_aligned && aligned16(a.p) && aligned16(a.m) && aligned16(a.v) &&
                       (reinterpret_cast<uintptr_t>(a.compute_bf16) & 7u) == 0;
  const int64_t packs = aligned ? a.n / 4 : 0;
  if (a.n > 0)
    adamw_kernel<<<grid_for<adamw_kernel>(packs > 0 ? packs : a.n, kThreads), kThreads, 0, s>>>(a, packs);
  check_launch("optimizer: adamw");
}

void convert_f32_to_bf16(const void* src, void* dst, int64_t n, void* stream) {
  if (n == 0) return;
  to_bf16<<<blocks_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(src), static_cast<__nv_bfloat16*>(dst), n);
  check_launch("convert_f32_to_bf16");
}

}  // namespace dflash::kernels::cuda
