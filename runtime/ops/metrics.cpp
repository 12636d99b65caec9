// normalize_weights and weighted_accuracy: data-side ops without autograd.
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

Tensor normalize_weights(const Tensor& w, float eps) {
  OpScope op("normalize_weights");
  check_same_device("normalize_weights", {&w});
  check_dtype("normalize_weights", w, DType::f32, "weights");
  Tensor out = Tensor::empty(w.shape(), DType::f32);
  const float* pw = f32(w);
  float* po = f32(out);
  int64_t n = w.numel();
  if (on_cpu()) {
    ctx().launch([=] { kernels::cpu::normalize_weights(pw, n, eps, po); });
  } else {
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::normalize_weights(pw, n, eps, po, s);
#endif
  }
  return out;
}

Tensor weighted_accuracy(const Tensor& argmax, const Tensor& labels, const Tensor& w, float eps) {
  OpScope op("weighted_accuracy");
  check_same_device("weighted_accuracy", {&argmax, &labels, &w});
  check_dtype("weighted_accuracy", argmax, DType::i32, "argmax");
  check_dtype("weighted_accuracy", labels, DType::i32, "labels");
  check_dtype("weighted_accuracy", w, DType::f32, "weights");
  DF_CHECK(argmax.numel() == labels.numel() && labels.numel() == w.numel(),
           "weighted_accuracy: argmax " << argmax.describe() << ", labels " << labels.describe() << " and weights "
                                        << w.describe() << " must have the same number of elements");
  Tensor out = Tensor::empty({1}, DType::f32);
  const int32_t *pa = i32(argmax), *pl = i32(labels);
  const float* pw = f32(w);
  float* po = f32(out);
  int64_t n = w.numel();
  if (on_cpu()) {
    ctx().launch([=] { kernels::cpu::weighted_accuracy(pa, pl, pw, n, eps, po); });
  } else {
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::weighted_accuracy(pa, pl, pw, n, eps, po, s);
#endif
  }
  return out;
}

}  // namespace dflash::ops
