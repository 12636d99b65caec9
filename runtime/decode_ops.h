// Ops of the inference (decode) path, forward only (inputs that need grad are refused: run them
// under NoGrad). What varies between replays of a recorded decode program (a cache length, a
// row index, a row count) is an i32 [1] tensor on the device, read by the kernel when it runs.
#pragma once
#include <cstdint>

#include "runtime/tensor.h"

namespace dflash::ops {

// x [..., K] times w [N, K]^T -> [..., N] in dtype `out` (the two-argument form: x's dtype).
// CPU (f32): each output row depends on its input row only, bit for bit whatever the row count,
// so a pass over n rows equals n one-row passes. CUDA: cuBLAS with f32 accumulation, C in `out`
// (f32 or bf16); rows are not independent there.
Tensor linear_rowwise(const Tensor& x, const Tensor& w, DType out);
Tensor linear_rowwise(const Tensor& x, const Tensor& w);

// Attention of n query rows over a KV cache: q [n, nh, hd]; k_cache, v_cache [C, nkv, hd];
// pos0 i32 [1]. Row i has position pos0 + i and sees cache rows 0..min(pos0 + i, C - 1) (its own
// row must be written into the cache before the call). GQA: query head h uses kv head
// h / (nh/nkv). CPU f32; CUDA f32 or bf16 (one dtype), hd a multiple of 8 up to 256.
Tensor cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& pos0,
                        float scale);

// The slot KV cache of batched decoding (runtime/ops/slot_cache.cpp; kernels/cpu/generate_kernels.h
// says what each computes): every query row carries its slot and position, i32 [n] on the device,
// -1 marking a padding row. q [n, nh, hd]; k_cache, v_cache [S, C, nkv, hd]; row i sees keys
// 0..min(pos[i], C-1) of slot slot[i] (its own key written there first); a padding row gives 0.
// CPU f32; CUDA f32 or bf16 (one dtype), hd a multiple of 8 up to 256.
Tensor slot_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& slot,
                      const Tensor& pos, float scale);
// cache [S, C, ...] row (slot[i], pos[i]) = src [n, ...] row i; padding rows and rows outside the
// cache are skipped.
void scatter_slot_rows_(const Tensor& cache, const Tensor& src, const Tensor& slot, const Tensor& pos);
// The decode step's q, k and v from their packed product qkv [n, (nh + 2 nkv) hd] (q's columns, then
// k's, then v's): each q and k head rmsnorm'd with q_weight or k_weight [hd] and rotated at
// positions[i] (ops::rmsnorm_rope's bits), k and v written into k_cache and v_cache [S, C, nkv, hd]
// at (slot[i], positions[i]) by scatter_slot_rows_'s rule; returns q [n, nh, hd]. The bits of
// split_columns, rmsnorm_rope and two scatter_slot_rows_, which it runs on the CPU and wherever
// the fused CUDA kernel does not cover the head dim.
Tensor rmsnorm_rope_into_slots(const Tensor& qkv, const Tensor& q_weight, const Tensor& k_weight, const Tensor& positions,
                               const Tensor& inv_freq, const Tensor& slot, const Tensor& k_cache, const Tensor& v_cache,
                               float eps);
// out [m, ...] row e = src [n, ...] row index[e] (index i32 [m] on the device); 0 where index[e] is
// outside [0, n).
Tensor gather_rows(const Tensor& src, const Tensor& index);

// dst row (dst_at + r) = src row (src_at + r) for r < min(n, count); rows are slices along dim 0
// of equal size and dtype. dst_at, src_at and count are i32 [1] on the device, or undefined for
// 0, 0 and n. Rows outside either tensor are skipped (never written out of bounds).
void copy_rows_(const Tensor& dst, const Tensor& dst_at, const Tensor& src, const Tensor& src_at, int64_t n,
                const Tensor& count);

// i32 [n]: base + 0, base + 1, ... (base i32 [1] on the device).
Tensor arange_from(const Tensor& base, int64_t n);

// Per row of x [n, V] (f32, or bf16 on CUDA): index i32 [n], the first maximum; top f32 [n], its
// value; margin f32 [n], the maximum minus the largest other entry (0 for a repeated maximum).
struct ArgmaxRows {
  Tensor index, margin, top;
};
ArgmaxRows argmax_rows(const Tensor& x);

}  // namespace dflash::ops
