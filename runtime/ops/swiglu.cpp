// swiglu: silu(gate) * up elementwise (the MLP's gated activation), with its backward.
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

}  // namespace dflash::ops
