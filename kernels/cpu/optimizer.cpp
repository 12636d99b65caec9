// Optimizer kernels over flat f32 buffers: global gradient norm, clipping, the learning-rate
// schedule computed from the step counter, AdamW with decoupled weight decay, step + 1.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

// out[0] = sqrt(sum g^2), accumulated in double in index order.
void grad_norm(const float* g, int64_t n, float* out) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(g[i]) * g[i];
  out[0] = float(std::sqrt(s));
}

// g *= min(1, max_norm / (norm + 1e-6)); nothing when max_norm <= 0 (clipping off).
void clip_by_norm(float* g, int64_t n, const float* norm, float max_norm) {
  if (max_norm <= 0) return;
  float c = max_norm / (norm[0] + 1e-6f);
  if (c >= 1.0f) return;
  for (int64_t i = 0; i < n; ++i) g[i] *= c;
}

// Linear warmup to peak over warmup_steps, then cosine to min_lr reached at the last step
// (step = total_steps - 1). total_steps <= 0: constant peak_lr.
void lr_schedule(const int32_t* step, const LrSchedule& s, float* lr) {
  int64_t t = step[0];
  if (s.total_steps <= 0) {
    lr[0] = s.peak_lr;
    return;
  }
  if (t < s.warmup_steps) {
    lr[0] = float(double(s.peak_lr) * double(t + 1) / double(s.warmup_steps));
    return;
  }
  int64_t span = s.total_steps - 1 - s.warmup_steps;
  double progress = span > 0 ? double(t - s.warmup_steps) / double(span) : 1.0;
  if (progress > 1.0) progress = 1.0;
  lr[0] = float(s.min_lr + (double(s.peak_lr) - s.min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

// p <- p - lr*wd*p; m <- b1 m + (1-b1) g; v <- b2 v + (1-b2) g^2;
// p <- p - lr * m_hat / (sqrt(v_hat) + eps), with t = step + 1 for the bias corrections.
void adamw(float* p, const float* g, float* m, float* v, int64_t n, const int32_t* step, const float* lr,
           const AdamW& h) {
  double t = double(step[0]) + 1.0;
  float bc1 = float(1.0 - std::pow(double(h.beta1), t));
  float bc2_sqrt = float(std::sqrt(1.0 - std::pow(double(h.beta2), t)));
  float a = lr[0], decay = 1.0f - lr[0] * h.weight_decay, step_size = a / bc1;
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    float mi = h.beta1 * m[i] + (1.0f - h.beta1) * gi;
    float vi = h.beta2 * v[i] + (1.0f - h.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float denom = std::sqrt(vi) / bc2_sqrt + h.eps;
    p[i] = p[i] * decay - step_size * mi / denom;
  }
}

void increment_step(int32_t* step) { step[0] += 1; }

void scale_inplace(float* x, int64_t n, float s) {
  if (s == 1.0f) return;
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace dflash::kernels::cpu
