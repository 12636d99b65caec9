// Sampled speculative decoding on the GPU (kernels/cpu/spec_sampling.cpp is the reference): one
// CTA of kThreads per row for the sampling distribution and the draws (batched decoding's keyed
// draws too), one CTA for the rejection step. The threshold searches bisect the floats' order
// keys, as on the CPU.
#include <cfloat>

#include "kernels/cpu/decode_kernels.h"
#include "kernels/cpu/generate_kernels.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_kernels.h"
#include "kernels/cuda/generate_kernels.h"

namespace dflash::kernels::cuda {

namespace {
namespace f = kernels::cpu::spec_state;
constexpr int kThreads = 256;
constexpr int kHeader = kernels::cpu::kSpecRoundHeader;

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Block-wide sum (every thread gets it); `scratch` holds kThreads / 32 floats.
__device__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];
  return total;
}

__device__ float block_max(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = -FLT_MAX;
  for (int w = 0; w < kThreads / 32; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

// The weight of entry j for a draw: p[j], or max(0, p[j] - q[j]) when q is given (the residual).
__device__ __forceinline__ float weight(const float* p, const float* q, int64_t j) {
  return q ? fmaxf(0.0f, p[j] - q[j]) : p[j];
}

// The first j (in order) whose running sum of weights exceeds u * total; the last positive
// weight when rounding leaves none. Each thread takes a contiguous chunk; the chunk sums are
// scanned in thread order. Every thread returns the same token.
__device__ int32_t block_draw(const float* p, const float* q, int64_t V, float u, float* scratch, int32_t* token) {
  const int64_t chunk = (V + kThreads - 1) / kThreads;
  const int64_t j0 = min64(V, threadIdx.x * chunk), j1 = min64(V, j0 + chunk);
  float mine = 0;
  int32_t my_last = -1;
  for (int64_t j = j0; j < j1; ++j) {
    const float w = weight(p, q, j);
    mine += w;
    if (w > 0) my_last = int32_t(j);
  }
  __shared__ float sums[kThreads];
  __shared__ int32_t lasts[kThreads];
  sums[threadIdx.x] = mine;
  lasts[threadIdx.x] = my_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0;
    for (int t = 0; t < kThreads; ++t) total += sums[t];
    const float target = u * total;
    float run = 0;
    int32_t found = -1, last = 0;
    int t = 0;
    for (; t < kThreads; ++t) {
      if (lasts[t] >= 0) last = lasts[t];
      if (run + sums[t] > target && sums[t] > 0) break;
      run += sums[t];
    }
    if (t < kThreads) {
      const int64_t c0 = int64_t(t) * chunk, c1 = min64(V, c0 + chunk);
      for (int64_t j = c0; j < c1 && found < 0; ++j) {
        const float w = weight(p, q, j);
        if (w <= 0) continue;
        run += w;
        last = int32_t(j);
        if (run > target) found = last;
      }
    }
    *token = found >= 0 ? found : last;
  }
  __syncthreads();
  (void)scratch;
  return *token;
}

__global__ void sampling_probs_kernel(const float* logits, int64_t V, float temperature, float top_p, int64_t top_k,
                                      float* probs) {
  __shared__ float scratch[kThreads / 32];
  const float* x = logits + int64_t(blockIdx.x) * V;
  float* p = probs + int64_t(blockIdx.x) * V;
  uint32_t floor_key = 0;
  if (top_k > 0 && top_k < V) {  // the k-th largest value's key, by bisection (count(>= lo) >= k)
    uint32_t lo = 0, hi = 0xffffffffu;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2 + 1;
      float count = 0;
      for (int64_t j = threadIdx.x; j < V; j += kThreads) count += order_key(x[j]) >= mid ? 1.0f : 0.0f;
      if (block_sum(count, scratch) >= float(top_k)) lo = mid;
      else hi = mid - 1;
    }
    floor_key = lo;
  }
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < V; j += kThreads)
    if (order_key(x[j]) >= floor_key) mx = fmaxf(mx, x[j]);
  mx = block_max(mx, scratch);
  float sum = 0;
  for (int64_t j = threadIdx.x; j < V; j += kThreads) {
    const float e = order_key(x[j]) >= floor_key ? expf((x[j] - mx) / temperature) : 0.0f;
    p[j] = e;
    sum += e;
  }
  sum = block_sum(sum, scratch);
  for (int64_t j = threadIdx.x; j < V; j += kThreads) p[j] /= sum;
  if (top_p < 1.0f) {
    __syncthreads();
    uint32_t lo = order_key(0.0f), hi = order_key(1.0f);
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2;
      float above = 0;
      for (int64_t j = threadIdx.x; j < V; j += kThreads)
        if (order_key(p[j]) > mid) above += p[j];
      if (block_sum(above, scratch) < top_p) hi = mid;
      else lo = mid + 1;
    }
    float kept = 0;
    for (int64_t j = threadIdx.x; j < V; j += kThreads) {
      if (order_key(p[j]) < lo) p[j] = 0;
      kept += p[j];
    }
    kept = block_sum(kept, scratch);
    for (int64_t j = threadIdx.x; j < V; j += kThreads) p[j] /= kept;
  }
}

__global__ void sample_kernel(const int32_t* state, int base, int plus, int64_t offset, const float* probs, int64_t V,
                              int purpose, int32_t* tokens) {
  __shared__ float scratch[kThreads / 32];
  __shared__ int32_t token;
  const int64_t pos = int64_t(state[base]) + int64_t(state[plus]) + offset + blockIdx.x;
  const float u = kernels::cpu::sampling_uniform(state, pos, purpose);
  const int32_t t = block_draw(probs + int64_t(blockIdx.x) * V, nullptr, V, u, scratch, &token);
  if (threadIdx.x == 0) tokens[blockIdx.x] = t;
}

// Batched decoding (kernels/cpu/generate.cpp's generate_sample): entry e draws with its slot's key
// at position entry_pos + 1; an entry without a slot gives -1.
__global__ void generate_sample_kernel(const int32_t* state, int64_t S, const float* probs, int64_t V,
                                       const int32_t* entry_slot, const int32_t* entry_pos, int32_t* tokens) {
  __shared__ float scratch[kThreads / 32];
  __shared__ int32_t token;
  const int64_t e = blockIdx.x, s = entry_slot[e];
  if (s < 0 || s >= S || entry_pos[e] < 0) {  // uniform over the CTA: it returns whole
    if (threadIdx.x == 0) tokens[e] = -1;
    return;
  }
  namespace g = kernels::cpu::generate_slot;
  const int32_t* slot = state + s * kernels::cpu::kGenerateSlotFields;
  const uint64_t key = (uint64_t(uint32_t(slot[g::key_hi])) << 32) | uint32_t(slot[g::key_lo]);
  const float u = kernels::cpu::sampling_uniform_at(key, int64_t(entry_pos[e]) + 1, kernels::cpu::sample_token);
  const int32_t t = block_draw(probs + e * V, nullptr, V, u, scratch, &token);
  if (threadIdx.x == 0) tokens[e] = t;
}

__global__ void accept_sampled_kernel(int32_t* state, const int32_t* block, const float* p, const float* q, int64_t bs,
                                      int64_t V, int32_t rollback_bias, bool accept_all, int32_t* result) {
  __shared__ float scratch[kThreads / 32];
  __shared__ int32_t token;
  __shared__ int32_t accepted;
  const int64_t start = state[f::start];
  if (threadIdx.x == 0) {
    const int64_t L = max64(1, min64(bs, int64_t(state[f::end]) - start));
    int32_t a = 0;
    while (a < L - 1) {
      const int32_t d = block[a + 1];
      const float u = kernels::cpu::sampling_uniform(state, start + a + 1, kernels::cpu::sample_accept);
      const float target_p = p[a * V + d], draft_q = q[(a + 1) * V + d];
      if (!accept_all && !(u * draft_q < target_p)) break;
      ++a;
    }
    // All L - 1 accepted: the bonus is drawn from p[a]; otherwise from the residual.
    accepted = a == L - 1 ? -(a + 1) : a;
  }
  __syncthreads();
  const bool all = accepted < 0;
  const int32_t a = all ? -accepted - 1 : accepted;
  const float u = kernels::cpu::sampling_uniform(state, start + a + 1, kernels::cpu::sample_bonus);
  const float* pa = p + int64_t(a) * V;
  int32_t bonus;
  if (all) {
    bonus = block_draw(pa, nullptr, V, u, scratch, &token);
  } else {
    const float* qa = q + int64_t(a + 1) * V;
    float total = 0;
    for (int64_t j = threadIdx.x; j < V; j += kThreads) total += fmaxf(0.0f, pa[j] - qa[j]);
    total = block_sum(total, scratch);
    bonus = block_draw(pa, total > 0 ? qa : nullptr, V, u, scratch, &token);
  }
  if (threadIdx.x == 0) {
    result[0] = a;
    result[1] = bonus;
    for (int64_t k = 0; k < bs; ++k) result[kHeader + k] = block[k];
    state[f::ctx_at] = state[f::start];
    state[f::ctx_count] = a + 1;
    state[f::start] += a + 1;
    state[f::target_len] = state[f::start] + rollback_bias;
    state[f::token] = bonus;
    state[f::accepted] = a;
  }
}
}  // namespace

void sampling_probs(const float* logits, int64_t n, int64_t V, const SamplingParams& s, float* probs, void* stream) {
  if (n == 0) return;
  sampling_probs_kernel<<<unsigned(n), kThreads, 0, as_stream(stream)>>>(logits, V, s.temperature, s.top_p, s.top_k,
                                                                          probs);
  check_launch("sampling_probs");
}

void spec_sample(const int32_t* state, int base, int plus, int64_t offset, const float* probs, int64_t n, int64_t V,
                 int purpose, int32_t* tokens, void* stream) {
  if (n == 0) return;
  sample_kernel<<<unsigned(n), kThreads, 0, as_stream(stream)>>>(state, base, plus, offset, probs, V, purpose, tokens);
  check_launch("spec_sample");
}

void generate_sample(const int32_t* state, int64_t S, const float* probs, int64_t m, int64_t V,
                     const int32_t* entry_slot, const int32_t* entry_pos, int32_t* tokens, void* stream) {
  if (m == 0) return;
  generate_sample_kernel<<<unsigned(m), kThreads, 0, as_stream(stream)>>>(state, S, probs, V, entry_slot, entry_pos,
                                                                           tokens);
  check_launch("generate_sample");
}

void spec_accept_sampled(int32_t* state, const int32_t* block, const float* p, const float* q, int64_t bs, int64_t V,
                         int32_t rollback_bias, bool accept_all, int32_t* result, void* stream) {
  accept_sampled_kernel<<<1, kThreads, 0, as_stream(stream)>>>(state, block, p, q, bs, V, rollback_bias, accept_all,
                                                               result);
  check_launch("spec_accept_sampled");
}

}  // namespace dflash::kernels::cuda
