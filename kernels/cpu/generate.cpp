// CPU kernels of continuous batching over fixed slots (kernels/cpu/generate_kernels.h): the decode
// step's rows from the slot state, a prefill chunk's entries, the keyed draw and the commit.
#include "kernels/cpu/decode_kernels.h"
#include "kernels/cpu/generate_kernels.h"

namespace dflash::kernels::cpu {

namespace f = generate_slot;

void generate_step_rows(const int32_t* state, int64_t S, int32_t* ids, int32_t* pos) {
  for (int64_t b = 0; b < S; ++b) {
    const int32_t* slot = state + b * kGenerateSlotFields;
    const bool on = slot[f::active] != 0;
    ids[b] = on ? slot[f::token] : 0;
    pos[b] = on ? slot[f::length] : -1;
  }
}

void generate_entries(const int32_t* rows, int64_t m, const int32_t* slot, const int32_t* pos, int64_t P,
                      int32_t* entry_slot, int32_t* entry_pos) {
  for (int64_t e = 0; e < m; ++e) {
    const int64_t r = rows[e];
    const bool on = r >= 0 && r < P && pos[r] >= 0;
    entry_slot[e] = on ? slot[r] : -1;
    entry_pos[e] = on ? pos[r] : -1;
  }
}

void generate_sample(const int32_t* state, int64_t S, const float* probs, int64_t m, int64_t V,
                     const int32_t* entry_slot, const int32_t* entry_pos, int32_t* tokens) {
  for (int64_t e = 0; e < m; ++e) {
    const int64_t s = entry_slot[e];
    if (s < 0 || s >= S || entry_pos[e] < 0) {
      tokens[e] = -1;
      continue;
    }
    const int32_t* slot = state + s * kGenerateSlotFields;
    const uint64_t key = (uint64_t(uint32_t(slot[f::key_hi])) << 32) | uint32_t(slot[f::key_lo]);
    tokens[e] = sampling_draw(probs + e * V, V, sampling_uniform_at(key, int64_t(entry_pos[e]) + 1, sample_token));
  }
}

void generate_commit(int32_t* state, int64_t S, const int32_t* entry_slot, const int32_t* entry_pos,
                     const int32_t* chosen, int64_t m, int32_t* result) {
  for (int64_t e = 0; e < m; ++e) {
    const int64_t s = entry_slot[e];
    if (s < 0 || s >= S || entry_pos[e] < 0) {
      result[e] = -1;
      continue;
    }
    int32_t* slot = state + s * kGenerateSlotFields;
    slot[f::token] = chosen[e];
    slot[f::length] = entry_pos[e] + 1;
    slot[f::active] = 1;
    result[e] = chosen[e];
  }
}

}  // namespace dflash::kernels::cpu
