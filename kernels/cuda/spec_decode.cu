// The control of greedy speculative decoding on the GPU (kernels/cpu/spec_decode.cpp is the
// reference, field for field): one thread each, over the device-side state, so that a captured
// round never waits for the host.
#include "kernels/cpu/decode_kernels.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_kernels.h"

namespace dflash::kernels::cuda {

namespace {
namespace f = kernels::cpu::spec_state;
constexpr int kHeader = kernels::cpu::kSpecRoundHeader;

__global__ void prefill_commit_kernel(int32_t* state, const int32_t* last_argmax, const float* last_margin,
                                      const float* last_top, int32_t* result) {
  state[f::target_len] += state[f::chunk_count];
  state[f::start] = state[f::target_len];
  state[f::ctx_at] = state[f::start];
  state[f::ctx_count] = 0;
  state[f::token] = last_argmax[0];
  result[0] = last_argmax[0];
  result[1] = __float_as_int(last_margin[0]);
  result[2] = __float_as_int(last_top[0]);
}

__global__ void make_block_kernel(const int32_t* state, int32_t mask_token_id, int64_t bs, int32_t* block) {
  for (int64_t k = threadIdx.x; k < bs; k += blockDim.x) block[k] = k == 0 ? state[f::token] : mask_token_id;
}

__global__ void fill_block_kernel(const int32_t* drafted, int64_t bs, int32_t* block) {
  for (int64_t k = 1 + threadIdx.x; k < bs; k += blockDim.x) block[k] = drafted[k];
}

__global__ void accept_kernel(int32_t* state, const int32_t* block, const int32_t* p, int64_t bs, int32_t rollback_bias,
                              int32_t* result) {
  int32_t a = 0;
  while (a < bs - 1 && block[a + 1] == p[a]) ++a;
  result[0] = a;
  result[1] = p[a];
  for (int64_t k = 0; k < bs; ++k) result[kHeader + k] = block[k];  // all bs slots: slot 0, then the drafts
  state[f::ctx_at] = state[f::start];
  state[f::ctx_count] = a + 1;
  state[f::start] += a + 1;
  state[f::target_len] = state[f::start] + rollback_bias;
  state[f::token] = p[a];
  state[f::accepted] = a;
}

__global__ void step_commit_kernel(int32_t* state, const int32_t* argmax, const float* margin, const float* top,
                                   int32_t* result) {
  state[f::target_len] += 1;
  state[f::token] = argmax[0];
  result[0] = argmax[0];
  result[1] = __float_as_int(margin[0]);
  result[2] = __float_as_int(top[0]);
}
}  // namespace

void spec_prefill_commit(int32_t* state, const int32_t* last_argmax, const float* last_margin, const float* last_top,
                         int32_t* result, void* stream) {
  prefill_commit_kernel<<<1, 1, 0, as_stream(stream)>>>(state, last_argmax, last_margin, last_top, result);
  check_launch("spec_prefill_commit");
}

void spec_make_block(const int32_t* state, int32_t mask_token_id, int64_t bs, int32_t* block, void* stream) {
  make_block_kernel<<<1, 128, 0, as_stream(stream)>>>(state, mask_token_id, bs, block);
  check_launch("spec_make_block");
}

void spec_fill_block(const int32_t* drafted, int64_t bs, int32_t* block, void* stream) {
  fill_block_kernel<<<1, 128, 0, as_stream(stream)>>>(drafted, bs, block);
  check_launch("spec_fill_block");
}

void spec_accept(int32_t* state, const int32_t* block, const int32_t* p, int64_t bs, int32_t rollback_bias,
                 int32_t* result, void* stream) {
  accept_kernel<<<1, 1, 0, as_stream(stream)>>>(state, block, p, bs, rollback_bias, result);
  check_launch("spec_accept");
}

void spec_step_commit(int32_t* state, const int32_t* argmax, const float* margin, const float* top, int32_t* result,
                      void* stream) {
  step_commit_kernel<<<1, 1, 0, as_stream(stream)>>>(state, argmax, margin, top, result);
  check_launch("spec_step_commit");
}

}  // namespace dflash::kernels::cuda
