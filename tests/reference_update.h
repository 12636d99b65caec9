// The optimizer step of docs/MODEL.md ("Loss weights and the loss" for the mean over k*W
// micro-batches, "Optimizer and schedule" for clipping, the schedule and AdamW) in double precision, written
// from the text for the trainer tests. It deliberately includes nothing of runtime/ or kernels/.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace dflash::test::reference {

struct Hyper {
  double lr = 0, min_lr_ratio = 0, warmup_ratio = 0;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0;
  double max_grad_norm = 0;  // 0: no clipping
  int64_t steps = 0;         // training.steps (optimizer steps)
};

// The schedule's step convention. Steps are numbered s = 1..steps, as metrics.jsonl logs them;
// the update of step s is the s-th. With Wu = round(warmup_ratio * steps) (ties away from zero):
//   s <= Wu:  lr * s / Wu                                   (linear warmup, reaching lr at s = Wu)
//   s >  Wu:  lo + (lr - lo) * (1 + cos(pi * x)) / 2,  x = (s - 1 - Wu) / (steps - 1 - Wu)
//             (x = 1 when steps - 1 - Wu <= 0), lo = min_lr_ratio * lr,
// so the first step after warmup runs at lr and the last step (s = steps) at lo exactly.
inline int64_t warmup_steps(const Hyper& h) { return int64_t(std::llround(h.warmup_ratio * double(h.steps))); }

inline double lr_at(const Hyper& h, int64_t s) {
  const int64_t wu = warmup_steps(h);
  if (s <= wu) return h.lr * double(s) / double(wu);
  const double lo = h.min_lr_ratio * h.lr;
  const int64_t span = h.steps - 1 - wu;
  const double x = span > 0 ? std::min(1.0, double(s - 1 - wu) / double(span)) : 1.0;
  return lo + (h.lr - lo) * 0.5 * (1.0 + std::cos(M_PI * x));
}

// Adam moments and the count of updates done.
struct State {
  std::vector<double> m, v;
  int64_t t = 0;
};

struct Outcome {
  double grad_norm = 0;  // of the mean gradient, before clipping (what metrics.jsonl logs)
  double clip = 1;       // the factor the mean gradient was multiplied by
  double lr = 0;
  std::vector<double> params;  // after the step
};

// Step s from `params` with the k*W micro-batch gradients `grads` (any order: their mean is taken
// in double). Clipping multiplies by min(1, max_grad_norm / (norm + 1e-6)), torch's
// clip_grad_norm_. AdamW: p <- p - lr wd p; m <- b1 m + (1-b1) g; v <- b2 v + (1-b2) g^2;
// p <- p - lr mhat / (sqrt(vhat) + eps), with mhat = m / (1 - b1^t), vhat = v / (1 - b2^t) after t updates.
inline Outcome step(const Hyper& h, State& st, const std::vector<float>& params,
                    const std::vector<std::vector<float>>& grads, int64_t s) {
  const size_t n = params.size();
  std::vector<double> g(n, 0.0);
  for (const auto& gj : grads)
    for (size_t i = 0; i < n; ++i) g[i] += double(gj[i]);
  double ss = 0;
  for (double& x : g) {
    x /= double(grads.size());
    ss += x * x;
  }
  Outcome out;
  out.grad_norm = std::sqrt(ss);
  if (h.max_grad_norm > 0) out.clip = std::min(1.0, h.max_grad_norm / (out.grad_norm + 1e-6));
  out.lr = lr_at(h, s);
  if (st.m.empty()) st.m.assign(n, 0.0), st.v.assign(n, 0.0);
  st.t += 1;
  const double bc1 = 1.0 - std::pow(h.beta1, double(st.t)), bc2 = 1.0 - std::pow(h.beta2, double(st.t));
  out.params.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const double gi = g[i] * out.clip;
    double p = double(params[i]);
    p -= out.lr * h.weight_decay * p;
    st.m[i] = h.beta1 * st.m[i] + (1 - h.beta1) * gi;
    st.v[i] = h.beta2 * st.v[i] + (1 - h.beta2) * gi * gi;
    p -= out.lr * (st.m[i] / bc1) / (std::sqrt(st.v[i] / bc2) + h.eps);
    out.params[i] = p;
  }
  return out;
}

}  // namespace dflash::test::reference
