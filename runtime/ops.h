// The ops: forward on the context's stream, plus the backward rule recorded on the tape.
// Every op checks dtypes, shapes and devices and names the fix when they are wrong.
// Float tensors are f32 on the CPU and f32 or bf16 on CUDA; an op's output has its input's dtype
// (bf16 is storage only: kernels compute and accumulate in f32).
// Backward kernels accumulate (+=) into their input gradients.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace dflash::ops {

// ---- Primitives (no autograd): kernel calls the runtime itself uses. ----
void fill_(const Tensor& t, float value);                // every element = value (f32 or bf16)
void accumulate_(const Tensor& dst, const Tensor& src);  // dst += src; same numel, f32/bf16
void copy_(const Tensor& dst, const Tensor& src);        // dst = src; same numel and dtype

// ---- Metrics and weights (no autograd). ----
// w / (sum(w) + eps): per-position loss weights normalised over the micro-batch.
Tensor normalize_weights(const Tensor& w, float eps = 1e-6f);
// sum [argmax == label][w > 0.5] / (sum w + eps) -> f32 [1].
Tensor weighted_accuracy(const Tensor& argmax, const Tensor& labels, const Tensor& w, float eps = 1e-6f);

// ---- Differentiable ops. ----
// a [M,K] (or [K,M] with trans_a) times b [K,N] (or [N,K] with trans_b) -> [M,N].
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// x [..., in] times weight [out, in]^T -> [..., out] (weights stored like torch Linear).
Tensor linear(const Tensor& x, const Tensor& weight);
// residual + linear(x, weight), residual of the output's shape and x's dtype: the values of
// add(residual, linear(x, weight)) on the CPU; on CUDA the GEMM's epilogue adds the residual to
// its f32 sum, rounded once (one pass less, and no copy of the gradient for the residual).
Tensor linear_residual(const Tensor& x, const Tensor& weight, const Tensor& residual);
// linear(concat(a, b, 1), weight) without building the concatenation: a [B, Sa, in] and
// b [B, Sb, in] -> [B, Sa + Sb, out], each batch row's a rows first. Same values and gradients.
Tensor linear_concat_rows(const Tensor& a, const Tensor& b, const Tensor& weight);
Tensor add(const Tensor& a, const Tensor& b);  // same shape
Tensor mul(const Tensor& a, const Tensor& b);  // same shape
Tensor scale(const Tensor& a, float s);
// table [V, H] (usually frozen), ids i32 [...] -> [..., H]. An id outside [0, V) is an error
// caught when the ids are staged, not here; the kernel clamps nothing.
Tensor embedding(const Tensor& table, const Tensor& ids);
// x [..., D] normalised over the last dim: x / sqrt(mean(x^2) + eps) * weight[D].
Tensor rmsnorm(const Tensor& x, const Tensor& weight, float eps);
// Rotate-half RoPE. x [..., heads, hd] with positions i32 holding one position per row of
// heads (numel(positions) = numel(x) / (heads*hd)); inv_freq f32 [hd/2].
Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq);
// Forward-only fusions for frozen models (no backward: refused when an input requires grad;
// use the unfused ops where gradients flow). add_rmsnorm: sum = a + b and normed = rmsnorm(sum,
// weight, eps), the values of add then rmsnorm. rmsnorm_rope: per-head rmsnorm of q [..., hq, hd]
// and k [..., hk, hd] (weights [hd]) then rope at one position per row of heads, the values of
// rmsnorm then rope for each. runtime/ops/fused_norms.cpp.
struct AddRmsnorm {
  Tensor sum, normed;
};
AddRmsnorm add_rmsnorm(const Tensor& a, const Tensor& b, const Tensor& weight, float eps);
struct RopedQK {
  Tensor q, k;
};
RopedQK rmsnorm_rope(const Tensor& q, const Tensor& k, const Tensor& q_weight, const Tensor& k_weight,
                     const Tensor& positions, const Tensor& inv_freq, float eps);
// silu(gate) * up, same shapes.
Tensor swiglu(const Tensor& gate, const Tensor& up);
// gu [..., 2I] -> [..., I]: swiglu of its halves, gate = gu[..., :I], up = gu[..., I:] (the output
// of one GEMM over gate_proj's and up_proj's packed rows), the values of swiglu on the halves.
// Forward-only, like the fusions above (refused when gu requires grad). runtime/ops/swiglu.cpp.
Tensor swiglu_halves(const Tensor& gu);
// Concatenation along dim (a and b agree on every other dim).
Tensor concat(const Tensor& a, const Tensor& b, int dim);
// Every part concatenated along dim in one pass (each part's bytes read and written once), the
// values of chained concat; forward-only (refused when a part requires grad). A defined `into`
// (the result's dtype, size and device) is written instead of a new tensor, and returned.
Tensor concat_all(const std::vector<Tensor>& parts, int dim, const Tensor& into = Tensor());
// x [..., sum of widths] cut along its last dim into parts [..., widths[i]], in order, in one pass;
// forward-only, 1 to kMaxSplitColumns parts of width >= 1.
constexpr int kMaxSplitColumns = 4;
std::vector<Tensor> split_columns(const Tensor& x, const std::vector<int64_t>& widths);
Tensor sum(const Tensor& x);   // -> [1] of x's dtype
Tensor mean(const Tensor& x);  // -> [1] of x's dtype

// Fused frozen-lm_head + softmax cross-entropy, computed in chunks of rows so the full logits
// are never held: scratch is chunk_rows x V logits, f32 on the CPU and of h's dtype on CUDA (bf16
// logits, as PyTorch's bf16 lm_head gives; softmax math in f32), reported in scratch_bytes; the
// gradient's dlogits are written over them.
//   h [R, H] f32 (CUDA: f32 or bf16), weight [V, H] of h's dtype (frozen), labels i32 [R],
//   row_weights f32 [R] (no grad).
//   loss = sum_r row_weights[r] * CE_r  (one element, differentiable w.r.t. h)
//   ce [R] f32 and argmax [R] i32 carry no gradient. loss is f32 on every device.
struct LinearCrossEntropy {
  Tensor loss, ce, argmax;
  size_t scratch_bytes = 0;
};
LinearCrossEntropy linear_cross_entropy(const Tensor& h, const Tensor& weight, const Tensor& labels,
                                        const Tensor& row_weights, int64_t chunk_rows = 1024);

// Rows in groups of `period` along dim 0 (DFlash blocks of bs slots). drop_group_heads keeps all
// but each group's first row: [groups * (period - 1), ...]; its backward gives the dropped rows
// gradient 0. with_group_heads (no gradient) puts such rows back, the head rows filled with
// `fill_byte` in every byte (0: 0.0f and 0; 0xFF: the i32 -1).
Tensor drop_group_heads(const Tensor& x, int64_t period);
Tensor with_group_heads(const Tensor& y, int64_t period, uint8_t fill_byte);

// DFlash block-sparse attention (docs/MODEL.md, "The attention mask").
//   q [B, T, nh, hd] with T = N*bs draft queries; k, v [B, S+T, nkv, hd] (context keys first,
//   then the draft keys); anchors i32 [B, N]; keep i32 [B, N].
//   Query block a sees context keys j < anchors[b,a] and the bs keys of its own block; with
//   keep = 0 it sees nothing and its output and gradients are exactly 0. GQA: query head j uses
//   kv head j / (nh/nkv). Only visible key tiles (key_tile keys each; the own block is one tile)
//   are visited; tiles_visited (i32 [1]) counts the (query block, key tile) pairs visited.
//   With `saved` (the out and lse of an earlier call on the same q, k, v: a checkpointed
//   segment's recomputation), no forward kernel runs: saved's out and lse are returned and the
//   backward rule is recorded on them. tiles_visited is then undefined.
struct Attention {
  Tensor out;            // [B, T, nh, hd]
  Tensor lse;            // f32 [B, nh, T], what backward needs besides out
  Tensor tiles_visited;  // i32 [1]
};
Attention dflash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& anchors,
                           const Tensor& keep, int64_t context_len, int64_t block_size, float scale,
                           int64_t key_tile = 64, const Attention* saved = nullptr);
// How many key tiles exist for the same call if every one were visited.
int64_t dflash_attention_all_tiles(int64_t batch, int64_t context_len, int64_t n_blocks, int64_t key_tile);

// The frozen target's causal attention, forward only (inputs that need grad are refused):
// q [B, S, nh, hd], k and v [B, S, nkv, hd] -> [B, S, nh, hd]. Query i of a sequence sees its keys
// j <= i; GQA: query head h uses kv head h / (nh/nkv). Scores are scale * q.k (usually hd^-0.5).
// CUDA: q, k, v f32 or bf16 (one dtype, also the output's) and hd a multiple of 8.
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale);

// x converted to dtype `to` (always a new tensor). CUDA: f32 <-> bf16 (rounding to nearest even,
// bit for bit like f32_to_bf16) or a copy; CPU: f32 -> f32 only (the CPU computes in f32).
// Backward: dx += dy converted to dx's dtype.
Tensor cast(const Tensor& x, DType to);

}  // namespace dflash::ops
