// Elementwise add, mul and scale, forward and backward.
#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

// y = a + b; the backward of add is accumulate_f32 into each input's gradient.
void add_forward(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void mul_forward(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

void mul_backward(const float* a, const float* b, const float* dy, float* da, float* db, int64_t n) {
  if (da)
    for (int64_t i = 0; i < n; ++i) da[i] += dy[i] * b[i];
  if (db)
    for (int64_t i = 0; i < n; ++i) db[i] += dy[i] * a[i];
}

void scale_forward(const float* a, float s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * s;
}

void scale_backward(const float* dy, float s, float* da, int64_t n) {
  for (int64_t i = 0; i < n; ++i) da[i] += dy[i] * s;
}

}  // namespace dflash::kernels::cpu
