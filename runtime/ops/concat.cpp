// concat of two tensors along one dim: a byte copy for any dtype; the backward (f32; on CUDA also
// bf16) splits the gradient and accumulates each part into its input. concat_all: many parts in one
// pass, forward-only; split_columns, its inverse along the last dim, likewise.
#include <vector>

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

Tensor concat_all(const std::vector<Tensor>& parts, int dim, const Tensor& into) {
  OpScope op("concat");
  DF_CHECK(!parts.empty(), "concat_all: no parts; pass at least one tensor");
  const Tensor& first = parts[0];
  std::vector<const Tensor*> ptrs;
  for (const Tensor& p : parts) ptrs.push_back(&p);
  check_same_device("concat_all", ptrs);
  const int nd = first.ndim(), d = dim < 0 ? dim + nd : dim;
  DF_CHECK(nd >= 1 && 0 <= d && d < nd, "concat_all: dim " << dim << " is out of range for the " << nd
                                                           << "-D part " << first.describe() << "; use a dim in ["
                                                           << -nd << ", " << nd - 1 << "]");
  Shape out_shape = first.shape();
  out_shape.d[d] = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& p = parts[i];
    DF_CHECK(p.dtype() == first.dtype() && p.ndim() == nd,
             "concat_all: part " << i << " is " << p.describe() << " and part 0 is " << first.describe()
                                 << "; every part must have part 0's dtype and number of dims");
    for (int j = 0; j < nd; ++j)
      DF_CHECK(j == d || p.dim(j) == first.dim(j),
               "concat_all: part " << i << " " << p.describe() << " and part 0 " << first.describe() << " differ in dim "
                                   << j << "; they must agree on every dim except the concatenated one (" << d << ")");
    out_shape.d[d] += p.dim(d);
  }
  bool grad = false;
  for (const Tensor* p : ptrs) grad = grad || needs_grad({p});
  DF_CHECK(!grad, "concat_all: gradient requested through its parts; it is forward-only, so freeze them, "
                              "run it under NoGrad, or chain the two-part concat, which has a backward");
  int64_t outer = 1;  // part i viewed as (outer, inner_i) bytes; the output row is every part's row in order
  for (int j = 0; j < d; ++j) outer *= first.dim(j);
  const size_t esize = dtype_size(first.dtype());
  std::vector<size_t> inner;
  size_t row = 0;
  for (const Tensor& p : parts) {
    size_t bytes = esize;
    for (int j = d; j < nd; ++j) bytes *= size_t(p.dim(j));
    inner.push_back(bytes);
    row += bytes;
  }
  if (into.defined()) {
    DF_CHECK(into.dtype() == first.dtype() && into.numel() == out_shape.numel() && into.device() == first.device(),
             "concat_all: the destination " << into.describe() << " on " << into.device().str()
                                            << " must have the dtype, size and device of the result "
                                            << dtype_name(first.dtype()) << out_shape.str() << " on "
                                            << first.device().str());
  }
  Tensor y = into.defined() ? into : Tensor::empty(out_shape, first.dtype());  // (outer, sum of inner_i)
  size_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    note_io({&parts[i]}, {&parts[i]});  // this part's copy reads it and writes as many bytes of y
    copy_rows(parts[i], 0, inner[i], y, offset, row, inner[i], outer);
    offset += inner[i];
  }
  return y;
}

std::vector<Tensor> split_columns(const Tensor& x, const std::vector<int64_t>& widths) {
  constexpr const char* kOp = "split_columns";
  OpScope op(kOp);
  DF_CHECK(x.ndim() >= 1, kOp << ": x is " << x.describe() << "; it needs at least one dim to split");
  DF_CHECK(!widths.empty() && widths.size() <= size_t(kMaxSplitColumns),
           kOp << ": " << widths.size() << " parts asked of " << x.describe() << "; give 1 to " << kMaxSplitColumns);
  int64_t total = 0;
  for (int64_t w : widths) {
    DF_CHECK(w >= 1, kOp << ": a part of width " << w << " asked of " << x.describe() << "; every width must be >= 1");
    total += w;
  }
  DF_CHECK(total == x.shape().last(), kOp << ": the widths add up to " << total << " but " << x.describe() << " has "
                                          << x.shape().last() << " columns; they must add up to its last dim");
  DF_CHECK(!needs_grad({&x}), kOp << ": gradient requested through " << x.describe()
                                  << "; it is forward-only, so freeze x or run it under NoGrad");
  const int64_t outer = x.numel() / total;
  const size_t esize = dtype_size(x.dtype());
  std::vector<Tensor> parts;
  std::vector<void*> dst;
  std::vector<size_t> inner;
  for (int64_t w : widths) {
    Shape s = x.shape();
    s.d[s.ndim - 1] = w;
    parts.push_back(Tensor::empty(s, x.dtype()));  // (..., w)
    dst.push_back(parts.back().raw());
    inner.push_back(size_t(w) * esize);
  }
  note_io({&x}, {&x});  // the parts hold x's bytes
  const void* px = x.raw();
#ifdef DFLASH_CUDA
  static_assert(kMaxSplitColumns <= kernels::cuda::kMaxSplitParts, "split_columns: the CUDA kernel takes fewer parts");
#endif
  if (on_cpu()) {
    ctx().launch([=] { kernels::cpu::split_forward(px, outer, dst, inner); });
  } else {
#ifdef DFLASH_CUDA
    if (void* st = ctx().cuda_stream_for_launch())
      kernels::cuda::split_forward(px, outer, dst.data(), inner.data(), int(dst.size()), st);
#endif
  }
  return parts;
}

}  // namespace dflash::ops
