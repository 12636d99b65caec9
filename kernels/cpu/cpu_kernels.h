// CPU kernels: plain functions over pointers and sizes. No autograd, no allocation, no globals;
// every buffer (scratch included) is passed in. Backward kernels accumulate (+=) into gradients.
// One op family per file, forward and backward side by side. All float math is f32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dflash::kernels::cpu {

// fill.cpp
void fill_zero(void* p, size_t bytes);
void fill_f32(float* p, int64_t n, float value);
void copy_bytes(void* dst, const void* src, size_t bytes);
void accumulate_f32(float* dst, const float* src, int64_t n);  // dst += src

// matmul.cpp: C[M,N] = alpha * op(A) op(B) + beta * C, row-major with leading dims.
// op(A) is [M,K]: A is [M,K] (lda >= K), or [K,M] when trans_a (lda >= M). Likewise B.
void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B,
              int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta);

// elementwise.cpp
void add_forward(const float* a, const float* b, float* y, int64_t n);
void mul_forward(const float* a, const float* b, float* y, int64_t n);
void mul_backward(const float* a, const float* b, const float* dy, float* da, float* db, int64_t n);  // da/db may be null
void scale_forward(const float* a, float s, float* y, int64_t n);
void scale_backward(const float* dy, float s, float* da, int64_t n);

// embedding.cpp: out[i, :] = table[ids[i], :]; table [V, H].
void embedding_forward(const float* table, const int32_t* ids, float* out, int64_t n, int64_t H);
// dtable[ids[i], :] += dout[i, :], in order of i.
void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n, int64_t H);

// rmsnorm.cpp: rows of D. y = x * rstd * w with rstd = 1/sqrt(mean(x^2)+eps), saved [rows].
void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t D, float eps);
// dx and dw may be null; dw accumulates over rows in row order; dx accumulates too, unless fresh
// (its buffer not yet written: overwritten).
void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, float* dx, float* dw,
                      int64_t rows, int64_t D, bool dx_fresh = false);

// rope.cpp: x [rows, heads, hd], positions [rows], inv_freq [hd/2]; rotate-half convention:
// y[i] = x[i] cos - x[i+hd/2] sin, y[i+hd/2] = x[i+hd/2] cos + x[i] sin, angle = pos * inv_freq[i].
void rope_forward(const float* x, const int32_t* positions, const float* inv_freq, float* y, int64_t rows,
                  int64_t heads, int64_t hd);
// dx += R(-angle) dy; a fresh dx (its buffer not yet written) is overwritten instead.
void rope_backward(const float* dy, const int32_t* positions, const float* inv_freq, float* dx, int64_t rows,
                   int64_t heads, int64_t hd, bool dx_fresh = false);

// swiglu.cpp: y = silu(g) * u.
void swiglu_forward(const float* g, const float* u, float* y, int64_t n);
// dg, du += their terms; a fresh one (its buffer not yet written) is overwritten instead, and
// may then be g (dg) or u (du) itself.
void swiglu_backward(const float* g, const float* u, const float* dy, float* dg, float* du, int64_t n,
                     bool dg_fresh = false, bool du_fresh = false);

// concat.cpp: y [outer, a_inner + b_inner] from a [outer, a_inner] and b [outer, b_inner] (bytes).
void concat_forward(const void* a, const void* b, void* y, int64_t outer, size_t a_inner, size_t b_inner);
// concat_forward's inverse for many parts: x [outer, sum of inner] -> part i [outer, inner[i]] (bytes).
void split_forward(const void* x, int64_t outer, const std::vector<void*>& parts, const std::vector<size_t>& inner);
void concat_backward(const float* dy, float* da, float* db, int64_t outer, int64_t a_inner, int64_t b_inner);

// reduce.cpp: out[0] = sum(x) accumulated in double, in index order.
void sum_forward(const float* x, int64_t n, float* out);
void sum_backward(const float* dout, float scale, float* dx, int64_t n);  // dx += dout[0] * scale

// linear_ce.cpp: one chunk of rows of the fused lm_head + cross-entropy.
// logits [c, V] (scratch, computed by the caller with gemm); per row r: lse[r], ce[r] =
// lse - logit[label], argmax[r] (first maximum); loss[0] += sum_r weights[r] * ce[r].
void ce_chunk_forward(const float* logits, const int32_t* labels, const float* weights, int64_t c, int64_t V,
                      float* lse, float* ce, int32_t* argmax, float* loss);
// In place: logits become dlogits = dloss * weights[r] * (softmax - onehot(label)).
void ce_chunk_backward(float* logits, const int32_t* labels, const float* weights, const float* lse,
                       const float* dloss, int64_t c, int64_t V);

// attention.cpp: DFlash block-sparse attention (see ops.h for shapes and the mask).
// lse [B, nh, T] saved for backward; tiles [1] receives the number of visited tiles.
// Limits the op enforces so that per-block scratch fits fixed-size stack arrays.
inline constexpr int64_t kAttentionMaxBlock = 64;     // bs
inline constexpr int64_t kAttentionMaxKeyTile = 256;  // key_tile
inline constexpr int64_t kAttentionMaxHeadDim = 256;  // hd
struct AttentionDims {
  int64_t B, S, N, bs, nh, nkv, hd, key_tile;
  float scale;
};
void dflash_attention_forward(const float* q, const float* k, const float* v, const int32_t* anchors,
                              const int32_t* keep, const AttentionDims& d, float* out, float* lse, int32_t* tiles);
// dq, dk, dv accumulate (+=) and any of them may be null; dk/dv follow k/v's layout [B, S+T, nkv, hd].
void dflash_attention_backward(const float* q, const float* k, const float* v, const int32_t* anchors,
                               const int32_t* keep, const float* out, const float* dout, const float* lse,
                               const AttentionDims& d, float* dq, float* dk, float* dv);

// causal_attention.cpp: the frozen target's causal softmax attention, forward only.
// q, out [B, S, nh, hd]; k, v [B, S, nkv, hd]; query i sees keys j <= i of its own sequence;
// GQA: query head h uses kv head h / (nh/nkv). Limits the op enforces:
inline constexpr int64_t kCausalAttentionTile = 64;         // query rows and keys per tile (stack scratch)
inline constexpr int64_t kCausalAttentionMaxHeadDim = 256;  // hd
struct CausalAttentionDims {
  int64_t B, S, nh, nkv, hd;
  float scale;
};
void causal_attention_forward(const float* q, const float* k, const float* v, const CausalAttentionDims& d,
                              float* out);

// metrics.cpp
// out[i] = w[i] / (sum(w) + eps), the sum in double in index order.
void normalize_weights(const float* w, int64_t n, float eps, float* out);
// out[0] = sum_i [argmax_i == label_i] [w_i > 0.5] / (sum_i w_i + eps).
void weighted_accuracy(const int32_t* argmax, const int32_t* labels, const float* w, int64_t n, float eps, float* out);

// dflash_batch.cpp: the DFlash step's data-side tensors (docs/MODEL.md, "The drafter forward" and
// "Loss weights and the loss"), computed inside the program from its static inputs. T = N * bs draft slots per sequence.
struct DFlashDims {
  int64_t B, S, N, bs;
  int32_t mask_token_id;
  float gamma;  // loss decay; <= 0: off
};
// input_ids, loss_mask [B,S]; anchors, keep [B,N] ->
//   noise_ids [B,T]: slot 0 of a kept block = input_ids[anchor], else mask_token_id;
//   q_pos [B,T] = anchor + k; k_pos [B,S+T] = 0..S-1 then anchor + k;
//   labels [B,T] = input_ids[anchor + k] (-1 when anchor + k >= S);
//   w [B,T] = keep [anchor+k < S] [k > 0] loss_mask[anchor+k]; lw = w exp(-(k-1)/gamma).
void dflash_prepare(const int32_t* input_ids, const int32_t* loss_mask, const int32_t* anchors, const int32_t* keep,
                    const DFlashDims& d, int32_t* noise_ids, int32_t* q_pos, int32_t* k_pos, int32_t* labels, float* w,
                    float* lw);
// Sums over the micro-batch, in a fixed order: out[0] = sum lw ce, out[1] = sum lw,
// out[2] = hits (argmax == label, w > 0.5), out[3] = sum w, out[4] = sum over kept blocks of
// tau_block (1 + leading slots k >= 1 with a hit), out[5] = kept blocks, out[6] = slots with w > 0.5.
constexpr int kDFlashSums = 7;
void dflash_metrics(const float* ce, const int32_t* argmax, const int32_t* labels, const float* w, const float* lw,
                    const int32_t* keep, const DFlashDims& d, float* out);

// optimizer.cpp
// out[0] = sqrt(sum g^2), accumulated in double in index order.
void grad_norm(const float* g, int64_t n, float* out);
// g *= min(1, max_norm / (norm[0] + 1e-6)) when max_norm > 0.
void clip_by_norm(float* g, int64_t n, const float* norm, float max_norm);
// lr[0] from step[0] (optimizer steps done so far): linear warmup over warmup_steps to
// peak_lr, then cosine to min_lr at total_steps; constant peak_lr when total_steps <= 0.
struct LrSchedule {
  float peak_lr, min_lr;
  int64_t warmup_steps, total_steps;
};
void lr_schedule(const int32_t* step, const LrSchedule& s, float* lr);
// AdamW with decoupled weight decay; bias correction uses t = step[0] + 1.
struct AdamW {
  float beta1, beta2, eps, weight_decay;
};
void adamw(float* p, const float* g, float* m, float* v, int64_t n, const int32_t* step, const float* lr,
           const AdamW& h);
void increment_step(int32_t* step);
void scale_inplace(float* x, int64_t n, float s);  // x *= s
}  // namespace dflash::kernels::cpu
