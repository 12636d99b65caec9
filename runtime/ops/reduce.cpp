// sum and mean over all elements, to a one-element tensor (of x's dtype; f32 on the CPU).
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

namespace {
Tensor reduce(const char* name, const Tensor& x, float scale) {
  OpScope op(name);
  check_same_device(name, {&x});
  check_float_dtype(name, x, "x");
  Tensor y = Tensor::empty({1}, x.dtype());
  int64_t n = x.numel();
  if (on_cpu()) {
    const float* px = f32(x);
    float* py = f32(y);
    if (scale == 1.0f) {
      ctx().launch([=] { kernels::cpu::sum_forward(px, n, py); });
    } else {
      ctx().launch([=] {
        kernels::cpu::sum_forward(px, n, py);
        py[0] *= scale;
      });
    }
  } else {
#ifdef DFLASH_CUDA
    // Per-range partial sums in double (the f32 tensor only provides the bytes), added in a fixed order.
    Tensor partials = Tensor::empty({2 * kernels::cuda::sum_partials(n)}, DType::f32);
    if (void* s = ctx().cuda_stream_for_launch())
      kernels::cuda::sum_forward(x.raw(), bf16(x), n, scale, static_cast<double*>(partials.raw()), y.raw(), s);
#endif
  }
  if (needs_grad({&x})) {
    record_node(name, {&y}, [x, n, scale](NodeGrads& g) {
      Tensor dy = g.out(0), dx = g.in(x);
      if (!dy.defined() || !dx.defined()) return;
      if (on_cpu()) {
        const float* pdy = f32(dy);
        float* pdx = f32(dx);
        ctx().launch([=] { kernels::cpu::sum_backward(pdy, scale, pdx, n); });
        return;
      }
#ifdef DFLASH_CUDA
      if (void* s = ctx().cuda_stream_for_launch())
        kernels::cuda::sum_backward(dy.raw(), bf16(dy), scale, dx.raw(), bf16(dx), n, s);
#endif
    });
  }
  return y;
}
}  // namespace

Tensor sum(const Tensor& x) { return reduce("sum", x, 1.0f); }
Tensor mean(const Tensor& x) { return reduce("mean", x, x.numel() ? 1.0f / float(x.numel()) : 0.0f); }

}  // namespace dflash::ops
