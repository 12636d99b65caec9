// CUDA kernels: launchers over pointers and sizes, each taking the stream (a cudaStream_t passed
// as void*). No autograd, no allocation, no globals. Float math accumulates in f32; tensors are
// f32 or bf16 (flag per pointer). Backward kernels accumulate (+=) into gradients.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/heuristics.h"

namespace dflash::kernels::cuda {

// primitives.cu
void fill(void* p, bool bf16, int64_t n, float value, void* stream);
void accumulate(void* dst, bool dst_bf16, const void* src, bool src_bf16, int64_t n, void* stream);  // dst += src
void copy(void* dst, const void* src, size_t bytes, void* stream);            // any memory: cudaMemcpyAsync
void copy_on_device(void* dst, const void* src, size_t bytes, void* stream);  // both on the GPU: a kernel

// gemm.cu: C[M,N] = alpha op(A) op(B) + beta C (or + beta addend) through cuBLAS, row-major, fp32 accumulation.
// A and B share a dtype (bf16 or f32); C is bf16 or f32.
struct GemmArgs {
  int64_t M, N, K;
  const void* A;
  int64_t lda;
  bool trans_a;
  const void* B;
  int64_t ldb;
  bool trans_b;
  void* C;
  int64_t ldc;
  float alpha, beta;
  bool ab_bf16, c_bf16;
  // A cuBLASLt algorithm chosen at startup (runtime/gemm_tuning.h, 9 integers) and the workspace
  // bound to the handle, or null: cublasGemmEx picks its own.
  const int32_t* lt_config = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // When set, the addend of beta (C's layout and dtype, not C itself): C = alpha op(A) op(B) + beta
  // addend, summed in f32 and rounded once (cuBLASLt; without lt_config, its first heuristic pick).
  const void* addend = nullptr;
};
void gemm(const GemmArgs& g, void* cublas_handle, void* stream);
// Tells compute-sanitizer's initcheck that cuBLAS's workspace holds defined bytes (it cannot see
// cuBLAS's own stores there); a no-op without the tool.
void mark_gemm_workspace_initialized(void* workspace, size_t bytes, void* stream);

// metrics.cu: as kernels/cpu/metrics.cpp (single block, fixed order).
void normalize_weights(const float* w, int64_t n, float eps, float* out, void* stream);
void weighted_accuracy(const int32_t* argmax, const int32_t* labels, const float* w, int64_t n, float eps, float* out,
                       void* stream);

// optimizer.cu: one update over flat buffers (see runtime/optimizer.h): norm of g * grad_scale
// (deterministic two-pass reduction through partials[1024], which then hold the step's AdamW
// coefficients); clip; lr from step; AdamW on the f32 master with g * grad_scale * clip (the
// scaled gradient is never written back) writing the bf16 compute copy; zero grads (when asked); step + 1;
// stats = {norm, lr}. Each step equals grads *= grad_scale followed by the unscaled update.
struct OptimizerArgs {
  float *p, *g, *m, *v;
  void* compute_bf16;  // may be null
  int64_t n;
  int32_t* step;
  float *lr, *norm, *partials, *stats;
  float grad_scale, max_grad_norm, peak_lr, min_lr;
  int64_t warmup_steps, total_steps;
  float beta1, beta2, eps, weight_decay;
  bool zero_grads = true;  // false: g is left as it is (the next backward overwrites it)
};
void optimizer_update(const OptimizerArgs& a, void* stream);
void convert_f32_to_bf16(const void* src, void* dst, int64_t n, void* stream);

// elementwise.cu: forward tensors share one dtype; backward takes a flag per pointer.
void add_forward(const void* a, const void* b, void* y, bool bf16, int64_t n, void* stream);  // y = a + b
void mul_forward(const void* a, const void* b, void* y, bool bf16, int64_t n, void* stream);  // y = a * b
// da += dy * b, db += dy * a; da or db may be null.
void mul_backward(const void* a, const void* b, bool ab_bf16, const void* dy, bool dy_bf16, void* da, bool da_bf16,
                  void* db, bool db_bf16, int64_t n, void* stream);
void scale_forward(const void* a, float s, void* y, bool bf16, int64_t n, void* stream);  // y = a * s
void scale_backward(const void* dy, bool dy_bf16, float s, void* da, bool da_bf16, int64_t n, void* stream);

// embedding.cu: out[i, :] = table[ids[i], :], table [V, H] (row_bytes = H * element size).
void embedding_forward(const void* table, const int32_t* ids, void* out, size_t row_bytes, int64_t n, void* stream);
// dtable[ids[i], :] += dout[i, :], each element summing its rows in order of i (as on the CPU).
void embedding_backward(const int32_t* ids, const void* dout, bool dout_bf16, void* dtable, bool dtable_bf16, int64_t n,
                        int64_t V, int64_t H, void* stream);

// rmsnorm.cu: rows of D; x, w, y share a dtype; rstd [rows] f32 (null when no backward follows).
void rmsnorm_forward(const void* x, const void* w, void* y, bool bf16, float* rstd, int64_t rows, int64_t D, float eps,
                     void* stream);
// Rows of the f32 scratch [rmsnorm_dw_partials(rows, D), D] that the weight gradient needs (one
// partial sum per fixed range of rows; the ranges depend only on rows and D).
int64_t rmsnorm_dw_partials(int64_t rows, int64_t D);
// dx and dw may be null; dw_partials is that scratch when dw is given.
void rmsnorm_backward(const void* x, const void* w, bool xw_bf16, const float* rstd, const void* dy, bool dy_bf16,
                      void* dx, bool dx_bf16, void* dw, bool dw_bf16, float* dw_partials, int64_t rows, int64_t D,
                      void* stream, bool dx_fresh = false);  // dx += its term, or = when fresh

// swiglu.cu: y = silu(g) * u; g, u, y share a dtype.
void swiglu_forward(const void* g, const void* u, void* y, bool bf16, int64_t n, void* stream);
// gu [rows, 2I] (gate's I columns, then up's) -> y [rows, I], the values of swiglu_forward.
void swiglu_halves_forward(const void* gu, void* y, bool bf16, int64_t rows, int64_t I, void* stream);
// dg, du += their terms (either may be null); a fresh one (not yet written) is overwritten instead,
// and may then be g (dg) or u (du) itself when of the same dtype.
void swiglu_backward(const void* g, const void* u, bool gu_bf16, const void* dy, bool dy_bf16, void* dg, bool dg_bf16,
                     void* du, bool du_bf16, int64_t n, void* stream, bool dg_fresh = false, bool du_fresh = false);

// rope.cu: x, y [rows, heads, hd] of one dtype, positions i32 [rows], inv_freq f32 [hd/2]; as kernels/cpu.
void rope_forward(const void* x, const int32_t* positions, const float* inv_freq, void* y, bool bf16, int64_t rows,
                  int64_t heads, int64_t hd, void* stream);
// dx += R(-angle) dy, or = when dx is fresh (its buffer not yet written).
void rope_backward(const void* dy, bool dy_bf16, const int32_t* positions, const float* inv_freq, void* dx,
                   bool dx_bf16, int64_t rows, int64_t heads, int64_t hd, void* stream, bool dx_fresh = false);

// fused_norms.cu (forward only; the bits of the unfused kernels): r = a + b, y = rmsnorm(r) * w
// over rows of D (as add_forward then rmsnorm_forward without rstd); and per head of q [rows, hq,
// hd] and k [rows, hk, hd]: y = rope(rmsnorm(x) * w) with w = wq or wk [hd] (as rmsnorm_forward
// then rope_forward). One dtype for every float pointer.
void add_rmsnorm_forward(const void* a, const void* b, const void* w, void* r, void* y, bool bf16, int64_t rows,
                         int64_t D, float eps, void* stream);
void rmsnorm_rope_forward(const void* q, const void* k, const void* wq, const void* wk, const int32_t* positions,
                          const float* inv_freq, void* yq, void* yk, bool bf16, int64_t rows, int64_t hq, int64_t hk,
                          int64_t hd, float eps, void* stream);
// rmsnorm_rope_forward's q and k read from rows ldq and ldk elements apart (the q and k columns of a
// packed q|k|v product), q written to yq [rows, hq, hd], k written into k_cache [S, C, hk, hd] at
// (slot[r], positions[r]) and v's row (ldv apart) copied beside it into v_cache, the rows whose slot
// or position is outside the cache left out (scatter_slot_rows' rule). The same bits as the unfused
// split, rmsnorm_rope and scatters. Only for the head dims and alignments the fused kernel covers:
// rmsnorm_rope_into_slots_fits says so before any launch, so that a caller runs those ops instead
// in every pass alike (planning launches nothing).
struct RopeSlots {
  int64_t ldq = 0, ldk = 0;
  const void* v = nullptr;
  int64_t ldv = 0;
  void *k_cache = nullptr, *v_cache = nullptr;
  const int32_t* slot = nullptr;
  int64_t S = 0, C = 0;
};
bool rmsnorm_rope_into_slots_fits(const void* q, const void* k, const void* wq, const void* wk, void* yq, bool bf16,
                                  int64_t hq, int64_t hk, int64_t hd, const RopeSlots& slots);
void rmsnorm_rope_into_slots(const void* q, const void* k, const void* wq, const void* wk, const int32_t* positions,
                             const float* inv_freq, void* yq, bool bf16, int64_t rows, int64_t hq, int64_t hk,
                             int64_t hd, float eps, const RopeSlots& slots, void* stream);

// strided_rows.cu: the first `width` bytes of `rows` rows whose starts are `*pitch` bytes apart
// (any dtype): copied from src to dst, or every byte set to `byte`.
void strided_copy(const void* src, size_t src_pitch, void* dst, size_t dst_pitch, size_t width, int64_t rows,
                  void* stream);
void strided_fill(void* dst, size_t pitch, size_t width, int64_t rows, uint8_t byte, void* stream);

// concat.cu: y [outer, a_inner + b_inner] from a [outer, a_inner] and b [outer, b_inner] (bytes, any dtype).
void concat_forward(const void* a, const void* b, void* y, int64_t outer, size_t a_inner_bytes, size_t b_inner_bytes,
                    void* stream);
// Its inverse: part i [outer, inner[i]] from x [outer, sum of inner] (bytes, any dtype), n parts.
constexpr int kMaxSplitParts = 4;
void split_forward(const void* x, int64_t outer, void* const* parts, const size_t* inner, int n, void* stream);
// In elements; da or db may be null.
void concat_backward(const void* dy, bool dy_bf16, void* da, bool da_bf16, void* db, bool db_bf16, int64_t outer,
                     int64_t a_inner, int64_t b_inner, void* stream);

// reduce.cu: out[0] = float(sum(x)) * scale in x's dtype, summed in double over fixed ranges
// through partials, a double scratch of sum_partials(n) entries.
int64_t sum_partials(int64_t n);
void sum_forward(const void* x, bool bf16, int64_t n, float scale, double* partials, void* out, void* stream);
void sum_backward(const void* dout, bool dout_bf16, float scale, void* dx, bool dx_bf16, int64_t n, void* stream);  // dx += dout[0] * scale

// linear_ce.cu: the fused lm_head + cross-entropy (see kernels/cpu/linear_ce.cpp for the
// semantics: label -1 ignored, a label outside [-1, V) gives NaN, argmax is the first maximum).
// h [R, H] and weight [V, H] share a dtype; rows go in chunks through a logits scratch [chunk, V]
// of that dtype (the GEMM's output, rounded once, as PyTorch's bf16 lm_head gives; the softmax
// math is f32). runtime/ops/linear_ce.cpp composes the pieces below chunk by chunk.
// ce_rows_forward: per row of logits (n, V) the lse, ce and argmax; with dlogits (n, V) of the
// same dtype (it may be the logits buffer itself) also weights[r] * (softmax - onehot), the
// gradient for a unit upstream gradient (as linear_ce_backward's rows with dloss = 1).
void ce_rows_forward(const void* logits, bool bf16, const int32_t* labels, const float* weights, int64_t n, int64_t V,
                     float* lse, float* ce, int32_t* argmax, void* dlogits, void* stream);
// The CTAs a row that ce_rows_forward's single-read kernel takes for these arguments on the current
// device (each keeps V / C logits in shared memory; kernels/heuristics.h's ce_rows, with 16-byte
// aligned logits and dlogits), or 0 where it reads the logits twice instead.
int ce_rows_cluster(const void* logits, const void* dlogits, bool bf16, int64_t V);
// loss[0] = sum over chunks of float(sum_r weights[r] * ce[r] in double) (the CPU's order).
void ce_loss(const float* ce, const float* weights, int64_t R, int64_t chunk, float* loss, void* stream);
// dst (n) += scale[0] * src (n), scale on the device.
void scaled_accumulate(void* dst, bool dst_bf16, const void* src, bool src_bf16, const float* scale, int64_t n,
                       void* stream);
// Recomputes each chunk's logits, turns them into dlogits (in h's dtype, in the dlogits scratch,
// which may alias logits) and accumulates dh += dlogits W and dweight += dlogits^T h.
struct LinearCeBackward {
  const void* h;
  const void* weight;
  bool bf16;
  const int32_t* labels;
  const float* row_weights;
  const float* lse;
  const float* dloss;  // [1]
  int64_t R, H, V, chunk;
  void* logits;   // [chunk, V] scratch in h's dtype
  void* dlogits;  // [chunk, V] scratch in h's dtype
  void* dh;       // [R, H] +=, or null
  bool dh_bf16;
  void* dw;  // [V, H] +=, or null
  bool dw_bf16;
};
void linear_ce_backward(const LinearCeBackward& a, void* cublas_handle, void* stream);

// cast.cu: dst = src converted elementwise (f32 <-> bf16, or a copy when both flags agree).
// f32 -> bf16 rounds to nearest even exactly like dflash::f32_to_bf16 (a NaN keeps its sign and top
// payload bits and becomes quiet); bf16 -> f32 is exact.
void cast(const void* src, bool src_bf16, void* dst, bool dst_bf16, int64_t n, void* stream);

// causal_attention.cu: the frozen target's causal (key j <= query i) softmax attention with GQA,
// forward only (kernels/cpu/causal_attention.cpp is the reference). q, out [B, S, nh, hd];
// k, v [B, S, nkv, hd]; all four of one dtype; query head h uses kv head h / (nh / nkv).
// hd % 8 == 0 and hd <= kCausalAttentionMaxHeadDim. bf16 with 16-byte aligned pointers runs on
// tensor cores (mma.sync, f32 accumulation); f32, or unaligned bf16, on CUDA cores.
inline constexpr int64_t kCausalAttentionMaxHeadDim = 256;
struct CausalAttentionArgs {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  bool bf16;
  int64_t B, S, nh, nkv, hd;
  float scale;
};
void causal_attention_forward(const CausalAttentionArgs& a, void* stream);

// dflash_batch.cu: as kernels/cpu/dflash_batch.cpp, bit for bit. All pointers on the device.
// The loss-decay weights exp(-(k-1)/gamma) are evaluated on the host with the CPU's expression
// and passed by value, so bs <= kDFlashMaxBlock.
inline constexpr int64_t kDFlashMaxBlock = 128;
struct DFlashBatchDims {
  int64_t B, S, N, bs;
  int32_t mask_token_id;
  float gamma;  // <= 0: no loss decay
};
// input_ids, loss_mask [B, S]; anchors, keep [B, N] -> noise_ids, q_pos, labels, w, lw [B, N*bs],
// k_pos [B, S + N*bs].
void dflash_prepare(const int32_t* input_ids, const int32_t* loss_mask, const int32_t* anchors, const int32_t* keep,
                    const DFlashBatchDims& d, int32_t* noise_ids, int32_t* q_pos, int32_t* k_pos, int32_t* labels,
                    float* w, float* lw, void* stream);
// out [7] (kernels::cpu::dflash_metrics): one block; the float sums are taken in double in the CPU's
// order (element order), the counts in integers, so the result equals the CPU's bit for bit.
inline constexpr int kDFlashSums = 7;
void dflash_metrics(const float* ce, const int32_t* argmax, const int32_t* labels, const float* w, const float* lw,
                    const int32_t* keep, int64_t B, int64_t N, int64_t bs, float* out, void* stream);

// dflash_attention.cu, dflash_attention_backward.cu: DFlash block-sparse attention (docs/MODEL.md,
// "The attention mask"; the same semantics as kernels/cpu/attention.cpp). q [B, T, nh, hd] with
// T = N*bs, k and v [B, S+T, nkv, hd], all of one dtype (bf16 flag); anchors, keep i32 [B, N].
// Needs hd % 8 == 0, hd <= 256, 1 <= bs <= 64, nh % nkv == 0 and 16-byte aligned q, k, v, dout.
// Tensor cores (mma.sync bf16, f32 accumulation); f32 tensors are split into two bf16 halves.
// key_tile only sets the reported count: tiles[0] = sum over kept blocks of
// ceil(min(anchor, S) / key_tile) + 1, as on the CPU (the kernels' own tiles are internal).
// Two kernel versions, equal up to bf16 rounding and each deterministic (the same call gives the
// same bits): v1, mma.sync (any supported shape: the portable kernels); v2, wgmma (sm_90a: bf16 q,
// k, v and dout with hd <= 128 on a compute capability 9.0 device, in a build with the Hopper
// kernels and runtime.kernels = "auto"; elsewhere v1 runs). What a call
// runs, v2's dk/dv and dq modes and its TMA loads included, is kernels/heuristics.h's choice for
// the device and the dims (dflash_attention_*_choice below). v2 runs fastest when each sequence's
// anchors are sorted ascending (the data pipeline's order); any order gives the same results.
struct DflashAttentionDims {
  int64_t B, S, N, bs, nh, nkv, hd, key_tile;
  float scale;
};
struct DflashAttentionForward {
  const void *q, *k, *v;
  bool bf16;
  const int32_t *anchors, *keep;
  DflashAttentionDims d;
  void* out;       // [B, T, nh, hd] in q's dtype; dropped blocks get 0
  float* lse;      // [B, nh, T], saved for backward; dropped blocks get 0
  int32_t* tiles;  // [1]
  int version = 0;  // 0: kernels/heuristics.h's choice; 1: v1 wherever; 2: v2 where it applies (tests, A/B)
};
void dflash_attention_forward(const DflashAttentionForward& a, void* stream);
// dq, dk, dv accumulate (+=) and any of them may be null; dropped blocks contribute nothing.
struct DflashAttentionBackward {
  const void *q, *k, *v;
  bool bf16;
  const int32_t *anchors, *keep;
  DflashAttentionDims d;
  const void* out;   // the forward's output (q's dtype)
  const void* dout;  // [B, T, nh, hd]
  bool dout_bf16;
  const float* lse;  // the forward's
  float* delta;      // [B, nh, T] scratch: dO . O per query row
  void* dq;
  bool dq_bf16;
  void* dk;
  bool dk_bf16;
  void* dv;
  bool dv_bf16;
  int version = 0;  // as in DflashAttentionForward
  // A fresh gradient (its buffer not yet written) is written, not added to: every element, the
  // bits a zero-filled one would get. dq, dk and dv must not share memory when one is fresh.
  bool dq_fresh = false, dk_fresh = false, dv_fresh = false;
  // Scratch of dflash_attention_backward_scratch_bytes(d, ...) bytes (16-byte aligned) for the fused
  // backward, which sums dq inside the dk/dv kernel; without it (null) dq has its own kernel.
  void* scratch = nullptr;
};
void dflash_attention_backward(const DflashAttentionBackward& a, void* stream);
// The scratch a backward with these dims can use (0: none): bf16 q, k, v and dout; wants_dq: dq
// is asked for; version as in DflashAttentionBackward. Asked when the graph is planned.
int64_t dflash_attention_backward_scratch_bytes(const DflashAttentionDims& d, bool bf16, bool wants_dq,
                                                int version = 0);
// What kernels/heuristics.h chooses for these dims on the current device (bf16: q, k, v, and dout
// for the backward), the test seams (kernels/cuda/test_seams.h) applied: what a call of version 0 runs.
heuristics::AttentionForward dflash_attention_forward_choice(const DflashAttentionDims& d, bool bf16);
heuristics::AttentionBackward dflash_attention_backward_choice(const DflashAttentionDims& d, bool bf16,
                                                               bool wants_dq);

}  // namespace dflash::kernels::cuda
