// RMSNorm over rows of D: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps); forward and backward.
// Sums run in f32 in index order, so results are deterministic.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

// x (rows, D), w (D), y (rows, D), rstd (rows); rstd may be null when no backward follows.
void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t D, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    float ss = 0.0f;
    for (int64_t j = 0; j < D; ++j) ss += xr[j] * xr[j];
    float s = 1.0f / std::sqrt(ss / float(D) + eps);
    if (rstd) rstd[r] = s;
    for (int64_t j = 0; j < D; ++j) yr[j] = xr[j] * s * w[j];
  }
}

// x, dy, dx (rows, D); w, dw (D); rstd (rows) from the forward. dx and dw may be null.
//   dx_k += rstd * w_k * dy_k - rstd^3 / D * x_k * sum_j(dy_j * w_j * x_j)
//   dw_j += sum_r dy_rj * x_rj * rstd_r, accumulated in row order.
void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, float* dx, float* dw,
                      int64_t rows, int64_t D, bool dx_fresh) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    const float* dyr = dy + r * D;
    float s = rstd[r];
    if (dx) {
      float dot = 0.0f;
      for (int64_t j = 0; j < D; ++j) dot += dyr[j] * w[j] * xr[j];
      float c = s * s * s * dot / float(D);
      float* dxr = dx + r * D;
      for (int64_t j = 0; j < D; ++j) {
        const float term = s * w[j] * dyr[j] - c * xr[j];
        dxr[j] = (dx_fresh ? 0.0f : dxr[j]) + term;  // added to 0: a zero-filled dx's bits
      }
    }
    if (dw)
      for (int64_t j = 0; j < D; ++j) dw[j] += dyr[j] * xr[j] * s;
  }
}

}  // namespace dflash::kernels::cpu
