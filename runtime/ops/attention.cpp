// dflash_attention: DFlash's block-sparse drafter attention (docs/MODEL.md, "The attention mask"):
// shape checks, the forward kernel call and the backward rule (inputs q, k, v), on the CPU and
// on CUDA (kernels/cuda/dflash_attention*.cu: bf16 or f32, head dim a multiple of 8 up to 256).
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

namespace {
constexpr const char* kOp = "dflash_attention";
// FLOP per visible (query, key) pair and per head-dim unit, as docs/MODEL.md, "FLOP counting", counts them:
// forward Q K^T and P V (2 + 2); backward 2.5x the forward.
constexpr double kForwardFlopPerPair = 4.0, kBackwardFlopPerPair = 10.0;

// Checks every argument and returns the kernel's dimensions.
kernels::cpu::AttentionDims check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& anchors,
                                            const Tensor& keep, int64_t S, int64_t bs, float scale,
                                            int64_t key_tile) {
  using kernels::cpu::kAttentionMaxBlock, kernels::cpu::kAttentionMaxKeyTile, kernels::cpu::kAttentionMaxHeadDim;
  check_float_dtype(kOp, q, "q");  // f32 on the CPU; f32 or bf16 on CUDA
  check_float_dtype(kOp, k, "k");
  check_float_dtype(kOp, v, "v");
  check_dtype(kOp, anchors, DType::i32, "anchors");
  check_dtype(kOp, keep, DType::i32, "keep");
  DF_CHECK(bs >= 1 && bs <= kAttentionMaxBlock,
           kOp << ": block_size is " << bs << " but must be in [1, " << kAttentionMaxBlock
               << "]; the CPU kernel keeps a block's scores in a fixed-size stack array");
  DF_CHECK(key_tile >= 1 && key_tile <= kAttentionMaxKeyTile,
           kOp << ": key_tile is " << key_tile << " but must be in [1, " << kAttentionMaxKeyTile
               << "]; the CPU kernel keeps a tile's scores in a fixed-size stack array");
  DF_CHECK(S >= 0, kOp << ": context_len is " << S << "; it must be >= 0 (the number of context keys)");
  DF_CHECK(q.ndim() == 4, kOp << ": q is " << q.describe() << " but must be 4-D [B, T, nh, hd]");
  DF_CHECK(k.ndim() == 4, kOp << ": k is " << k.describe() << " but must be 4-D [B, S+T, nkv, hd]");
  const int64_t B = q.dim(0), T = q.dim(1), nh = q.dim(2), hd = q.dim(3), nkv = k.dim(2);
  DF_CHECK(hd >= 1 && hd <= kAttentionMaxHeadDim,
           kOp << ": q " << q.describe() << " has head dim " << hd << " but it must be in [1, "
               << kAttentionMaxHeadDim << "]");
  DF_CHECK(T % bs == 0, kOp << ": q " << q.describe() << " has T = " << T << " draft queries, not a multiple of"
                            << " block_size " << bs << "; T must be N * block_size");
  const int64_t N = T / bs;
  DF_CHECK(k.dim(0) == B && k.dim(1) == S + T && k.dim(3) == hd,
           kOp << ": k is " << k.describe() << " but must be [B, S+T, nkv, hd] = [" << B << ", " << S + T
               << ", nkv, " << hd << "]: context_len = " << S << " context keys, then the T = " << T
               << " draft keys of q " << q.describe());
  DF_CHECK(v.shape() == k.shape(), kOp << ": v is " << v.describe() << " but must have k's shape "
                                       << k.shape().str() << " [B, S+T, nkv, hd]");
  DF_CHECK(nh >= 1 && nkv >= 1 && nh % nkv == 0,
           kOp << ": q " << q.describe() << " has " << nh << " query heads and k " << k.describe() << " has " << nkv
               << " kv heads; the query heads must be a positive multiple of the kv heads"
               << " (GQA: query head j uses kv head j / (nh/nkv))");
  DF_CHECK(anchors.shape() == (Shape{B, N}),
           kOp << ": anchors is " << anchors.describe() << " but must be [B, N] = [" << B << ", " << N
               << "]: one anchor per block of block_size = " << bs << " queries of q " << q.describe());
  DF_CHECK(keep.shape() == (Shape{B, N}),
           kOp << ": keep is " << keep.describe() << " but must be [B, N] = [" << B << ", " << N
               << "], like anchors: one flag per block of block_size = " << bs << " queries");
  return {B, S, N, bs, nh, nkv, hd, key_tile, scale};
}

#ifdef DFLASH_CUDA
bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0; }

// The CUDA kernels' extra conditions: one dtype, head dim a multiple of 8 up to 256, rows read
// in 16-byte pieces.
void check_cuda_attention(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::cpu::AttentionDims& d) {
  DF_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(),
           kOp << ": q is " << q.describe() << ", k is " << k.describe() << " and v is " << v.describe()
               << "; on CUDA they must share one dtype (bf16 or f32)");
  DF_CHECK(d.hd % 8 == 0 && d.hd <= 256,
           kOp << ": q " << q.describe() << " has head dim " << d.hd
               << "; the CUDA kernel needs a multiple of 8 in [8, 256] (run other head dims on the CPU backend)");
  for (auto [t, role] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}})
    DF_CHECK(aligned16(*t), kOp << ": " << role << " " << t->describe()
                                << " does not start at a 16-byte aligned address; pass a whole tensor, not a view"
                                   " at an odd offset");
}

kernels::cuda::DflashAttentionDims cuda_dims(const kernels::cpu::AttentionDims& d) {
  return {d.B, d.S, d.N, d.bs, d.nh, d.nkv, d.hd, d.key_tile, d.scale};
}

// CUDA: out in q's dtype, lse f32 [B, nh, T] saved for backward, tiles_visited counted on the
// device. The backward takes dout and each gradient in its own dtype.
Attention dflash_attention_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& anchors,
                                const Tensor& keep, const kernels::cpu::AttentionDims& d, const Attention* saved) {
  check_cuda_attention(q, k, v, d);
  const int64_t T = d.N * d.bs;
  Attention r;
  if (saved) {
    r.out = saved->out;
    r.lse = saved->lse;
  } else {
    r.out = Tensor::empty({d.B, T, d.nh, d.hd}, q.dtype());
    r.tiles_visited = Tensor::empty({1}, DType::i32);
    r.lse = Tensor::empty({d.B, d.nh, T}, DType::f32);  // saved for backward
    note_pair_cost(kForwardFlopPerPair * double(d.hd * d.nh), "attention forward");
    if (void* s = ctx().cuda_stream_for_launch())
      kernels::cuda::dflash_attention_forward({q.raw(), k.raw(), v.raw(), bf16(q), i32(anchors), i32(keep),
                                               cuda_dims(d), r.out.raw(), f32(r.lse), i32(r.tiles_visited)},
                                              s);
  }
  Tensor lse = r.lse;
  if (needs_grad({&q, &k, &v})) {
    record_node(kOp, {&r.out}, [q, k, v, anchors, keep, out = r.out, lse, d](NodeGrads& g) {
      Tensor dout = g.out(0);
      if (!dout.defined()) return;
      // Fresh gradients (q, k and v's first, as in the drafter) are written by the kernels, not
      // added to: no zero fill, no read. Gradients that share memory are zero-filled and added to.
      auto [dq, dq_fresh] = g.in_overwritable(q);
      auto [dk, dk_fresh] = g.in_overwritable(k);
      auto [dv, dv_fresh] = g.in_overwritable(v);
      if (!dq.defined() && !dk.defined() && !dv.defined()) return;
      const auto shares = [](const Tensor& a, const Tensor& b) {  // one storage (also while planning)
        return a.defined() && b.defined() && a.impl().storage == b.impl().storage;
      };
      if (shares(dq, dk) || shares(dq, dv) || shares(dk, dv)) {
        for (auto [t, fresh] : {std::pair{&dq, &dq_fresh}, {&dk, &dk_fresh}, {&dv, &dv_fresh}})
          if (*fresh) ops::fill_(*t, 0.0f), *fresh = false;
      }
      check_float_dtype(kOp, dout, "the output gradient");
      DF_CHECK(aligned16(dout), kOp << ": the output gradient " << dout.describe()
                                    << " does not start at a 16-byte aligned address");
      Tensor delta = Tensor::empty({d.B, d.nh, d.N * d.bs}, DType::f32);  // (B, nh, T): dO . O per query row
      // The fused backward's dq sums (dk/dv's kernel adds dq up in a fixed order), where it runs.
      const int64_t scratch_bytes =
          kernels::cuda::dflash_attention_backward_scratch_bytes(cuda_dims(d), bf16(q) && bf16(dout), dq.defined());
      Tensor scratch = scratch_bytes > 0 ? Tensor::empty({(scratch_bytes + 3) / 4}, DType::f32) : Tensor();
      note_pair_cost(kBackwardFlopPerPair * double(d.hd * d.nh), "attention backward");
      if (void* s = ctx().cuda_stream_for_launch()) {
        kernels::cuda::DflashAttentionBackward b{q.raw(),  k.raw(),    v.raw(),     bf16(q),  i32(anchors), i32(keep),
                                                 cuda_dims(d), out.raw(), dout.raw(), bf16(dout), f32(lse),
                                                 f32(delta), raw(dq),    bf16(dq),    raw(dk),  bf16(dk),
                                                 raw(dv),  bf16(dv)};
        b.dq_fresh = dq_fresh, b.dk_fresh = dk_fresh, b.dv_fresh = dv_fresh;
        b.scratch = scratch.defined() ? scratch.raw() : nullptr;
        kernels::cuda::dflash_attention_backward(b, s);
      }
    });
  }
  return r;
}
#endif
}  // namespace

Attention dflash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& anchors,
                           const Tensor& keep, int64_t context_len, int64_t block_size, float scale,
                           int64_t key_tile, const Attention* saved) {
  OpScope op(kOp);
  check_same_device(kOp, {&q, &k, &v, &anchors, &keep});
  const kernels::cpu::AttentionDims d =
      check_attention(q, k, v, anchors, keep, context_len, block_size, scale, key_tile);
  if (saved) {
    const int64_t T = d.N * d.bs;
    const Shape out_shape{d.B, T, d.nh, d.hd}, lse_shape{d.B, d.nh, T};
    const bool fits = saved->out.defined() && saved->lse.defined() && saved->out.shape() == out_shape &&
                      saved->out.dtype() == q.dtype() && saved->lse.shape() == lse_shape;
    DF_CHECK(fits,
             kOp << ": the saved output does not belong to this call (q " << q.describe()
                 << "); pass the out and lse of the same call's first run");
  }
  if (!on_cpu()) {
#ifdef DFLASH_CUDA
    return dflash_attention_cuda(q, k, v, anchors, keep, d, saved);
#else
    no_cuda_kernel(kOp);
#endif
  }
  const int64_t T = d.N * d.bs;

  Attention r;
  if (saved) {
    r.out = saved->out;
    r.lse = saved->lse;
  } else {
    r.out = Tensor::empty({d.B, T, d.nh, d.hd}, DType::f32);
    r.tiles_visited = Tensor::empty({1}, DType::i32);
    r.lse = Tensor::empty({d.B, d.nh, T}, DType::f32);  // saved for backward
    const float *pq = f32(q), *pk = f32(k), *pv = f32(v);
    const int32_t *pa = i32(anchors), *pkeep = i32(keep);
    float *po = f32(r.out), *plse = f32(r.lse);
    int32_t* ptiles = i32(r.tiles_visited);
    note_pair_cost(kForwardFlopPerPair * double(d.hd * d.nh), "attention forward");
    ctx().launch([=] { kernels::cpu::dflash_attention_forward(pq, pk, pv, pa, pkeep, d, po, plse, ptiles); });
  }
  Tensor lse = r.lse;

  if (needs_grad({&q, &k, &v})) {
    record_node(kOp, {&r.out}, [q, k, v, anchors, keep, out = r.out, lse, d](NodeGrads& g) {
      Tensor dout = g.out(0);
      if (!dout.defined()) return;
      float *dq = f32(g.in(q)), *dk = f32(g.in(k)), *dv = f32(g.in(v));
      const float *pq = f32(q), *pk = f32(k), *pv = f32(v), *po = f32(out), *pdo = f32(dout), *plse = f32(lse);
      const int32_t *pa = i32(anchors), *pkeep = i32(keep);
      note_pair_cost(kBackwardFlopPerPair * double(d.hd * d.nh), "attention backward");
      ctx().launch([=] {
        kernels::cpu::dflash_attention_backward(pq, pk, pv, pa, pkeep, po, pdo, plse, d, dq, dk, dv);
      });
    });
  }
  return r;
}

int64_t dflash_attention_all_tiles(int64_t batch, int64_t context_len, int64_t n_blocks, int64_t key_tile) {
  DF_CHECK(batch >= 0 && context_len >= 0 && n_blocks >= 0 && key_tile >= 1,
           "dflash_attention_all_tiles: batch " << batch << ", context_len " << context_len << ", n_blocks "
                                                << n_blocks << ", key_tile " << key_tile
                                                << ": the counts must be >= 0 and key_tile >= 1");
  return batch * n_blocks * ((context_len + key_tile - 1) / key_tile + n_blocks);
}

}  // namespace dflash::ops
