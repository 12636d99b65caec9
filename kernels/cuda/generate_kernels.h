// CUDA kernels of batched decoding over fixed slots (kernels/cpu/generate_kernels.h is the
// reference): launchers over device pointers and sizes, each taking the stream (a cudaStream_t as
// void*). Every slot, position and row index is read on the device, so one capture of the decode
// step or a prefill chunk serves every mix of slots and lengths.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dflash::kernels::cuda {

// slot_attention.cu: attention of n query rows, row i over slot slot[i]'s keys 0..min(pos[i], C-1)
// (pos[i] < 0: a padding row, output 0), split over the keys as in flash-decoding: one CTA per
// (row, kv head, key slice) scores the row's query heads of that kv head against one shared tile
// of keys at a time, so each slot's keys and values are read once per step, and a second kernel
// merges the slices. q, out [n, nh, hd]; k, v [S, C, nkv, hd]; one dtype (bf16 flag). hd % 8 == 0,
// hd <= kSlotAttentionMaxHeadDim, nh / nkv <= kSlotAttentionMaxGroup. Scratch: partial_o f32
// [splits, n, nh, hd] and partial_ml f32 [splits, n, nh, 2], splits = slot_attention_slices(n, nkv, C).
inline constexpr int64_t kSlotAttentionMaxHeadDim = 256;
inline constexpr int64_t kSlotAttentionMaxGroup = 16;
int slot_attention_slices(int64_t n, int64_t nkv, int64_t C);
struct SlotAttentionArgs {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  bool bf16;
  const int32_t* slot;
  const int32_t* pos;
  int64_t n, nh, nkv, hd, S, C;
  float scale;
  float* partial_o;
  float* partial_ml;
};
void slot_attention_forward(const SlotAttentionArgs& a, void* stream);

// generate.cu: as kernels/cpu/slot_attention.cpp and kernels/cpu/generate.cpp.
void scatter_slot_rows(void* cache, int64_t S, int64_t C, const void* src, int64_t n, const int32_t* slot,
                       const int32_t* pos, size_t row_bytes, void* stream);
void gather_rows(const void* src, int64_t n, const int32_t* index, int64_t m, void* out, size_t row_bytes,
                 void* stream);
void generate_step_rows(const int32_t* state, int64_t S, int32_t* ids, int32_t* pos, void* stream);
void generate_entries(const int32_t* rows, int64_t m, const int32_t* slot, const int32_t* pos, int64_t P,
                      int32_t* entry_slot, int32_t* entry_pos, void* stream);
void generate_commit(int32_t* state, int64_t S, const int32_t* entry_slot, const int32_t* entry_pos,
                     const int32_t* chosen, int64_t m, int32_t* result, void* stream);
// spec_sampling.cu (it shares the CTA draw): one CTA per entry.
void generate_sample(const int32_t* state, int64_t S, const float* probs, int64_t m, int64_t V,
                     const int32_t* entry_slot, const int32_t* entry_pos, int32_t* tokens, void* stream);

}  // namespace dflash::kernels::cuda
