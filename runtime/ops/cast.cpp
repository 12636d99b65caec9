// cast: a float tensor converted to another float dtype (always a new tensor), differentiable:
// the gradient flows back converted to the input gradient's dtype and accumulates there.
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

namespace {
constexpr const char* kOp = "cast";
}  // namespace

Tensor cast(const Tensor& x, DType to) {
  OpScope op(kOp);
  check_same_device(kOp, {&x});
  const DType from = x.dtype();
  if (on_cpu()) {
    DF_CHECK(from == DType::f32 && to == DType::f32,
             kOp << ": " << x.describe() << " to " << dtype_name(to)
                 << " on the CPU, but the CPU backend computes in f32 throughout: only f32 -> f32 (a copy) is "
                    "supported there; bf16 tensors exist on CUDA devices only");
  } else {
    auto is_float = [](DType t) { return t == DType::f32 || t == DType::bf16; };
    DF_CHECK(is_float(from) && is_float(to), kOp << ": " << x.describe() << " to " << dtype_name(to)
                                                 << ": only f32 and bf16 convert into each other on CUDA");
  }

  Tensor y = Tensor::empty(x.shape(), to);  // x's shape
  note_io({&x}, {&y});
  if (on_cpu()) {
    const void* src = x.raw();
    void* dst = y.raw();
    const size_t bytes = x.nbytes();
    ctx().launch([=] { kernels::cpu::copy_bytes(dst, src, bytes); });
  } else {
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::cast(x.raw(), bf16(x), y.raw(), bf16(y), x.numel(), s);
#else
    no_cuda_kernel(kOp);
#endif
  }

  if (needs_grad({&x})) {
    // dx (grad_dtype(x)) += dy (y's gradient dtype), summed in f32 and rounded once to dx's dtype.
    record_node(kOp, {&y}, [x = grad_key(x)](NodeGrads& g) {
      Tensor dy = g.out(0), dx = g.in(x);
      if (dy.defined() && dx.defined()) accumulate_(dx, dy);
    });
  }
  return y;
}

}  // namespace dflash::ops
