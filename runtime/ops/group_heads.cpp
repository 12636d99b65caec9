// drop_group_heads and with_group_heads: rows taken in groups of `period` (DFlash blocks), without
// or with back in place each group's first row (a block's slot 0, whose loss weight is 0 by
// definition, so its logits are never needed). Byte copies, any dtype.
#include <cstring>

#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

namespace {
void fill_rows(const Tensor& dst, size_t pitch, size_t width, int64_t rows, uint8_t byte) {
  char* d = static_cast<char*>(dst.raw());
  if (on_cpu()) {
    ctx().launch([=] {
      for (int64_t r = 0; r < rows; ++r) std::memset(d + r * pitch, byte, width);
    });
    return;
  }
#ifdef DFLASH_CUDA
  if (void* st = ctx().cuda_stream_for_launch()) kernels::cuda::strided_fill(d, pitch, width, rows, byte, st);
#endif
}

// groups and the bytes of one row of t, whose dim 0 holds `rows_per_group` rows per group.
std::pair<int64_t, size_t> group_geometry(const char* op, const Tensor& t, int64_t rows_per_group, int64_t period) {
  DF_CHECK(period >= 2, op << ": period " << period << " must be at least 2 (a group keeps period - 1 rows)");
  DF_CHECK(t.ndim() >= 1 && t.dim(0) % rows_per_group == 0,
           op << ": " << t.describe() << " must hold whole groups of " << rows_per_group << " rows in dim 0");
  const int64_t rows = t.dim(0);
  const size_t row_bytes = rows ? t.nbytes() / size_t(rows) : 0;
  return {rows / rows_per_group, row_bytes};
}

// y (groups * (period - 1) rows) into x (groups * period rows); head rows set to `byte`.
void restore(const Tensor& y, const Tensor& x, int64_t groups, size_t row_bytes, int64_t period, uint8_t byte) {
  note_io({&y}, {&x});
  const size_t keep = size_t(period - 1) * row_bytes, pitch = size_t(period) * row_bytes;
  copy_rows(y, 0, keep, x, row_bytes, pitch, keep, groups);
  fill_rows(x, pitch, row_bytes, groups, byte);
}
}  // namespace

Tensor drop_group_heads(const Tensor& x, int64_t period) {
  OpScope op("drop_group_heads");
  auto [groups, row_bytes] = group_geometry("drop_group_heads", x, period, period);
  Shape s = x.shape();
  s.d[0] = groups * (period - 1);
  Tensor y = Tensor::empty(s, x.dtype());  // (groups * (period - 1), ...)
  note_io({&y}, {&y});  // reads as many bytes of x as it writes
  const size_t keep = size_t(period - 1) * row_bytes;
  copy_rows(x, row_bytes, size_t(period) * row_bytes, y, 0, keep, keep, groups);
  if (needs_grad({&x})) {
    record_node("drop_group_heads", {&y}, [x = grad_key(x), period, groups, row_bytes](NodeGrads& g) {
      Tensor dy = g.out(0);
      if (!dy.defined()) return;
      auto [dx, fresh] = g.in_overwritable(x);
      if (!dx.defined()) return;
      if (fresh && dx.dtype() == dy.dtype()) {
        restore(dy, dx, groups, row_bytes, period, 0);  // the dropped rows' gradient is 0
        return;
      }
      Tensor full = Tensor::empty(x.shape(), dy.dtype());
      restore(dy, full, groups, dy.nbytes() / size_t(dy.dim(0) ? dy.dim(0) : 1), period, 0);
      if (fresh) fill_(dx, 0.0f);
      accumulate_(dx, full);
    });
  }
  return y;
}

Tensor with_group_heads(const Tensor& y, int64_t period, uint8_t fill_byte) {
  OpScope op("with_group_heads");
  DF_CHECK(!needs_grad({&y}), "with_group_heads: " << y.describe()
                                                   << " requires grad, but the op gives it none; use it for per-row "
                                                      "results (no gradient) or run it under NoGrad");
  auto [groups, row_bytes] = group_geometry("with_group_heads", y, period - 1, period);
  Shape s = y.shape();
  s.d[0] = groups * period;
  Tensor x = Tensor::empty(s, y.dtype());  // (groups * period, ...)
  restore(y, x, groups, row_bytes, period, fill_byte);
  return x;
}

}  // namespace dflash::ops
