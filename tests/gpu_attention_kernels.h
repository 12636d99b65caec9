// The DFlash attention's CUDA kernels called directly with an explicit version, for the
// gpu-attention tests (test_gpu_attention_versions.cpp, test_gpu_attention_tma.cpp).
#pragma once
#ifdef DFLASH_CUDA
#include <cmath>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "tests/gpu_attention_cases.h"
#include "tests/gpu_test_util.h"
#include "tests/test_util.h"

namespace dflash::test {

// The kernels called directly with an explicit version (0: the heuristics' choice, as the op
// runs them; 1: mma.sync; 2: wgmma where it applies) and the test seams set by the caller, bf16
// tensors: forward, then the backward from that forward's out and lse into zeroed bf16 gradients,
// twice (grads of the second call in dq2, dk2, dv2), then into fresh ones: NaN bytes the kernels
// must write over without reading (dq3, dk3, dv3).
struct KernelResult {
  std::vector<float> out, lse, dq, dk, dv, dq2, dk2, dv2, dq3, dk3, dv3;
};
inline KernelResult run_kernels(const Case& c, const Data& d, int version) {
  Context ctx{Device::cuda(0)};
  ContextScope scope(ctx);
  Tensor q = make_float(c.q_shape(), d.q, DType::bf16), k = make_float(c.kv_shape(), d.k, DType::bf16),
         v = make_float(c.kv_shape(), d.v, DType::bf16), dout = make_float(c.q_shape(), d.dout, DType::bf16);
  Tensor anchors = Tensor::from_ints({c.B, c.N}, c.anchors), keep = Tensor::from_ints({c.B, c.N}, c.keep);
  Tensor out = Tensor::persistent(c.q_shape(), DType::bf16), lse = Tensor::persistent({c.B, c.nh, c.T()}, DType::f32),
         delta = Tensor::persistent({c.B, c.nh, c.T()}, DType::f32), tiles = Tensor::persistent({1}, DType::i32);
  Tensor dq = Tensor::persistent(c.q_shape(), DType::bf16), dk = Tensor::persistent(c.kv_shape(), DType::bf16),
         dv = Tensor::persistent(c.kv_shape(), DType::bf16);
  ops::fill_(out, NAN);
  ops::fill_(lse, NAN);
  const kernels::cuda::DflashAttentionDims dims{c.B, c.S, c.N, c.bs, c.nh, c.nkv, c.hd, c.key_tile, c.scale()};
  const auto* pa = static_cast<const int32_t*>(anchors.raw());
  const auto* pk = static_cast<const int32_t*>(keep.raw());
  // The fused backward's scratch where it runs, NaN-filled: its sums must not read what they did
  // not write.
  const int64_t scratch_bytes = kernels::cuda::dflash_attention_backward_scratch_bytes(dims, true, true, version);
  Tensor scratch = scratch_bytes > 0 ? Tensor::persistent({(scratch_bytes + 3) / 4}, DType::f32) : Tensor();
  if (scratch.defined()) ops::fill_(scratch, NAN);
  kernels::cuda::DflashAttentionForward f{q.raw(),   k.raw(), v.raw(), true, pa, pk, dims, out.raw(),
                                          static_cast<float*>(lse.raw()), static_cast<int32_t*>(tiles.raw())};
  f.version = version;
  kernels::cuda::dflash_attention_forward(f, ctx.cuda_stream());
  KernelResult r;
  auto backward = [&](bool fresh) {
    for (Tensor* t : {&dq, &dk, &dv}) ops::fill_(*t, fresh ? NAN : 0.0f);
    kernels::cuda::DflashAttentionBackward b{q.raw(),  k.raw(), v.raw(), true, pa, pk, dims, out.raw(), dout.raw(),
                                             true, static_cast<const float*>(lse.raw()),
                                             static_cast<float*>(delta.raw()), dq.raw(), true, dk.raw(), true, dv.raw(),
                                             true};
    b.version = version;
    b.dq_fresh = b.dk_fresh = b.dv_fresh = fresh;
    b.scratch = scratch.defined() ? scratch.raw() : nullptr;
    kernels::cuda::dflash_attention_backward(b, ctx.cuda_stream());
    ctx.synchronize();
  };
  backward(false);
  r.out = out.to_floats();
  r.lse = lse.to_floats();
  r.dq = dq.to_floats();
  r.dk = dk.to_floats();
  r.dv = dv.to_floats();
  backward(false);
  r.dq2 = dq.to_floats();
  r.dk2 = dk.to_floats();
  r.dv2 = dv.to_floats();
  backward(true);
  r.dq3 = dq.to_floats();
  r.dk3 = dk.to_floats();
  r.dv3 = dv.to_floats();
  return r;
}

}  // namespace dflash::test

#endif  // DFLASH_CUDA
