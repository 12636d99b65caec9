// Causal (j <= i) softmax attention of the frozen target on the CPU, forward only: an online
// softmax over square tiles of queries and keys, visiting only the key tiles at or before the diagonal.
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

namespace {

// e^x for scores minus their row max (x <= 0) to about 1 ulp, in plain arithmetic that the 8-lane
// loops below vectorise (std::exp does not, and it would dominate the kernel): x = n ln2 + r with
// |r| <= ln2/2 (Cody-Waite), e^r by its degree-6 Taylor polynomial, 2^n built from exponent bits.
// Below -87 (e^x under FLT_MIN) it gives 0.
inline float exp_nonpositive(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it leaves round(x log2 e) in the low bits
  const float t = x * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;  // ln 2 = hi + lo
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const uint32_t bits = (std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRound) + 127u) << 23;
  return x < -87.0f ? 0.0f : p * std::bit_cast<float>(bits);
}

// Row loops run in fixed chunks of 8 lanes so that -O2 vectorises them; the order is fixed, so
// results are deterministic.
inline float max_of(const float* s, int64_t n, float init) {
  float lane[8] = {init, init, init, init, init, init, init, init};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) lane[l] = s[j + l] > lane[l] ? s[j + l] : lane[l];
  float m = init;
  for (int l = 0; l < 8; ++l) m = lane[l] > m ? lane[l] : m;
  for (; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

// s[j] = e^(s[j] - mx) for j < n; returns their sum.
inline float exp_and_sum(float* s, int64_t n, float mx) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) {
      s[j + l] = exp_nonpositive(s[j + l] - mx);
      lane[l] += s[j + l];
    }
  float sum = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
  for (; j < n; ++j) {
    s[j] = exp_nonpositive(s[j] - mx);
    sum += s[j];
  }
  return sum;
}

inline void scale_row(float* y, float s, int64_t n) {
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int l = 0; l < 8; ++l) y[d + l] *= s;
  for (; d < n; ++d) y[d] *= s;
}

}  // namespace

// Per (sequence, head, query tile), key tile after key tile up to the diagonal one:
// scores = scale Q K_tile^T (m, n); each query row's running max and sum move to the tile's max
// (rescaling its output row); scores become exp(s - max), 0 beyond the diagonal; out += P V_tile.
// The output rows hold the unnormalised sum until the last tile. Query tile t and key tile t
// start at the same position, so in the diagonal tile query row r sees keys 0..r of the tile and
// every row sees at least one key: row_sum > 0.
void causal_attention_forward(const float* q, const float* k, const float* v, const CausalAttentionDims& d,
                              float* out) {
  constexpr int64_t tile = kCausalAttentionTile;
  const int64_t group = d.nh / d.nkv, hd = d.hd;
  const int64_t q_stride = d.nh * hd;    // between consecutive query rows of one head
  const int64_t kv_stride = d.nkv * hd;  // between consecutive key rows of one kv head
  const int64_t tiles = (d.S + tile - 1) / tile;
  float scores[tile * tile];  // (m, n): scores, then P of the tile
  float row_max[tile], row_sum[tile];

  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.nh; ++h) {
      const int64_t kv0 = (b * d.S * d.nkv + h / group) * hd;  // (S, hd), row stride kv_stride
      for (int64_t qt = 0; qt < tiles; ++qt) {
        const int64_t i0 = qt * tile, m = (d.S - i0) < tile ? (d.S - i0) : tile;
        const int64_t row0 = ((b * d.S + i0) * d.nh + h) * hd;
        const float* qb = q + row0;  // (m, hd), row stride q_stride
        float* ob = out + row0;      // (m, hd), row stride q_stride
        for (int64_t i = 0; i < m; ++i) {
          row_max[i] = -INFINITY;
          row_sum[i] = 0.0f;
        }
        for (int64_t kt = 0; kt <= qt; ++kt) {
          const bool diagonal = kt == qt;
          const int64_t j0 = kt * tile, n = diagonal ? m : tile;
          const float* kb = k + kv0 + j0 * kv_stride;  // (n, hd)
          const float* vb = v + kv0 + j0 * kv_stride;  // (n, hd)
          gemm_f32(m, n, hd, qb, q_stride, false, kb, kv_stride, true, scores, n, d.scale, 0.0f);
          for (int64_t i = 0; i < m; ++i) {
            float* s = scores + i * n;
            const int64_t visible = diagonal ? i + 1 : n;
            const float mx = max_of(s, visible, row_max[i]);
            const float sum = exp_and_sum(s, visible, mx);
            for (int64_t j = visible; j < n; ++j) s[j] = 0.0f;
            const float correction = std::exp(row_max[i] - mx);  // 0 before the first tile
            if (kt > 0 && correction != 1.0f) scale_row(ob + i * q_stride, correction, hd);
            row_sum[i] = row_sum[i] * correction + sum;
            row_max[i] = mx;
          }
          // The first tile overwrites the output rows (beta 0); later tiles add to them.
          gemm_f32(m, hd, n, scores, n, false, vb, kv_stride, false, ob, q_stride, 1.0f, kt == 0 ? 0.0f : 1.0f);
        }
        for (int64_t i = 0; i < m; ++i) scale_row(ob + i * q_stride, 1.0f / row_sum[i], hd);
      }
    }
}

}  // namespace dflash::kernels::cpu
