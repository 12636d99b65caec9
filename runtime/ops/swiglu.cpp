// swiglu: silu(gate) * up elementwise (the MLP's gated activation), with its backward.
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"

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
  if (!on_cpu()) no_cuda_kernel("swiglu");
  check_dtype("swiglu", gate, DType::f32, "gate");

  int64_t n = gate.numel();
  Tensor y = Tensor::empty(gate.shape(), DType::f32);  // same shape as gate and up
  const float *pg = f32(gate), *pu = f32(up);
  float* py = f32(y);
  ctx().launch([=] { kernels::cpu::swiglu_forward(pg, pu, py, n); });

  if (needs_grad({&gate, &up})) {
    record_node("swiglu", {&y}, [gate, up, n](NodeGrads& g) {
      const float* dy = f32(g.out(0));
      float* dg = f32(g.in(gate));
      float* du = f32(g.in(up));
      if (!dy || (!dg && !du)) return;
      const float *pg = f32(gate), *pu = f32(up);
      ctx().launch([=] { kernels::cpu::swiglu_backward(pg, pu, dy, dg, du, n); });
    });
  }
  return y;
}

}  // namespace dflash::ops
