// CPU kernels of the decode path: row-independent linear, attention over a KV cache, row copies
// at device-side offsets, positions from a device-side base, and argmax with the top-2 margin.
#include <cmath>
#include <cstring>

#include "kernels/cpu/decode_kernels.h"

namespace dflash::kernels::cpu {

// Columns in blocks of 16 so a block of w stays in cache while every row of x passes over it.
void linear_rows_f32(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N) {
  constexpr int64_t kCols = 16;
  for (int64_t j0 = 0; j0 < N; j0 += kCols) {
    const int64_t j1 = j0 + kCols < N ? j0 + kCols : N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = j0; j < j1; ++j) y[i * N + j] = dot8(x + i * K, w + j * K, K);
  }
}

// Keys in tiles of 64; each tile's scores, its max, the running max and sum rescaled, exp, and
// out += P V.
void cached_attention_row(const float* qr, const float* kh, const float* vh, int64_t last, int64_t kv_stride,
                          int64_t hd, float scale, float* o) {
  constexpr int64_t kTile = 64;
  float scores[kTile];
  float acc[kCachedAttentionMaxHeadDim];
  float row_max = -INFINITY, row_sum = 0.0f;
  for (int64_t e = 0; e < hd; ++e) acc[e] = 0.0f;
  for (int64_t j0 = 0; j0 <= last; j0 += kTile) {
    const int64_t m = (last + 1 - j0) < kTile ? (last + 1 - j0) : kTile;
    float mx = row_max;
    for (int64_t j = 0; j < m; ++j) {
      scores[j] = scale * dot8(qr, kh + (j0 + j) * kv_stride, hd);
      mx = scores[j] > mx ? scores[j] : mx;
    }
    const float correction = std::exp(row_max - mx);  // 0 before the first tile
    row_sum *= correction;
    for (int64_t e = 0; e < hd; ++e) acc[e] *= correction;
    for (int64_t j = 0; j < m; ++j) {
      const float p = std::exp(scores[j] - mx);
      row_sum += p;
      const float* vr = vh + (j0 + j) * kv_stride;
      for (int64_t e = 0; e < hd; ++e) acc[e] += p * vr[e];
    }
    row_max = mx;
  }
  // last >= 0, so key 0 is seen and row_sum >= 1.
  const float inv = 1.0f / row_sum;
  for (int64_t e = 0; e < hd; ++e) o[e] = acc[e] * inv;
}

// Per (row, head), one cached_attention_row: the same order for every row, whatever n.
void cached_attention_forward(const float* q, const float* k, const float* v, const int32_t* pos0,
                              const CachedAttentionDims& d, float* out) {
  const int64_t group = d.nh / d.nkv, hd = d.hd, kv_stride = d.nkv * hd;
  const int64_t base = pos0[0];
  for (int64_t i = 0; i < d.n; ++i) {
    int64_t last = base + i;  // the row's position: it sees keys 0..last (pos0 >= 0, so last >= 0)
    if (last > d.C - 1) last = d.C - 1;
    for (int64_t h = 0; h < d.nh; ++h)
      cached_attention_row(q + (i * d.nh + h) * hd, k + (h / group) * hd, v + (h / group) * hd, last, kv_stride, hd,
                           d.scale, out + (i * d.nh + h) * hd);
  }
}

void copy_rows(void* dst, int64_t dst_rows, const int32_t* dst_at, const void* src, int64_t src_rows,
               const int32_t* src_at, int64_t n, const int32_t* count, size_t row_bytes) {
  const int64_t d0 = dst_at ? dst_at[0] : 0, s0 = src_at ? src_at[0] : 0;
  int64_t rows = count ? count[0] : n;
  if (rows > n) rows = n;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t di = d0 + r, si = s0 + r;
    if (di < 0 || di >= dst_rows || si < 0 || si >= src_rows) continue;
    std::memcpy(static_cast<char*>(dst) + size_t(di) * row_bytes, static_cast<const char*>(src) + size_t(si) * row_bytes,
                row_bytes);
  }
}

void arange_from(const int32_t* base, int64_t n, int32_t* out) {
  const int32_t b = base[0];
  for (int64_t i = 0; i < n; ++i) out[i] = b + int32_t(i);
}

void argmax_rows(const float* x, int64_t n, int64_t V, int32_t* index, float* margin, float* top) {
  for (int64_t r = 0; r < n; ++r) {
    const float* row = x + r * V;
    int64_t best = 0;
    for (int64_t j = 1; j < V; ++j)
      if (row[j] > row[best]) best = j;
    float second = -INFINITY;
    for (int64_t j = 0; j < V; ++j)
      if (j != best && row[j] > second) second = row[j];
    index[r] = int32_t(best);
    margin[r] = row[best] - second;
    top[r] = row[best];
  }
}

}  // namespace dflash::kernels::cpu
