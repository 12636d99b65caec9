// Concatenation of two row-major blocks: forward copies bytes (any dtype), backward splits an
// f32 gradient and accumulates each half.
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

// a (outer, a_inner bytes), b (outer, b_inner bytes), y (outer, a_inner + b_inner bytes)
void concat_forward(const void* a, const void* b, void* y, int64_t outer, size_t a_inner, size_t b_inner) {
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  char* py = static_cast<char*>(y);
  for (int64_t o = 0; o < outer; ++o) {
    if (a_inner) std::memcpy(py, pa + size_t(o) * a_inner, a_inner);
    if (b_inner) std::memcpy(py + a_inner, pb + size_t(o) * b_inner, b_inner);
    py += a_inner + b_inner;
  }
}

void split_forward(const void* x, int64_t outer, const std::vector<void*>& parts, const std::vector<size_t>& inner) {
  size_t row = 0;
  for (size_t w : inner) row += w;
  const char* px = static_cast<const char*>(x);
  for (int64_t o = 0; o < outer; ++o) {
    size_t at = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (inner[i]) std::memcpy(static_cast<char*>(parts[i]) + size_t(o) * inner[i], px + size_t(o) * row + at, inner[i]);
      at += inner[i];
    }
  }
}

// dy (outer, a_inner + b_inner), da (outer, a_inner), db (outer, b_inner), in floats; da or db
// may be null when that input needs no gradient.
void concat_backward(const float* dy, float* da, float* db, int64_t outer, int64_t a_inner, int64_t b_inner) {
  for (int64_t o = 0; o < outer; ++o) {
    const float* row = dy + o * (a_inner + b_inner);
    if (da)
      for (int64_t j = 0; j < a_inner; ++j) da[o * a_inner + j] += row[j];
    if (db)
      for (int64_t j = 0; j < b_inner; ++j) db[o * b_inner + j] += row[a_inner + j];
  }
}

}  // namespace dflash::kernels::cpu
