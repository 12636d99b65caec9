// CPU kernels of the inference (decode) path: plain functions over pointers and sizes, no
// allocation. What varies per call of a recorded decode program (a cache length, a row count,
// a row index) is read through a pointer to an i32 at call time, never baked into the call.
// Every per-row result is computed by the same instruction sequence whatever the row count, so
// a pass over n rows equals n one-row passes bit for bit (the lossless check relies on it).
#pragma once
#include <cstddef>
#include <cstdint>

namespace dflash::kernels::cpu {

// a . b summed in eight fixed lanes, then the lanes in a fixed tree, then the tail in order: the
// dot product of every row-independent decode kernel.
inline float dot8(const float* a, const float* b, int64_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int l = 0; l < 8; ++l) lane[l] += a[k + l] * b[k + l];
  float s = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
  for (; k < n; ++k) s += a[k] * b[k];
  return s;
}

// decode.cpp
// y[i, j] = dot(x[i, :], w[j, :]) for x [M, K], w [N, K], y [M, N]: each dot product is summed in
// eight fixed lanes, so y's row i depends on x's row i only (not on M).
void linear_rows_f32(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N);

// Attention of n query rows over a KV cache. q, out [n, nh, hd]; k, v [C, nkv, hd]. Row i has
// position p = pos0[0] + i and sees keys 0..min(p, C-1); GQA: query head h uses kv head
// h / (nh/nkv). Each (row, head) is one independent online softmax over keys in order.
struct CachedAttentionDims {
  int64_t n, nh, nkv, hd, C;
  float scale;
};
inline constexpr int64_t kCachedAttentionMaxHeadDim = 256;
void cached_attention_forward(const float* q, const float* k, const float* v, const int32_t* pos0,
                              const CachedAttentionDims& d, float* out);

// One (row, head) of cached attention, and of slot attention (generate_kernels.h): o [hd] =
// softmax(scale * K qr) V over keys 0..last (last >= 0, hd <= kCachedAttentionMaxHeadDim), one
// online softmax over the keys in order; key j's k row is kh + j * kv_stride, its v row
// vh + j * kv_stride. The instruction sequence depends on last and hd only.
void cached_attention_row(const float* qr, const float* kh, const float* vh, int64_t last, int64_t kv_stride,
                          int64_t hd, float scale, float* o);

// dst row (dst_at[0] + r) = src row (src_at[0] + r) for r < min(n, count[0]); a null offset is 0,
// a null count is n. Rows that fall outside [0, dst_rows) or [0, src_rows) are skipped.
void copy_rows(void* dst, int64_t dst_rows, const int32_t* dst_at, const void* src, int64_t src_rows,
               const int32_t* src_at, int64_t n, const int32_t* count, size_t row_bytes);

// out[i] = base[0] + i for i < n.
void arange_from(const int32_t* base, int64_t n, int32_t* out);

// Per row of x [n, V]: index[r] = the first maximum, top[r] = its value; margin[r] = the maximum
// minus the largest other entry (0 when the maximum is repeated; +inf when V = 1).
void argmax_rows(const float* x, int64_t n, int64_t V, int32_t* index, float* margin, float* top);

// spec_decode.cpp: the control of greedy speculative decoding (docs/MODEL.md, "Speculative
// decoding"), over a device-side state of kSpecStateFields i32 (fields below). All sizes are fixed per program.
namespace spec_state {
enum : int {
  start = 0,        // the next block's first position (the drafter's anchor)
  target_len = 1,   // positions the target's KV cache holds (a pass writes from here)
  ctx_at = 2,       // where the pending context rows go in the drafter's cache
  ctx_count = 3,    // how many pending context rows (0..bs)
  token = 4,        // out[start]: the block's slot 0, or the target-alone step's input
  zero = 5,         // always 0
  chunk_count = 6,  // the staged prefill chunk's real rows
  chunk_last = 7,   // chunk_count - 1
  accepted = 8,     // the last round's a
  key_lo = 9,       // sampling: the prompt's random stream (64 bits, low word first)
  key_hi = 10,
  end = 11,         // n + max_new: a block is shortened to end - start slots when fewer are left
};
}
inline constexpr int kSpecStateFields = 16;
// Round result: [0] = a, [1] = the bonus token p[a], [2 .. 2+bs) = the block (slot 0, then drafts).
inline constexpr int kSpecRoundHeader = 2;

// After a prefill chunk: the chunk's rows are in the target's cache and (by then) in the drafter's
// context; token = argmax of the chunk's last row. result = kSpecTokenResult i32: {token, then the
// f32 bits of its top-2 margin and of its logit}.
inline constexpr int kSpecTokenResult = 3;
void spec_prefill_commit(int32_t* state, const int32_t* last_argmax, const float* last_margin, const float* last_top,
                         int32_t* result);
// block = [state.token, mask, ..., mask] (bs slots).
void spec_make_block(const int32_t* state, int32_t mask_token_id, int64_t bs, int32_t* block);
// block[k] = drafted[k] for k = 1..bs-1 (drafted is the argmax of every slot; slot 0's is unused).
void spec_fill_block(const int32_t* drafted, int64_t bs, int32_t* block);
// The verify pass's argmax p [bs] against the block: a = the leading drafts that equal the
// target's choice; commit, roll back the target's cache to start + a + 1 (+ rollback_bias, a test
// hook that must stay 0), and queue the accepted positions' features as drafter context.
void spec_accept(int32_t* state, const int32_t* block, const int32_t* p, int64_t bs, int32_t rollback_bias,
                 int32_t* result);
// After a target-alone step: token = its argmax, one more cached position; result as
// spec_prefill_commit's.
void spec_step_commit(int32_t* state, const int32_t* argmax, const float* margin, const float* top, int32_t* result);

// spec_sampling.cpp: sampled speculative decoding (z-lab's dflash_generate with temperature > 0).
// Random numbers are a function of (the prompt's key, a position, a purpose), so a recorded
// program draws new ones at every replay without any state but the decode state.
#if defined(__CUDACC__)
#define DFLASH_HOST_DEVICE __host__ __device__
#else
#define DFLASH_HOST_DEVICE
#endif
enum SamplePurpose : int { sample_token = 0, sample_draft = 1, sample_accept = 2, sample_bonus = 3 };
DFLASH_HOST_DEVICE inline uint64_t sampling_mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}
// A uniform number in [0, 1) with 24 random bits (exact in f32), the same on every device: a
// function of the stream's key, a position and a purpose only.
DFLASH_HOST_DEVICE inline float sampling_uniform_at(uint64_t key, int64_t position, int purpose) {
  const uint64_t h = sampling_mix(key ^ sampling_mix(uint64_t(position) * 4u + uint64_t(purpose)));
  return float(h >> 40) * (1.0f / 16777216.0f);
}
// The same with the key of a speculative-decoding state.
DFLASH_HOST_DEVICE inline float sampling_uniform(const int32_t* state, int64_t position, int purpose) {
  const uint64_t key = (uint64_t(uint32_t(state[spec_state::key_hi])) << 32) | uint32_t(state[spec_state::key_lo]);
  return sampling_uniform_at(key, position, purpose);
}

struct SamplingParams {
  float temperature = 1;  // > 0
  float top_p = 1;        // (0, 1]
  int64_t top_k = 0;      // 0 (or >= V): no cut
};
// Per row of logits [n, V]: the probabilities z-lab's _sampling_probs gives: softmax of logits /
// temperature over the top_k largest (values tied at the cut are all kept), then the smallest
// set of largest probabilities whose mass reaches top_p (a token is kept when the probabilities
// strictly above it sum to less than top_p; ties kept together), renormalised. Zero elsewhere.
void sampling_probs(const float* logits, int64_t n, int64_t V, const SamplingParams& s, float* probs);
// The token drawn from one row p [V] of probabilities with uniform u: the first j whose running
// sum exceeds u * (the row's sum); the last nonzero entry when rounding leaves none.
int32_t sampling_draw(const float* p, int64_t V, float u);
// tokens[r] = the token drawn from probs row r (inverse CDF over the row's own sum) with the
// uniform number of position state[base] + state[plus] + offset + r and `purpose`.
void spec_sample(const int32_t* state, int base, int plus, int64_t offset, const float* probs, int64_t n, int64_t V,
                 int purpose, int32_t* tokens);
// Speculative rejection sampling after the verify pass (p: the target's probabilities [bs, V],
// q: the drafter's [bs, V], row k for slot k). L = min(bs, end - start); draft k = 1..L-1 is
// accepted while u * q[k][d] < p[k-1][d]; the bonus is drawn from max(0, p[a] - q[a+1])
// renormalised (p[a] when that is all zero) after a rejection, from p[a] when every draft was
// accepted. accept_all (a test hook, false in real use) accepts every draft without the test.
// Then as spec_accept: result {a, bonus, block...}, rollback, pending context.
void spec_accept_sampled(int32_t* state, const int32_t* block, const float* p, const float* q, int64_t bs, int64_t V,
                         int32_t rollback_bias, bool accept_all, int32_t* result);

}  // namespace dflash::kernels::cpu
