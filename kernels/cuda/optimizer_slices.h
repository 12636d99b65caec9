// CUDA kernels of the update over ranks (dist/optimizer_distributed.cpp): scale a gradient
// slice and sum its squares in a fixed order, the norm from the slices' sums in rank order with
// the lr schedule, AdamW over one slice (writing its bf16 compute copy), and the step's end.
#pragma once
#include <cstdint>

namespace dflash::kernels::cuda {

// g[0, n) *= scale; out[0] = sum of g^2 (1024 block partials in f32, then summed in double in a
// fixed tree): an order that depends only on n.
void scale_and_sum_squares(float* g, int64_t n, float scale, float* block_partials, double* out, void* stream);

// norm = sqrt(sums[0] + ... + sums[count-1]); lr from the step counter (warmup, then cosine).
void norm_and_lr(const double* sums, int count, float* norm, const int32_t* step, float* lr, float peak_lr,
                 float min_lr, int64_t warmup_steps, int64_t total_steps, void* stream);

struct SliceAdamW {
  float *p, *g, *m, *v;  // the slice's master, gradient and moments
  void* compute_bf16;    // the slice's bf16 compute copy (may be null)
  int64_t n;
  const int32_t* step;
  const float *lr, *norm;
  float max_grad_norm, beta1, beta2, eps, weight_decay;
};
// Clip by the norm, AdamW on the slice (the per-element math of optimizer_update).
void adamw_slice(const SliceAdamW& a, void* stream);

// step + 1; stats = {norm, lr}.
void finish_update(int32_t* step, const float* norm, const float* lr, float* stats, void* stream);

}  // namespace dflash::kernels::cuda
