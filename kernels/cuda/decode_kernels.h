// CUDA kernels of the inference (decode) path (kernels/cpu/decode_kernels.h is the reference):
// launchers over device pointers and sizes, each taking the stream (a cudaStream_t as void*).
// What varies between replays of a captured decode program (a cache length, a row count, a row
// index) is read through a device pointer by the kernel, so one capture serves every round.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dflash::kernels::cuda {

// cached_attention.cu: attention of n query rows over a KV cache, split over the keys
// (flash-decoding): each CTA takes one kv head, a slice of the keys, and a chunk of the query
// rows that use that head; a second kernel merges the slices. q, out [n, nh, hd]; k, v
// [C, nkv, hd]; one dtype (bf16 flag). Row i sees keys 0..min(pos0[0] + i, C - 1).
// hd % 8 == 0 and hd <= kCachedAttentionMaxHeadDim. Scratch: partial_o f32
// [splits, n, nh, hd] and partial_ml f32 [splits, n, nh, 2] with splits = cached_attention_splits(C).
inline constexpr int64_t kCachedAttentionMaxHeadDim = 256;
int cached_attention_splits(int64_t C);
struct CachedAttentionArgs {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  bool bf16;
  const int32_t* pos0;
  int64_t n, nh, nkv, hd, C;
  float scale;
  float* partial_o;
  float* partial_ml;
};
void cached_attention_forward(const CachedAttentionArgs& a, void* stream);

// decode.cu: as kernels/cpu/decode.cpp.
void copy_rows(void* dst, int64_t dst_rows, const int32_t* dst_at, const void* src, int64_t src_rows,
               const int32_t* src_at, int64_t n, const int32_t* count, size_t row_bytes, void* stream);
void arange_from(const int32_t* base, int64_t n, int32_t* out, void* stream);
// x [n, V] f32 or bf16; one CTA per row.
void argmax_rows(const void* x, bool bf16, int64_t n, int64_t V, int32_t* index, float* margin, float* top,
                 void* stream);

// spec_decode.cu: as kernels/cpu/spec_decode.cpp (one thread each; the state is i32 on the device).
void spec_prefill_commit(int32_t* state, const int32_t* last_argmax, const float* last_margin, const float* last_top,
                         int32_t* result, void* stream);
void spec_make_block(const int32_t* state, int32_t mask_token_id, int64_t bs, int32_t* block, void* stream);
void spec_fill_block(const int32_t* drafted, int64_t bs, int32_t* block, void* stream);
void spec_accept(int32_t* state, const int32_t* block, const int32_t* p, int64_t bs, int32_t rollback_bias,
                 int32_t* result, void* stream);
void spec_step_commit(int32_t* state, const int32_t* argmax, const float* margin, const float* top, int32_t* result,
                      void* stream);

// spec_sampling.cu: as kernels/cpu/spec_sampling.cpp (one CTA per row; the rejection step in one
// CTA). Sums are taken in another order than the CPU's, so a draw can differ where a running sum
// meets the threshold within rounding; the distributions are the same.
struct SamplingParams {
  float temperature, top_p;
  int64_t top_k;
};
void sampling_probs(const float* logits, int64_t n, int64_t V, const SamplingParams& s, float* probs, void* stream);
void spec_sample(const int32_t* state, int base, int plus, int64_t offset, const float* probs, int64_t n, int64_t V,
                 int purpose, int32_t* tokens, void* stream);
void spec_accept_sampled(int32_t* state, const int32_t* block, const float* p, const float* q, int64_t bs, int64_t V,
                         int32_t rollback_bias, bool accept_all, int32_t* result, void* stream);

}  // namespace dflash::kernels::cuda
