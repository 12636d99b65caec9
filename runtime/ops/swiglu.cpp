// swiglu: silu(gate) * up elementwise (the MLP's gated activation), with its backward; and the
// forward-only swiglu_halves over one [.., 2I] buffer holding gate and up side by side.
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  OpScope op("swiglu");
  check_same_device("swiglu", {&gate, &up});
  DF_CHECK(gate.shape() == up.shape(), "swiglu: gate " << gate.describe() << " and up " << up.describe()
                                                       << " differ in shape; both must be the same shape "
                                                          "(the outputs of gate_proj and up_proj)");
  DF_CHECK(gate.dtype() == up.dtype(),
           "swiglu: gate is " << gate.describe() << " and up is " << up.describe() << "; both must have the same dtype");
  check_float_dtype("swiglu", gate, "gate");

  int64_t n = gate.numel();
  Tensor y = Tensor::empty(gate.shape(), gate.dtype());  // same shape as gate and up
  note_io({&gate, &up}, {&y});
  if (on_cpu()) {
    const float *pg = f32(gate), *pu = f32(up);
    float* py = f32(y);
    ctx().launch([=] { kernels::cpu::swiglu_forward(pg, pu, py, n); });
  } else {
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch())
      kernels::cuda::swiglu_forward(gate.raw(), up.raw(), y.raw(), bf16(gate), n, s);
#endif
  }

  if (needs_grad({&gate, &up})) {
    record_node("swiglu", {&y}, [gate, up, n](NodeGrads& g) {
      Tensor dy = g.out(0);
      if (!dy.defined()) return;
      // Fresh gradients (the gate and up projections' outputs, usually) are written, not added to:
      // no zero fill, no read; and, when nothing else holds gate and up, written over them (each
      // element is read before it is written).
      auto [dg, dg_fresh] = g.in_overwritable(gate, gate);
      auto [du, du_fresh] = g.in_overwritable(up, up);
      if (!dg.defined() && !du.defined()) return;
      const Tensor none;
      note_io({&gate, &up, &dy}, {dg_fresh ? &dg : &none, du_fresh ? &du : &none},
              {dg_fresh ? &none : &dg, du_fresh ? &none : &du});
      if (on_cpu()) {
        const float *pg = f32(gate), *pu = f32(up), *pdy = f32(dy);
        float *pdg = f32(dg), *pdu = f32(du);
        ctx().launch([=] { kernels::cpu::swiglu_backward(pg, pu, pdy, pdg, pdu, n, dg_fresh, du_fresh); });
        return;
      }
#ifdef DFLASH_CUDA
      if (void* s = ctx().cuda_stream_for_launch())
        kernels::cuda::swiglu_backward(gate.raw(), up.raw(), bf16(gate), dy.raw(), bf16(dy), raw(dg), bf16(dg), raw(du),
                                       bf16(du), n, s, dg_fresh, du_fresh);
#endif
    });
  }
  return y;
}

Tensor swiglu_halves(const Tensor& gu) {
  OpScope op("swiglu_halves");
  check_float_dtype("swiglu_halves", gu, "gu");
  DF_CHECK(gu.ndim() >= 1 && gu.shape().last() % 2 == 0,
           "swiglu_halves: gu is " << gu.describe() << "; its last dim must be even (gate's I columns, then up's)");
  DF_CHECK(!needs_grad({&gu}), "swiglu_halves: gu requires grad, but this op is forward-only (no backward is recorded); "
                               "fix: call it under NoGrad for a frozen model, or use ops::swiglu where gradients flow");
  Shape out_shape = gu.shape();
  out_shape.d[out_shape.ndim - 1] /= 2;
  const int64_t I = out_shape.last(), rows = I ? gu.numel() / (2 * I) : 0;
  Tensor y = Tensor::empty(out_shape, gu.dtype());  // (..., I)
  note_io({&gu}, {&y});
  if (on_cpu()) {
    const float* pg = f32(gu);
    float* py = f32(y);
    ctx().launch([=] {
      for (int64_t r = 0; r < rows; ++r) kernels::cpu::swiglu_forward(pg + 2 * I * r, pg + 2 * I * r + I, py + I * r, I);
    });
  } else {
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::swiglu_halves_forward(gu.raw(), y.raw(), bf16(gu), rows, I, s);
#endif
  }
  return y;
}

}  // namespace dflash::ops
