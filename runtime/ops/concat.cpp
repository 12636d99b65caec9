// concat of two tensors along one dim: a byte copy for any dtype; the backward (f32; on CUDA also
// bf16) splits the gradient and accumulates each part into its input.
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

Tensor concat(const Tensor& a, const Tensor& b, int dim) {
  OpScope op("concat");
  check_same_device("concat", {&a, &b});
  DF_CHECK(a.dtype() == b.dtype(),
           "concat: a is " << a.describe() << " and b is " << b.describe() << "; both must have the same dtype");
  DF_CHECK(a.ndim() == b.ndim() && a.ndim() >= 1,
           "concat: a " << a.describe() << " and b " << b.describe()
                        << " must have the same number of dims (at least 1); reshape one of them");
  int nd = a.ndim(), d = dim < 0 ? dim + nd : dim;
  DF_CHECK(0 <= d && d < nd, "concat: dim " << dim << " is out of range for " << nd << "-D tensors "
                                            << a.describe() << " and " << b.describe() << "; use a dim in ["
                                            << -nd << ", " << nd - 1 << "]");
  for (int i = 0; i < nd; ++i)
    DF_CHECK(i == d || a.dim(i) == b.dim(i),
             "concat: a " << a.describe() << " and b " << b.describe() << " differ in dim " << i
                          << "; they must agree on every dim except the concatenated one (" << d << ")");
  bool grad = needs_grad({&a, &b});
  if (on_cpu())
    DF_CHECK(!grad || a.dtype() == DType::f32,
             "concat: gradient requested through " << a.describe() << " and " << b.describe()
                                                   << "; only f32 concatenation is differentiable, so freeze the "
                                                      "inputs or run it under NoGrad");
  else
    DF_CHECK(!grad || a.dtype() == DType::f32 || a.dtype() == DType::bf16,
             "concat: gradient requested through " << a.describe() << " and " << b.describe()
                                                   << "; only f32 or bf16 concatenation is differentiable, so freeze "
                                                      "the inputs or run it under NoGrad");

  int64_t outer = 1, a_elems = 1, b_elems = 1;  // a viewed as (outer, a_elems), b as (outer, b_elems)
  for (int i = 0; i < d; ++i) outer *= a.dim(i);
  for (int i = d; i < nd; ++i) {
    a_elems *= a.dim(i);
    b_elems *= b.dim(i);
  }
  Shape out_shape = a.shape();
  out_shape.d[d] = a.dim(d) + b.dim(d);
  Tensor y = Tensor::empty(out_shape, a.dtype());  // (outer, a_elems + b_elems)
  size_t esize = dtype_size(a.dtype());
  const void *pa = a.raw(), *pb = b.raw();
  void* py = y.raw();
  note_io({&a, &b}, {&y});
  if (on_cpu()) {
    ctx().launch([=] { kernels::cpu::concat_forward(pa, pb, py, outer, size_t(a_elems) * esize, size_t(b_elems) * esize); });
  } else {
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch())
      kernels::cuda::concat_forward(pa, pb, py, outer, size_t(a_elems) * esize, size_t(b_elems) * esize, s);
#endif
  }

  if (grad) {
    record_node("concat", {&y}, [a = grad_key(a), b = grad_key(b), outer, a_elems, b_elems](NodeGrads& g) {
      Tensor dy = g.out(0), da = g.in(a), db = g.in(b);
      if (!dy.defined() || (!da.defined() && !db.defined())) return;
      note_io({&dy}, {}, {&da, &db});
      if (on_cpu()) {
        const float* pdy = f32(dy);
        float *pda = f32(da), *pdb = f32(db);
        ctx().launch([=] { kernels::cpu::concat_backward(pdy, pda, pdb, outer, a_elems, b_elems); });
        return;
      }
#ifdef DFLASH_CUDA
      if (void* s = ctx().cuda_stream_for_launch())
        kernels::cuda::concat_backward(dy.raw(), bf16(dy), raw(da), bf16(da), raw(db), bf16(db), outer, a_elems, b_elems,
                                       s);
#endif
    });
  }
  return y;
}

}  // namespace dflash::ops
