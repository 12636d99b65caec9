// CPU kernels of batched decoding over fixed slots (`dflash-train generate`): the slot KV cache
// (each of S slots owns C cache rows per layer) and the control of continuous batching over a
// device-side slot state. Plain functions over pointers and sizes, no allocation. Every per-row
// result is computed by the same instruction sequence whatever the row count, the slot or the
// other rows, so a request's tokens do not depend on the batch, its slot or its neighbours.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dflash::kernels::cpu {

// slot_attention.cpp: attention of n query rows, each in its own slot and at its own position.
// q, out [n, nh, hd]; k, v [S, C, nkv, hd]. Row i reads slot slot[i] and sees its keys
// 0..min(pos[i], C-1); a row with pos[i] < 0 or a slot outside [0, S) is padding: its output is 0.
// GQA: query head h uses kv head h / (nh/nkv). Each (row, head) is one online softmax over its
// keys in tiles of 64, in order (the order of kernels/cpu/decode.cpp's cached_attention_forward).
struct SlotAttentionDims {
  int64_t n, nh, nkv, hd, S, C;
  float scale;
};
void slot_attention_forward(const float* q, const float* k, const float* v, const int32_t* slot, const int32_t* pos,
                            const SlotAttentionDims& d, float* out);

// cache row (slot[i], pos[i]) = src row i, for every row i whose slot lies in [0, S) and whose pos
// lies in [0, C); other rows (padding) are skipped. cache [S, C, row_bytes], src [n, row_bytes].
void scatter_slot_rows(void* cache, int64_t S, int64_t C, const void* src, int64_t n, const int32_t* slot,
                       const int32_t* pos, size_t row_bytes);

// out row e = src row index[e] for index[e] in [0, n); 0 elsewhere. src [n, row_bytes], out [m, row_bytes].
void gather_rows(const void* src, int64_t n, const int32_t* index, int64_t m, void* out, size_t row_bytes);

// generate.cpp: the slot state, i32 [S, kGenerateSlotFields], one row per slot.
namespace generate_slot {
enum : int {
  length = 0,  // positions the slot's cache holds: the position of its next input token
  token = 1,   // the slot's last token: the next step's input
  active = 2,  // 1 while the slot decodes; 0 when free or still being prefilled
  key_lo = 3,  // the request's random stream (64 bits, low word first), for sampling
  key_hi = 4,
};
}
inline constexpr int kGenerateSlotFields = 8;

// The decode step's rows: ids[b] = token and pos[b] = length for an active slot b; ids[b] = 0 and
// pos[b] = -1 (padding) for the others.
void generate_step_rows(const int32_t* state, int64_t S, int32_t* ids, int32_t* pos);
// A prefill chunk's entries (the rows that end a prompt): entry e reads chunk row rows[e];
// entry_slot[e] = slot[rows[e]] and entry_pos[e] = pos[rows[e]], or -1 and -1 when rows[e] is
// outside [0, P) or that row is padding.
void generate_entries(const int32_t* rows, int64_t m, const int32_t* slot, const int32_t* pos, int64_t P,
                      int32_t* entry_slot, int32_t* entry_pos);
// tokens[e] = the token drawn from probs row e (decode_kernels.h's sampling_draw) with the uniform
// number of the slot's key at position entry_pos[e] + 1 (the position of the token drawn), purpose
// sample_token: the stream of SpecDecoder's prefill and target-alone steps. -1 for an entry whose
// slot is -1.
void generate_sample(const int32_t* state, int64_t S, const float* probs, int64_t m, int64_t V,
                     const int32_t* entry_slot, const int32_t* entry_pos, int32_t* tokens);
// For every entry e with a slot s in [0, S) and pos p >= 0: slot s's token = chosen[e], length =
// p + 1, active = 1, and result[e] = chosen[e]; result[e] = -1 for the others.
void generate_commit(int32_t* state, int64_t S, const int32_t* entry_slot, const int32_t* entry_pos,
                     const int32_t* chosen, int64_t m, int32_t* result);

}  // namespace dflash::kernels::cpu
