// sum and mean over all elements, to a one-element tensor.
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"

namespace dflash::ops {
using namespace detail;

namespace {
Tensor reduce(const char* name, const Tensor& x, float scale) {
  OpScope op(name);
  check_same_device(name, {&x});
  if (!on_cpu()) no_cuda_kernel(name);
  check_dtype(name, x, DType::f32, "x");
  Tensor y = Tensor::empty({1}, DType::f32);
  const float* px = f32(x);
  float* py = f32(y);
  int64_t n = x.numel();
  if (scale == 1.0f) {
    ctx().launch([=] { kernels::cpu::sum_forward(px, n, py); });
  } else {
    ctx().launch([=] {
      kernels::cpu::sum_forward(px, n, py);
      py[0] *= scale;
    });
  }
  if (needs_grad({&x})) {
    record_node(name, {&y}, [x, n, scale](NodeGrads& g) {
      const float* dy = f32(g.out(0));
      if (float* dx = f32(g.in(x))) ctx().launch([=] { kernels::cpu::sum_backward(dy, scale, dx, n); });
    });
  }
  return y;
}
}  // namespace

Tensor sum(const Tensor& x) { return reduce("sum", x, 1.0f); }
Tensor mean(const Tensor& x) { return reduce("mean", x, x.numel() ? 1.0f / float(x.numel()) : 0.0f); }

}  // namespace dflash::ops
