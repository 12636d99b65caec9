// add, mul and scale, with their backward rules.
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"

namespace dflash::ops {
using namespace detail;

namespace {
void check_binary(const char* op, const Tensor& a, const Tensor& b) {
  check_same_device(op, {&a, &b});
  DF_CHECK(a.shape() == b.shape(), op << ": shapes differ: " << a.describe() << " and " << b.describe()
                                      << "; " << op << " takes two tensors of the same shape (no broadcasting)");
  DF_CHECK(a.dtype() == b.dtype(), op << ": dtypes differ: " << a.describe() << " and " << b.describe());
  if (on_cpu()) check_dtype(op, a, DType::f32, "a");
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  OpScope op("add");
  check_binary("add", a, b);
  if (!on_cpu()) no_cuda_kernel("add");
  Tensor y = Tensor::empty(a.shape(), a.dtype());
  const float *pa = f32(a), *pb = f32(b);
  float* py = f32(y);
  int64_t n = a.numel();
  ctx().launch([=] { kernels::cpu::add_forward(pa, pb, py, n); });
  if (needs_grad({&a, &b})) {
    record_node("add", {&y}, [a, b](NodeGrads& g) {
      Tensor dy = g.out(0);
      if (Tensor da = g.in(a); da.defined()) accumulate_(da, dy);
      if (Tensor db = g.in(b); db.defined()) accumulate_(db, dy);
    });
  }
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  OpScope op("mul");
  check_binary("mul", a, b);
  if (!on_cpu()) no_cuda_kernel("mul");
  Tensor y = Tensor::empty(a.shape(), a.dtype());
  const float *pa = f32(a), *pb = f32(b);
  float* py = f32(y);
  int64_t n = a.numel();
  ctx().launch([=] { kernels::cpu::mul_forward(pa, pb, py, n); });
  if (needs_grad({&a, &b})) {
    record_node("mul", {&y}, [a, b, n](NodeGrads& g) {
      const float* dy = f32(g.out(0));
      float* da = f32(g.in(a));
      float* db = f32(g.in(b));
      const float *pa = f32(a), *pb = f32(b);
      ctx().launch([=] { kernels::cpu::mul_backward(pa, pb, dy, da, db, n); });
    });
  }
  return y;
}

Tensor scale(const Tensor& a, float s) {
  OpScope op("scale");
  check_same_device("scale", {&a});
  if (!on_cpu()) no_cuda_kernel("scale");
  check_dtype("scale", a, DType::f32, "a");
  Tensor y = Tensor::empty(a.shape(), a.dtype());
  const float* pa = f32(a);
  float* py = f32(y);
  int64_t n = a.numel();
  ctx().launch([=] { kernels::cpu::scale_forward(pa, s, py, n); });
  if (needs_grad({&a})) {
    record_node("scale", {&y}, [a, s, n](NodeGrads& g) {
      const float* dy = f32(g.out(0));
      if (float* da = f32(g.in(a))) ctx().launch([=] { kernels::cpu::scale_backward(dy, s, da, n); });
    });
  }
  return y;
}

}  // namespace dflash::ops
