// rmsnorm over the last dim: y = x / sqrt(mean(x^2) + eps) * weight. Per-token ([rows, H]) and
// per-head ([rows, heads, hd] with weight [hd]) norms are the same op. rstd [rows] is saved for backward.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

Tensor rmsnorm(const Tensor& x, const Tensor& weight, float eps) {
  OpScope op("rmsnorm");
  check_same_device("rmsnorm", {&x, &weight});
  DF_CHECK(x.ndim() >= 1, "rmsnorm: x is " << x.describe() << "; it must have at least one dim (the normalised one)");
  check_ndim("rmsnorm", weight, 1, "weight");
  DF_CHECK(weight.dim(0) == x.shape().last(),
           "rmsnorm: weight " << weight.describe() << " has " << weight.dim(0) << " entries but x " << x.describe()
                              << " normalises a last dim of " << x.shape().last()
                              << "; the weight must match x's last dim (for a per-head norm, shape x as "
                                 "[..., heads, hd] and pass weight [hd])");
  DF_CHECK(std::isfinite(eps) && eps >= 0.0f,
           "rmsnorm: eps = " << eps << "; it must be finite and >= 0 (rms_norm_eps is typically 1e-6)");
  DF_CHECK(x.dtype() == weight.dtype(),
           "rmsnorm: x is " << x.describe() << " and weight is " << weight.describe() << "; both must have the same dtype");
  check_float_dtype("rmsnorm", x, "x");

  int64_t D = x.shape().last(), rows = D ? x.numel() / D : 0;
  bool grad = needs_grad({&x, &weight});
  Tensor y = Tensor::empty(x.shape(), x.dtype());                    // (..., D)
  Tensor rstd = grad ? Tensor::empty({rows}, DType::f32) : Tensor();  // (rows), only for backward
  note_io({&x, &weight}, {&y, &rstd});
  if (on_cpu()) {
    const float *px = f32(x), *pw = f32(weight);
    float *py = f32(y), *pr = f32(rstd);
    ctx().launch([=] { kernels::cpu::rmsnorm_forward(px, pw, py, pr, rows, D, eps); });
  } else {
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch())
      kernels::cuda::rmsnorm_forward(x.raw(), weight.raw(), y.raw(), bf16(x), f32(rstd), rows, D, eps, s);
#endif
  }

  if (grad) {
    record_node("rmsnorm", {&y}, [x, weight, rstd, rows, D](NodeGrads& g) {
      Tensor dy = g.out(0);
      if (!dy.defined()) return;
      auto [dx, dx_fresh] = g.in_overwritable(x);  // fresh: written, not added to (no zero fill)
      Tensor dw = g.in(weight);
      if (!dx.defined() && !dw.defined()) return;
      const Tensor none;
      note_io({&x, &weight, &rstd, &dy}, {dx_fresh ? &dx : &none}, {dx_fresh ? &none : &dx, &dw});
      if (on_cpu()) {
        const float *px = f32(x), *pw = f32(weight), *pr = f32(rstd), *pdy = f32(dy);
        float *pdx = f32(dx), *pdw = f32(dw);
        ctx().launch([=, fresh = dx_fresh] { kernels::cpu::rmsnorm_backward(px, pw, pr, pdy, pdx, pdw, rows, D, fresh); });
        return;
      }
#ifdef DFLASH_CUDA
      // (partials, D): the weight gradient's per-row-range sums, added up in a fixed order.
      Tensor partials = dw.defined() ? Tensor::empty({kernels::cuda::rmsnorm_dw_partials(rows, D), D}, DType::f32) : Tensor();
      if (void* s = ctx().cuda_stream_for_launch())
        kernels::cuda::rmsnorm_backward(x.raw(), weight.raw(), bf16(x), f32(rstd), dy.raw(), bf16(dy), raw(dx), bf16(dx),
                                        raw(dw), bf16(dw), f32(partials), rows, D, s, dx_fresh);
#endif
    });
  }
  return y;
}

}  // namespace dflash::ops
