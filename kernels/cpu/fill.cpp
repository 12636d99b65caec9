// Fill, copy and accumulate: the primitive kernels the runtime itself uses.
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

void fill_zero(void* p, size_t bytes) { std::memset(p, 0, bytes); }

void fill_f32(float* p, int64_t n, float value) {
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (dst != src) std::memmove(dst, src, bytes);
}

void accumulate_f32(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace dflash::kernels::cpu
