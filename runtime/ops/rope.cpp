// rope: rotate-half rotary embedding (HF Llama/Qwen) of x [..., heads, hd] at one i32 position per
// row of heads; backward is the inverse rotation. Positions and inv_freq carry no gradient.
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  OpScope op("rope");
  check_same_device("rope", {&x, &positions, &inv_freq});
  DF_CHECK(x.ndim() >= 2, "rope: x is " << x.describe() << "; it must be [..., heads, hd]");
  int64_t heads = x.dim(-2), hd = x.dim(-1), rows = 1;
  for (int i = 0; i < x.ndim() - 2; ++i) rows *= x.dim(i);
  DF_CHECK(hd >= 2 && hd % 2 == 0, "rope: x " << x.describe() << " has head dim " << hd
                                              << "; rotate-half needs an even head dim >= 2");
  check_dtype("rope", positions, DType::i32, "positions");
  check_dtype("rope", inv_freq, DType::f32, "inv_freq");
  DF_CHECK(inv_freq.ndim() == 1 && inv_freq.dim(0) == hd / 2,
           "rope: inv_freq is " << inv_freq.describe() << " but x " << x.describe() << " has head dim " << hd
                                << "; inv_freq must be [" << hd / 2 << "] (one frequency per rotated pair)");
  DF_CHECK(positions.numel() == rows,
           "rope: positions " << positions.describe() << " hold " << positions.numel() << " positions but x "
                              << x.describe() << " has " << rows << " rows of " << heads
                              << " heads; give one position per row, e.g. x [B, L, heads, hd] with positions [B, L]");
  DF_CHECK(!needs_grad({&inv_freq}),
           "rope: inv_freq " << inv_freq.describe() << " requires grad, but rope does not differentiate its "
                             << "frequencies; freeze inv_freq (set_requires_grad(false)) or compute it under NoGrad");
  check_float_dtype("rope", x, "x");

  Tensor y = Tensor::empty(x.shape(), x.dtype());  // (rows, heads, hd)
  const float* pf = f32(inv_freq);
  const int32_t* pp = i32(positions);
  note_io({&x}, {&y});
  if (on_cpu()) {
    const float* px = f32(x);
    float* py = f32(y);
    ctx().launch([=] { kernels::cpu::rope_forward(px, pp, pf, py, rows, heads, hd); });
  } else {
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch())
      kernels::cuda::rope_forward(x.raw(), pp, pf, y.raw(), bf16(x), rows, heads, hd, s);
#endif
  }

  if (needs_grad({&x})) {
    record_node("rope", {&y}, [x = grad_key(x), positions, inv_freq, rows, heads, hd](NodeGrads& g) {
      Tensor dy = g.out(0);
      if (!dy.defined()) return;
      auto [dx, fresh] = g.in_overwritable(x);  // fresh: written, not added to (no zero fill)
      if (!dx.defined()) return;
      const float* pf = f32(inv_freq);
      const int32_t* pp = i32(positions);
      const Tensor none;
      note_io({&dy}, {fresh ? &dx : &none}, {fresh ? &none : &dx});
      if (on_cpu()) {
        const float* pdy = f32(dy);
        float* pdx = f32(dx);
        ctx().launch([=, fresh = fresh] { kernels::cpu::rope_backward(pdy, pp, pf, pdx, rows, heads, hd, fresh); });
        return;
      }
#ifdef DFLASH_CUDA
      if (void* s = ctx().cuda_stream_for_launch())
        kernels::cuda::rope_backward(dy.raw(), bf16(dy), pp, pf, dx.raw(), bf16(dx), rows, heads, hd, s, fresh);
#endif
    });
  }
  return y;
}

}  // namespace dflash::ops
