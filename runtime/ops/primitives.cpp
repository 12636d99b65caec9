// fill_, accumulate_ and copy_: kernel calls without autograd, used by the runtime itself.
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

void fill_(const Tensor& t, float value) {
  OpScope op("fill");
  check_same_device("fill", {&t});
  note_io({}, {&t});
  if (on_cpu()) {
    check_dtype("fill", t, DType::f32, "tensor");
    float* p = f32(t);
    int64_t n = t.numel();
    ctx().launch([=] { kernels::cpu::fill_f32(p, n, value); });
    return;
  }
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::fill(t.raw(), t.dtype() == DType::bf16, t.numel(), value, s);
#endif
}

void accumulate_(const Tensor& dst, const Tensor& src) {
  OpScope op("accumulate");
  check_same_device("accumulate", {&dst, &src});
  DF_CHECK(dst.numel() == src.numel(), "accumulate: destination " << dst.describe() << " and source "
                                                                  << src.describe() << " differ in size");
  note_io({&src}, {}, {&dst});
  if (on_cpu()) {
    check_dtype("accumulate", dst, DType::f32, "destination");
    check_dtype("accumulate", src, DType::f32, "source");
    float* d = f32(dst);
    const float* s = f32(src);
    int64_t n = dst.numel();
    ctx().launch([=] { kernels::cpu::accumulate_f32(d, s, n); });
    return;
  }
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch())
    kernels::cuda::accumulate(dst.raw(), dst.dtype() == DType::bf16, src.raw(), src.dtype() == DType::bf16,
                              dst.numel(), s);
#endif
}

void copy_(const Tensor& dst, const Tensor& src) {
  OpScope op("copy");
  DF_CHECK(dst.nbytes() == src.nbytes() && dst.dtype() == src.dtype(),
           "copy: destination " << dst.describe() << " and source " << src.describe()
                                << " must have the same dtype and size");
  void* d = dst.raw();
  const void* s = src.raw();
  size_t n = dst.nbytes();
  note_io({&src}, {&dst});
  if (on_cpu()) {
    DF_CHECK(dst.device().is_cpu() && src.device().is_cpu(),
             "copy: " << dst.describe() << " on " << dst.device().str() << " and " << src.describe() << " on "
                      << src.device().str() << ": a CPU worker copies only between CPU tensors");
    ctx().launch([=] { kernels::cpu::copy_bytes(d, s, n); });
    return;
  }
#ifdef DFLASH_CUDA
  if (void* st = ctx().cuda_stream_for_launch()) {
    if (dst.device().is_cuda() && src.device().is_cuda()) kernels::cuda::copy_on_device(d, s, n, st);
    else kernels::cuda::copy(d, s, n, st);
  }
#endif
}

}  // namespace dflash::ops
