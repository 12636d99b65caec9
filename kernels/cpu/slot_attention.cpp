// CPU kernels of the slot KV cache (kernels/cpu/generate_kernels.h): attention of rows that each
// read their own slot up to their own position, the scatter of new keys and values into their
// slots, and the gather of chosen rows.
#include <cstring>

#include "kernels/cpu/decode_kernels.h"
#include "kernels/cpu/generate_kernels.h"

namespace dflash::kernels::cpu {

// Per (row, head), one cached_attention_row over the row's slot: the same order for every row,
// whatever n, its slot or the others.
void slot_attention_forward(const float* q, const float* k, const float* v, const int32_t* slot, const int32_t* pos,
                            const SlotAttentionDims& d, float* out) {
  const int64_t group = d.nh / d.nkv, hd = d.hd, kv_stride = d.nkv * hd, slot_stride = d.C * kv_stride;
  for (int64_t i = 0; i < d.n; ++i) {
    const int64_t s = slot[i];
    int64_t last = pos[i];  // the row's position: it sees keys 0..last
    if (last > d.C - 1) last = d.C - 1;
    if (s < 0 || s >= d.S || last < 0) {
      std::memset(out + i * d.nh * hd, 0, size_t(d.nh * hd) * sizeof(float));
      continue;
    }
    for (int64_t h = 0; h < d.nh; ++h) {
      const float* kh = k + s * slot_stride + (h / group) * hd;
      const float* vh = v + s * slot_stride + (h / group) * hd;
      cached_attention_row(q + (i * d.nh + h) * hd, kh, vh, last, kv_stride, hd, d.scale, out + (i * d.nh + h) * hd);
    }
  }
}

void scatter_slot_rows(void* cache, int64_t S, int64_t C, const void* src, int64_t n, const int32_t* slot,
                       const int32_t* pos, size_t row_bytes) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = slot[i], p = pos[i];
    if (s < 0 || s >= S || p < 0 || p >= C) continue;
    std::memcpy(static_cast<char*>(cache) + size_t(s * C + p) * row_bytes,
                static_cast<const char*>(src) + size_t(i) * row_bytes, row_bytes);
  }
}

void gather_rows(const void* src, int64_t n, const int32_t* index, int64_t m, void* out, size_t row_bytes) {
  for (int64_t e = 0; e < m; ++e) {
    char* dst = static_cast<char*>(out) + size_t(e) * row_bytes;
    const int64_t r = index[e];
    if (r >= 0 && r < n) std::memcpy(dst, static_cast<const char*>(src) + size_t(r) * row_bytes, row_bytes);
    else std::memset(dst, 0, row_bytes);
  }
}

}  // namespace dflash::kernels::cpu
