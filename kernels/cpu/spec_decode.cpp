// The control of greedy speculative decoding on the CPU (docs/MODEL.md, "Speculative decoding"):
// the small kernels that move the device-side state between a recorded program's passes.
#include <cstring>

#include "kernels/cpu/decode_kernels.h"

namespace dflash::kernels::cpu {

namespace {
int32_t float_bits(float f) {
  int32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
}  // namespace

void spec_prefill_commit(int32_t* state, const int32_t* last_argmax, const float* last_margin, const float* last_top,
                         int32_t* result) {
  namespace f = spec_state;
  state[f::target_len] += state[f::chunk_count];
  state[f::start] = state[f::target_len];
  state[f::ctx_at] = state[f::start];
  state[f::ctx_count] = 0;  // the chunk's context rows were appended inside the chunk's program
  state[f::token] = last_argmax[0];
  result[0] = last_argmax[0];
  result[1] = float_bits(last_margin[0]);
  result[2] = float_bits(last_top[0]);
}

void spec_make_block(const int32_t* state, int32_t mask_token_id, int64_t bs, int32_t* block) {
  block[0] = state[spec_state::token];
  for (int64_t k = 1; k < bs; ++k) block[k] = mask_token_id;
}

void spec_fill_block(const int32_t* drafted, int64_t bs, int32_t* block) {
  for (int64_t k = 1; k < bs; ++k) block[k] = drafted[k];
}

void spec_accept(int32_t* state, const int32_t* block, const int32_t* p, int64_t bs, int32_t rollback_bias,
                 int32_t* result) {
  namespace f = spec_state;
  int32_t a = 0;
  while (a < bs - 1 && block[a + 1] == p[a]) ++a;
  result[0] = a;
  result[1] = p[a];
  for (int64_t k = 0; k < bs; ++k) result[kSpecRoundHeader + k] = block[k];
  state[f::ctx_at] = state[f::start];
  state[f::ctx_count] = a + 1;
  state[f::start] += a + 1;
  state[f::target_len] = state[f::start] + rollback_bias;  // the rollback
  state[f::token] = p[a];
  state[f::accepted] = a;
}

void spec_step_commit(int32_t* state, const int32_t* argmax, const float* margin, const float* top, int32_t* result) {
  namespace f = spec_state;
  state[f::target_len] += 1;
  state[f::token] = argmax[0];
  result[0] = argmax[0];
  result[1] = float_bits(margin[0]);
  result[2] = float_bits(top[0]);
}

}  // namespace dflash::kernels::cpu
