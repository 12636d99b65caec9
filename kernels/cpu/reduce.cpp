// Full reductions to one element: sum (mean is sum with a scale), forward and backward.
#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

// out[0] = sum(x), accumulated in double in index order (deterministic).
void sum_forward(const float* x, int64_t n, float* out) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  out[0] = float(s);
}

// dx[i] += dout[0] * scale.
void sum_backward(const float* dout, float scale, float* dx, int64_t n) {
  float g = dout[0] * scale;
  for (int64_t i = 0; i < n; ++i) dx[i] += g;
}

}  // namespace dflash::kernels::cpu
