// Embedding: row lookup in a [V, H] table, and its backward, a scatter-add into the table's gradient.
// Ids are trusted: they are range-checked when staged, so nothing is clamped here.
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

// table (V, H), ids (n), out (n, H)
void embedding_forward(const float* table, const int32_t* ids, float* out, int64_t n, int64_t H) {
  if (H == 0) return;
  for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * H, table + int64_t(ids[i]) * H, size_t(H) * sizeof(float));
}

// ids (n), dout (n, H), dtable (V, H). Rows are added in order of i, so a repeated id sums its
// rows in a fixed order.
void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n, int64_t H) {
  for (int64_t i = 0; i < n; ++i) {
    float* row = dtable + int64_t(ids[i]) * H;
    const float* d = dout + i * H;
    for (int64_t j = 0; j < H; ++j) row[j] += d[j];
  }
}

}  // namespace dflash::kernels::cpu
