// SwiGLU: y = silu(g) * u with silu(g) = g * sigmoid(g); forward and backward.
// The sigmoid never evaluates exp of a positive argument, so large |g| cannot overflow.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

namespace {
inline float sigmoid(float v) {
  if (v >= 0.0f) return 1.0f / (1.0f + std::exp(-v));
  float e = std::exp(v);
  return e / (1.0f + e);
}
}  // namespace

// g, u, y (n)
void swiglu_forward(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] * sigmoid(g[i]) * u[i];
}

// g, u, dy (n); dg, du (n) may be null.
//   dg += dy * u * sig * (1 + g * (1 - sig)),  du += dy * g * sig
void swiglu_backward(const float* g, const float* u, const float* dy, float* dg, float* du, int64_t n, bool dg_fresh,
                     bool du_fresh) {
  // dg and du may be g and u themselves: each element is read before it is written.
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i], ui = u[i], d = dy[i], s = sigmoid(gi);
    if (dg) dg[i] = (dg_fresh ? 0.0f : dg[i]) + d * ui * s * (1.0f + gi * (1.0f - s));
    if (du) du[i] = (du_fresh ? 0.0f : du[i]) + d * gi * s;
  }
}

}  // namespace dflash::kernels::cpu
