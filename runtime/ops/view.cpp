// Views: reshape and row ranges share storage; their backward hands the gradient on to the
// matching view of the base's gradient (reshape: the gradient itself when the base has none yet).
#include "runtime/ops/common.h"

namespace dflash {
using namespace ops::detail;

Tensor Tensor::reshape(const Shape& shape) const {
  OpScope op("reshape");
  DF_CHECK(shape.numel() == numel(), "reshape: " << describe() << " has " << numel() << " elements but "
                                                 << shape.str() << " holds " << shape.numel());
  Tensor base = *this;
  Tensor v = view_of(base, shape);
  if (needs_grad({&base})) {
    // The rule reads no value: a key only. The view's gradient becomes the base's (a view of the
    // same buffer, no zero fill, no copy) when nothing has reached the base yet; else it is added.
    record_node("reshape", {&v}, [base = grad_key(base)](NodeGrads& g) {
      Tensor dy = g.out(0);
      if (dy.defined()) g.pass(base, view_of(dy, base.shape()));
    });
  }
  return v;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  OpScope op("rows");
  DF_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= dim(0),
           "rows(" << begin << ", " << end << ") on " << describe() << ": need 0 <= begin <= end <= "
                   << (ndim() ? dim(0) : 0));
  Shape s = shape();
  s.d[0] = end - begin;
  size_t row_bytes = size_t(shape().numel() / (dim(0) ? dim(0) : 1)) * dtype_size(dtype());
  Tensor base = *this;
  Tensor v = view_of(base, s, size_t(begin) * row_bytes);
  if (needs_grad({&base})) {
    record_node("rows", {&v}, [base, begin, end, s, row_bytes](NodeGrads& g) {
      Tensor dy = g.out(0);
      if (Tensor db = g.in(base); db.defined()) {
        size_t grad_row_bytes = row_bytes / dtype_size(base.dtype()) * dtype_size(db.dtype());
        ops::accumulate_(view_of(db, s, size_t(begin) * grad_row_bytes), dy);
      }
    });
  }
  return v;
}

}  // namespace dflash
