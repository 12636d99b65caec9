// DFlash block-sparse attention on the CPU: the forward (an online softmax over the key tiles a
// query block can see) and the flash-attention-style backward (P recomputed per tile from lse).
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

namespace {

// Row loops run in fixed chunks of 8 lanes so that -O2 vectorises them; the summation order is
// fixed, so results are deterministic. The tile products go through gemm_f32 (Eigen).
inline float dot(const float* a, const float* b, int64_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int l = 0; l < 8; ++l) lane[l] += a[d + l] * b[d + l];
  float s = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
  for (; d < n; ++d) s += a[d] * b[d];
  return s;
}

inline void scale_row(float* y, float s, int64_t n) {
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int l = 0; l < 8; ++l) y[d + l] *= s;
  for (; d < n; ++d) y[d] *= s;
}

// The key tiles query block a of sequence b sees, as index ranges along k's dim 1: context tiles
// [t*key_tile, min((t+1)*key_tile, anchor)) for t < ceil(anchor/key_tile) (the last one
// partial), then the block's own bs draft keys as one tile. The anchor is clamped to [0, S].
struct VisibleTiles {
  int64_t anchor, context_tiles, key_tile, own_begin, bs;

  VisibleTiles(const AttentionDims& d, const int32_t* anchors, int64_t b, int64_t a)
      : key_tile(d.key_tile), own_begin(d.S + a * d.bs), bs(d.bs) {
    int64_t raw = anchors[b * d.N + a];
    anchor = raw < 0 ? 0 : (raw > d.S ? d.S : raw);
    context_tiles = (anchor + key_tile - 1) / key_tile;
  }
  int64_t count() const { return context_tiles + 1; }
  int64_t begin(int64_t t) const { return t < context_tiles ? t * key_tile : own_begin; }
  int64_t end(int64_t t) const {
    if (t == context_tiles) return own_begin + bs;
    int64_t e = (t + 1) * key_tile;
    return e < anchor ? e : anchor;
  }
};

}  // namespace

// Per (sequence, block, head), tile after tile: scores = scale Q K_tile^T (bs, n); the running
// max and sum of each query row move to the tile's max (rescaling the output row), scores become
// exp(s - max); then out += P V_tile. The output rows hold the unnormalised sum until the last
// tile. Dropped blocks (keep = 0) get output 0 and lse 0 and visit nothing.
void dflash_attention_forward(const float* q, const float* k, const float* v, const int32_t* anchors,
                              const int32_t* keep, const AttentionDims& d, float* out, float* lse, int32_t* tiles) {
  const int64_t T = d.N * d.bs, keys = d.S + T, group = d.nh / d.nkv, hd = d.hd;
  const int64_t q_stride = d.nh * hd;    // between consecutive query rows of one head
  const int64_t kv_stride = d.nkv * hd;  // between consecutive key rows of one kv head
  float scores[kAttentionMaxBlock * kAttentionMaxKeyTile];  // (bs, n): scores, then P of the tile
  float row_max[kAttentionMaxBlock], row_sum[kAttentionMaxBlock];
  int64_t visited = 0;

  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t a = 0; a < d.N; ++a) {
      const bool kept = keep[b * d.N + a] != 0;
      const VisibleTiles vis(d, anchors, b, a);
      if (kept) visited += vis.count();
      for (int64_t h = 0; h < d.nh; ++h) {
        const int64_t row0 = ((b * T + a * d.bs) * d.nh + h) * hd;
        const float* qb = q + row0;                      // (bs, hd), row stride q_stride
        float* ob = out + row0;                          // (bs, hd), row stride q_stride
        float* lb = lse + (b * d.nh + h) * T + a * d.bs;  // (bs)
        for (int64_t i = 0; i < d.bs; ++i) {
          float* o = ob + i * q_stride;
          for (int64_t c = 0; c < hd; ++c) o[c] = 0.0f;
          lb[i] = 0.0f;
          row_max[i] = -INFINITY;
          row_sum[i] = 0.0f;
        }
        if (!kept) continue;
        const int64_t kv0 = (b * keys * d.nkv + h / group) * hd;  // (keys, hd), row stride kv_stride

        for (int64_t t = 0; t < vis.count(); ++t) {
          const int64_t j0 = vis.begin(t), n = vis.end(t) - j0;
          const float* kt = k + kv0 + j0 * kv_stride;  // (n, hd)
          const float* vt = v + kv0 + j0 * kv_stride;  // (n, hd)
          gemm_f32(d.bs, n, hd, qb, q_stride, false, kt, kv_stride, true, scores, n, d.scale, 0.0f);
          for (int64_t i = 0; i < d.bs; ++i) {
            float* s = scores + i * n;
            float m = row_max[i];
            for (int64_t j = 0; j < n; ++j) m = s[j] > m ? s[j] : m;
            float sum = 0.0f;
            for (int64_t j = 0; j < n; ++j) {
              s[j] = std::exp(s[j] - m);
              sum += s[j];
            }
            const float correction = std::exp(row_max[i] - m);  // 0 before the first tile
            if (t > 0 && correction != 1.0f) scale_row(ob + i * q_stride, correction, hd);
            row_sum[i] = row_sum[i] * correction + sum;
            row_max[i] = m;
          }
          gemm_f32(d.bs, hd, n, scores, n, false, vt, kv_stride, false, ob, q_stride, 1.0f, 1.0f);
        }
        // Every kept block sees its own bs >= 1 draft keys, so row_sum > 0.
        for (int64_t i = 0; i < d.bs; ++i) {
          scale_row(ob + i * q_stride, 1.0f / row_sum[i], hd);
          lb[i] = row_max[i] + std::log(row_sum[i]);
        }
      }
    }
  tiles[0] = int32_t(visited);
}

// Per (sequence, block, head) of a kept block, tile after tile: P = exp(scale Q K_tile^T - lse),
// dP = dO V_tile^T, dS = scale P (dP - D) with D_i = dO_i . O_i; then dv_tile += P^T dO,
// dk_tile += dS^T Q, dq += dS K_tile. The loop order (b, a, h, tile) is fixed, so the GQA heads
// of one kv head add into it deterministically. Dropped blocks contribute nothing.
void dflash_attention_backward(const float* q, const float* k, const float* v, const int32_t* anchors,
                               const int32_t* keep, const float* out, const float* dout, const float* lse,
                               const AttentionDims& d, float* dq, float* dk, float* dv) {
  const int64_t T = d.N * d.bs, keys = d.S + T, group = d.nh / d.nkv, hd = d.hd;
  const int64_t q_stride = d.nh * hd, kv_stride = d.nkv * hd;
  float p[kAttentionMaxBlock * kAttentionMaxKeyTile];   // (bs, n): P of the tile
  float ds[kAttentionMaxBlock * kAttentionMaxKeyTile];  // (bs, n): dP, then dS
  float delta[kAttentionMaxBlock];                      // (bs): D_i = dO_i . O_i

  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t a = 0; a < d.N; ++a) {
      if (keep[b * d.N + a] == 0) continue;
      const VisibleTiles vis(d, anchors, b, a);
      for (int64_t h = 0; h < d.nh; ++h) {
        const int64_t row0 = ((b * T + a * d.bs) * d.nh + h) * hd;  // (bs, hd), row stride q_stride
        const float* qb = q + row0;
        const float* dob = dout + row0;
        const float* lb = lse + (b * d.nh + h) * T + a * d.bs;
        const int64_t kv0 = (b * keys * d.nkv + h / group) * hd;  // (keys, hd), row stride kv_stride
        for (int64_t i = 0; i < d.bs; ++i) delta[i] = dot(dob + i * q_stride, out + row0 + i * q_stride, hd);

        for (int64_t t = 0; t < vis.count(); ++t) {
          const int64_t j0 = vis.begin(t), n = vis.end(t) - j0, tile0 = kv0 + j0 * kv_stride;  // (n, hd)
          gemm_f32(d.bs, n, hd, qb, q_stride, false, k + tile0, kv_stride, true, p, n, d.scale, 0.0f);
          for (int64_t i = 0; i < d.bs; ++i)
            for (int64_t j = 0; j < n; ++j) p[i * n + j] = std::exp(p[i * n + j] - lb[i]);
          if (dv) gemm_f32(n, hd, d.bs, p, n, true, dob, q_stride, false, dv + tile0, kv_stride, 1.0f, 1.0f);
          if (!dq && !dk) continue;
          gemm_f32(d.bs, n, hd, dob, q_stride, false, v + tile0, kv_stride, true, ds, n, 1.0f, 0.0f);
          for (int64_t i = 0; i < d.bs; ++i)
            for (int64_t j = 0; j < n; ++j) ds[i * n + j] = d.scale * p[i * n + j] * (ds[i * n + j] - delta[i]);
          if (dk) gemm_f32(n, hd, d.bs, ds, n, true, qb, q_stride, false, dk + tile0, kv_stride, 1.0f, 1.0f);
          if (dq) gemm_f32(d.bs, hd, n, ds, n, false, k + tile0, kv_stride, false, dq + row0, q_stride, 1.0f, 1.0f);
        }
      }
    }
}

}  // namespace dflash::kernels::cpu
