// Rotary position embedding, rotate-half convention (HF Llama/Qwen), forward and backward.
// The angle is the f32 product float(pos) * inv_freq[i] and cos/sin are taken in f32, as HF does.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

// x, y (rows, heads, hd); positions (rows); inv_freq (hd/2). Each (row, i) angle is shared by all heads.
void rope_forward(const float* x, const int32_t* positions, const float* inv_freq, float* y, int64_t rows,
                  int64_t heads, int64_t hd) {
  int64_t half = hd / 2;
  for (int64_t r = 0; r < rows; ++r) {
    float pos = float(positions[r]);
    const float* xr = x + r * heads * hd;
    float* yr = y + r * heads * hd;
    for (int64_t i = 0; i < half; ++i) {
      float angle = pos * inv_freq[i];
      float c = std::cos(angle), s = std::sin(angle);
      for (int64_t h = 0; h < heads; ++h) {
        float x1 = xr[h * hd + i], x2 = xr[h * hd + i + half];
        yr[h * hd + i] = x1 * c - x2 * s;
        yr[h * hd + i + half] = x2 * c + x1 * s;
      }
    }
  }
}

// dy, dx (rows, heads, hd): dx += R(-angle) dy, the transpose of the forward rotation (dx =
// when fresh).
void rope_backward(const float* dy, const int32_t* positions, const float* inv_freq, float* dx, int64_t rows,
                   int64_t heads, int64_t hd, bool dx_fresh) {
  int64_t half = hd / 2;
  for (int64_t r = 0; r < rows; ++r) {
    float pos = float(positions[r]);
    const float* dyr = dy + r * heads * hd;
    float* dxr = dx + r * heads * hd;
    for (int64_t i = 0; i < half; ++i) {
      float angle = pos * inv_freq[i];
      float c = std::cos(angle), s = std::sin(angle);
      for (int64_t h = 0; h < heads; ++h) {
        float d1 = dyr[h * hd + i], d2 = dyr[h * hd + i + half];
        const float a = d1 * c + d2 * s, b = d2 * c - d1 * s;
        dxr[h * hd + i] = (dx_fresh ? 0.0f : dxr[h * hd + i]) + a;  // added to 0: a zero-filled dx's bits
        dxr[h * hd + i + half] = (dx_fresh ? 0.0f : dxr[h * hd + i + half]) + b;
      }
    }
  }
}

}  // namespace dflash::kernels::cpu
