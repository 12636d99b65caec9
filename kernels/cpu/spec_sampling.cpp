// Sampled speculative decoding on the CPU (kernels/cpu/decode_kernels.h, "spec_sampling"): the
// sampling distribution of a row, a draw by inverse CDF, and the rejection step of a round.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/decode_kernels.h"

namespace dflash::kernels::cpu {

namespace {
// A float's bits as an unsigned key whose order is the floats' order (for the threshold searches).
uint32_t order_key(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The largest key t such that at least k entries have order_key >= t: the k-th largest value's key.
uint32_t kth_largest_key(const float* x, int64_t V, int64_t k) {
  uint32_t lo = 0, hi = 0xffffffffu;  // invariant: count(>= lo) >= k
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2 + 1;
    int64_t count = 0;
    for (int64_t j = 0; j < V; ++j) count += order_key(x[j]) >= mid;
    if (count >= k) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// The smallest key t of a probability such that the mass strictly above it is below top_p; a
// token is kept when its own key is >= t.
uint32_t top_p_key(const float* p, int64_t V, float top_p) {
  uint32_t lo = order_key(0.0f), hi = order_key(1.0f);  // mass above 1 is 0 < top_p
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    float above = 0;
    for (int64_t j = 0; j < V; ++j)
      if (order_key(p[j]) > mid) above += p[j];
    if (above < top_p) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

}  // namespace

int32_t sampling_draw(const float* p, int64_t V, float u) {
  float total = 0;
  for (int64_t j = 0; j < V; ++j) total += p[j];
  const float target = u * total;
  float run = 0;
  int32_t last = 0;
  for (int64_t j = 0; j < V; ++j) {
    if (p[j] <= 0) continue;
    run += p[j];
    last = int32_t(j);
    if (run > target) return last;
  }
  return last;
}

void sampling_probs(const float* logits, int64_t n, int64_t V, const SamplingParams& s, float* probs) {
  for (int64_t r = 0; r < n; ++r) {
    const float* x = logits + r * V;
    float* p = probs + r * V;
    const bool cut = s.top_k > 0 && s.top_k < V;
    const uint32_t floor_key = cut ? kth_largest_key(x, V, s.top_k) : 0;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < V; ++j)
      if (order_key(x[j]) >= floor_key) mx = std::max(mx, x[j]);
    float sum = 0;
    for (int64_t j = 0; j < V; ++j) {
      p[j] = order_key(x[j]) >= floor_key ? std::exp((x[j] - mx) / s.temperature) : 0.0f;
      sum += p[j];
    }
    for (int64_t j = 0; j < V; ++j) p[j] /= sum;
    if (s.top_p < 1.0f) {
      const uint32_t keep = top_p_key(p, V, s.top_p);
      float kept = 0;
      for (int64_t j = 0; j < V; ++j) {
        if (order_key(p[j]) < keep) p[j] = 0;
        kept += p[j];
      }
      for (int64_t j = 0; j < V; ++j) p[j] /= kept;
    }
  }
}

void spec_sample(const int32_t* state, int base, int plus, int64_t offset, const float* probs, int64_t n, int64_t V,
                 int purpose, int32_t* tokens) {
  const int64_t pos0 = int64_t(state[base]) + int64_t(state[plus]) + offset;
  for (int64_t r = 0; r < n; ++r) tokens[r] = sampling_draw(probs + r * V, V, sampling_uniform(state, pos0 + r, purpose));
}

void spec_accept_sampled(int32_t* state, const int32_t* block, const float* p, const float* q, int64_t bs, int64_t V,
                         int32_t rollback_bias, bool accept_all, int32_t* result) {
  namespace f = spec_state;
  const int64_t start = state[f::start];
  const int64_t L = std::max<int64_t>(1, std::min<int64_t>(bs, int64_t(state[f::end]) - start));
  int32_t a = 0;
  while (a < L - 1) {
    const int32_t d = block[a + 1];
    const float u = sampling_uniform(state, start + a + 1, sample_accept);
    if (!accept_all && !(u * q[(a + 1) * V + d] < p[a * V + d])) break;
    ++a;
  }
  const float u = sampling_uniform(state, start + a + 1, sample_bonus);
  int32_t bonus;
  if (a == L - 1) {
    bonus = sampling_draw(p + a * V, V, u);
  } else {
    // The residual max(0, p[a] - q[a+1]), drawn without storing it: its sum, then a running sum.
    const float* pa = p + a * V;
    const float* qa = q + (a + 1) * V;
    float total = 0;
    for (int64_t j = 0; j < V; ++j) total += std::max(0.0f, pa[j] - qa[j]);
    if (total > 0) {
      const float target = u * total;
      float run = 0;
      bonus = 0;
      for (int64_t j = 0; j < V; ++j) {
        const float r = std::max(0.0f, pa[j] - qa[j]);
        if (r <= 0) continue;
        run += r;
        bonus = int32_t(j);
        if (run > target) break;
      }
    } else {
      bonus = sampling_draw(pa, V, u);
    }
  }
  result[0] = a;
  result[1] = bonus;
  for (int64_t k = 0; k < bs; ++k) result[kSpecRoundHeader + k] = block[k];
  state[f::ctx_at] = state[f::start];
  state[f::ctx_count] = a + 1;
  state[f::start] += a + 1;
  state[f::target_len] = state[f::start] + rollback_bias;
  state[f::token] = bonus;
  state[f::accepted] = a;
}

}  // namespace dflash::kernels::cpu
