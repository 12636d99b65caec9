// causal_attention: the frozen target's causal softmax attention with GQA, forward only (the
// target never takes gradients): argument checks and the kernel call (CPU, or on CUDA dflash's
// kernel or cuDNN's fused flash attention, runtime/target_attention.h).
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "runtime/cuda/cudnn_attention.h"
#endif

namespace dflash::ops {
using namespace detail;

namespace {
constexpr const char* kOp = "causal_attention";

// CUDA: q, k, v f32 or bf16 (all one dtype, the output's too), hd a multiple of 8.
Tensor causal_attention_cuda(const Tensor& q, const Tensor& k, const Tensor& v, float scale) {
#ifndef DFLASH_CUDA
  no_cuda_kernel(kOp);
#endif
  check_float_dtype(kOp, q, "q");
  DF_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(),
           kOp << ": q " << q.describe() << ", k " << k.describe() << " and v " << v.describe()
               << " must share one dtype (f32 or bf16); convert them before the call");
  const int64_t B = q.dim(0), S = q.dim(1), nh = q.dim(2), hd = q.dim(3);
  DF_CHECK(hd % 8 == 0, kOp << ": q " << q.describe() << " has head dim " << hd
                            << "; the CUDA kernel needs a multiple of 8 (16-byte rows); run this model on the CPU backend");
  Tensor out = Tensor::empty({B, S, nh, hd}, q.dtype());  // (B, S, nh, hd)
#ifdef DFLASH_CUDA
  const kernels::cuda::CausalAttentionArgs args{q.raw(), k.raw(), v.raw(), out.raw(), bf16(q), B, S, nh, k.dim(2),
                                                hd, scale};
  // Decided before the launch, also while planning: the planning pass builds cuDNN's plan.
  const bool on_cudnn = cudnn_attention::use(ctx(), args);
  if (void* s = ctx().cuda_stream_for_launch()) {
    if (on_cudnn)
      cudnn_attention::forward(ctx(), args, s);
    else
      kernels::cuda::causal_attention_forward(args, s);
  }
#endif
  return out;
}
}  // namespace

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale) {
  using kernels::cpu::kCausalAttentionMaxHeadDim;
  OpScope op(kOp);
  check_same_device(kOp, {&q, &k, &v});
  DF_CHECK(q.ndim() == 4, kOp << ": q is " << q.describe() << " but must be 4-D [B, S, nh, hd]");
  DF_CHECK(k.ndim() == 4, kOp << ": k is " << k.describe() << " but must be 4-D [B, S, nkv, hd]");
  const int64_t B = q.dim(0), S = q.dim(1), nh = q.dim(2), hd = q.dim(3), nkv = k.dim(2);
  DF_CHECK(hd >= 1 && hd <= kCausalAttentionMaxHeadDim,
           kOp << ": q " << q.describe() << " has head dim " << hd << " but it must be in [1, "
               << kCausalAttentionMaxHeadDim << "]");
  DF_CHECK(k.dim(0) == B && k.dim(1) == S && k.dim(3) == hd,
           kOp << ": k is " << k.describe() << " but must be [B, S, nkv, hd] = [" << B << ", " << S << ", nkv, "
               << hd << "] to match q " << q.describe());
  DF_CHECK(v.shape() == k.shape(),
           kOp << ": v is " << v.describe() << " but must have k's shape " << k.shape().str() << " [B, S, nkv, hd]");
  DF_CHECK(nh >= 1 && nkv >= 1 && nh % nkv == 0,
           kOp << ": q " << q.describe() << " has " << nh << " query heads and k " << k.describe() << " has " << nkv
               << " kv heads; the query heads must be a positive multiple of the kv heads"
               << " (GQA: query head h uses kv head h / (nh/nkv))");
  DF_CHECK(std::isfinite(scale) && scale > 0.0f,
           kOp << ": scale = " << scale << "; it must be finite and > 0 (usually head_dim^-0.5)");
  DF_CHECK(!needs_grad({&q, &k, &v}),
           kOp << ": q " << q.describe() << ", k " << k.describe() << " or v " << v.describe()
               << " requires grad, but causal_attention has no backward (it serves the frozen target); "
                  "run the target under NoGrad");
  // As docs/MODEL.md, "FLOP counting", counts attention: 2 products of 2 hd FLOP a head per visible (query, key) pair.
  note_flop_cost(4.0 * double(hd * nh * B) * double(S) * double(S + 1) / 2.0, "causal attention forward");
  if (!on_cpu()) return causal_attention_cuda(q, k, v, scale);
  check_dtype(kOp, q, DType::f32, "q");
  check_dtype(kOp, k, DType::f32, "k");
  check_dtype(kOp, v, DType::f32, "v");

  const kernels::cpu::CausalAttentionDims d{B, S, nh, nkv, hd, scale};
  Tensor out = Tensor::empty({B, S, nh, hd}, DType::f32);  // (B, S, nh, hd)
  const float *pq = f32(q), *pk = f32(k), *pv = f32(v);
  float* po = f32(out);
  ctx().launch([=] { kernels::cpu::causal_attention_forward(pq, pk, pv, d, po); });
  return out;
}

}  // namespace dflash::ops
