// Loss-weight normalisation and weighted accuracy (no gradients).
#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

void normalize_weights(const float* w, int64_t n, float eps, float* out) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += w[i];
  float denom = float(s) + eps;
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] / denom;
}

void weighted_accuracy(const int32_t* argmax, const int32_t* labels, const float* w, int64_t n, float eps, float* out) {
  double hits = 0, total = 0;
  for (int64_t i = 0; i < n; ++i) {
    total += w[i];
    if (w[i] > 0.5f && argmax[i] == labels[i]) hits += 1;
  }
  out[0] = float(hits / (total + eps));
}

}  // namespace dflash::kernels::cpu
