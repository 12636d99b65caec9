// add, mul and scale, with their backward rules.
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

namespace {
void check_binary(const char* op, const Tensor& a, const Tensor& b) {
  check_same_device(op, {&a, &b});
  DF_CHECK(a.shape() == b.shape(), op << ": shapes differ: " << a.describe() << " and " << b.describe()
                                      << "; " << op << " takes two tensors of the same shape (no broadcasting)");
  DF_CHECK(a.dtype() == b.dtype(), op << ": dtypes differ: " << a.describe() << " and " << b.describe());
  check_float_dtype(op, a, "a");
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  OpScope op("add");
  check_binary("add", a, b);
  Tensor y = Tensor::empty(a.shape(), a.dtype());
  int64_t n = a.numel();
  note_io({&a, &b}, {&y});
  if (on_cpu()) {
    const float *pa = f32(a), *pb = f32(b);
    float* py = f32(y);
    ctx().launch([=] { kernels::cpu::add_forward(pa, pb, py, n); });
  } else {
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::add_forward(a.raw(), b.raw(), y.raw(), bf16(a), n, s);
#endif
  }
  if (needs_grad({&a, &b})) {
    // The rule reads neither input: keys only, so both activations can be freed early. The
    // first input takes dy itself as its gradient when it has none yet; the second gets a copy.
    record_node("add", {&y}, [a = grad_key(a), b = grad_key(b)](NodeGrads& g) {
      Tensor dy = g.out(0);
      if (!dy.defined()) return;
      g.pass(a, dy);
      if (auto [db, fresh] = g.in_overwritable(b); db.defined()) {
        if (fresh) copy_(db, dy);
        else accumulate_(db, dy);
      }
    });
  }
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  OpScope op("mul");
  check_binary("mul", a, b);
  Tensor y = Tensor::empty(a.shape(), a.dtype());
  int64_t n = a.numel();
  note_io({&a, &b}, {&y});
  if (on_cpu()) {
    const float *pa = f32(a), *pb = f32(b);
    float* py = f32(y);
    ctx().launch([=] { kernels::cpu::mul_forward(pa, pb, py, n); });
  } else {
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::mul_forward(a.raw(), b.raw(), y.raw(), bf16(a), n, s);
#endif
  }
  if (needs_grad({&a, &b})) {
    record_node("mul", {&y}, [a, b, n](NodeGrads& g) {
      if (on_cpu()) {
        const float* dy = f32(g.out(0));
        float* da = f32(g.in(a));
        float* db = f32(g.in(b));
        const float *pa = f32(a), *pb = f32(b);
        ctx().launch([=] { kernels::cpu::mul_backward(pa, pb, dy, da, db, n); });
        return;
      }
#ifdef DFLASH_CUDA
      Tensor dy = g.out(0), da = g.in(a), db = g.in(b);
      if (!dy.defined() || (!da.defined() && !db.defined())) return;
      note_io({&a, &b, &dy}, {}, {&da, &db});
      if (void* s = ctx().cuda_stream_for_launch())
        kernels::cuda::mul_backward(a.raw(), b.raw(), bf16(a), dy.raw(), bf16(dy), raw(da), bf16(da), raw(db), bf16(db),
                                    n, s);
#endif
    });
  }
  return y;
}

Tensor scale(const Tensor& a, float s) {
  OpScope op("scale");
  check_same_device("scale", {&a});
  check_float_dtype("scale", a, "a");
  Tensor y = Tensor::empty(a.shape(), a.dtype());
  int64_t n = a.numel();
  note_io({&a}, {&y});
  if (on_cpu()) {
    const float* pa = f32(a);
    float* py = f32(y);
    ctx().launch([=] { kernels::cpu::scale_forward(pa, s, py, n); });
  } else {
#ifdef DFLASH_CUDA
    if (void* st = ctx().cuda_stream_for_launch()) kernels::cuda::scale_forward(a.raw(), s, y.raw(), bf16(a), n, st);
#endif
  }
  if (needs_grad({&a})) {
    record_node("scale", {&y}, [a = grad_key(a), s, n](NodeGrads& g) {
      if (on_cpu()) {
        const float* dy = f32(g.out(0));
        if (float* da = f32(g.in(a))) ctx().launch([=] { kernels::cpu::scale_backward(dy, s, da, n); });
        return;
      }
#ifdef DFLASH_CUDA
      Tensor dy = g.out(0), da = g.in(a);
      if (!dy.defined() || !da.defined()) return;
      note_io({&dy}, {}, {&da});
      if (void* st = ctx().cuda_stream_for_launch())
        kernels::cuda::scale_backward(dy.raw(), bf16(dy), s, da.raw(), bf16(da), n, st);
#endif
    });
  }
  return y;
}

}  // namespace dflash::ops
