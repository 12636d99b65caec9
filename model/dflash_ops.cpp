// dflash_prepare and dflash_metrics: shape checks and kernel calls.
#include "model/dflash_ops.h"

#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash {
using namespace ops::detail;

namespace {
kernels::cpu::DFlashDims dims(const Tensor& input_ids, const Tensor& anchors, int64_t bs, int64_t mask, double gamma) {
  return {input_ids.dim(0), input_ids.dim(1), anchors.dim(1), bs, int32_t(mask), float(gamma)};
}
}  // namespace

DFlashPrepared dflash_prepare(const Tensor& input_ids, const Tensor& loss_mask, const Tensor& anchors,
                              const Tensor& keep, int64_t block_size, int64_t mask_token_id, double gamma) {
  OpScope op("dflash_prepare");
  check_same_device("dflash_prepare", {&input_ids, &loss_mask, &anchors, &keep});
  for (const Tensor* t : {&input_ids, &loss_mask, &anchors, &keep}) check_dtype("dflash_prepare", *t, DType::i32, "input");
  check_ndim("dflash_prepare", input_ids, 2, "input_ids");
  check_ndim("dflash_prepare", anchors, 2, "anchors");
  const int64_t B = input_ids.dim(0), S = input_ids.dim(1), N = anchors.dim(1), T = N * block_size;
  check_shape("dflash_prepare", loss_mask, {B, S}, "loss_mask");
  check_shape("dflash_prepare", anchors, {B, N}, "anchors");
  check_shape("dflash_prepare", keep, {B, N}, "keep");
  DFlashPrepared p;
  p.noise_ids = Tensor::empty({B, T}, DType::i32);
  p.q_pos = Tensor::empty({B, T}, DType::i32);
  p.k_pos = Tensor::empty({B, S + T}, DType::i32);
  p.labels = Tensor::empty({B, T}, DType::i32);
  p.w = Tensor::empty({B, T}, DType::f32);
  p.lw = Tensor::empty({B, T}, DType::f32);
  if (!on_cpu()) {
#ifdef DFLASH_CUDA
    DF_CHECK(block_size <= kernels::cuda::kDFlashMaxBlock,
             "dflash_prepare: block size " << block_size << " on CUDA must be at most " << kernels::cuda::kDFlashMaxBlock
                                           << " (the decay weights are a per-slot table); use a smaller drafter.block_size");
    const kernels::cuda::DFlashBatchDims d{B, S, N, block_size, int32_t(mask_token_id), float(gamma)};
    if (void* s = ctx().cuda_stream_for_launch())
      kernels::cuda::dflash_prepare(i32(input_ids), i32(loss_mask), i32(anchors), i32(keep), d, i32(p.noise_ids),
                                    i32(p.q_pos), i32(p.k_pos), i32(p.labels), f32(p.w), f32(p.lw), s);
    return p;
#else
    no_cuda_kernel("dflash_prepare");
#endif
  }
  kernels::cpu::DFlashDims d = dims(input_ids, anchors, block_size, mask_token_id, gamma);
  const int32_t *ids = i32(input_ids), *mask = i32(loss_mask), *anc = i32(anchors), *kp = i32(keep);
  int32_t *noise = i32(p.noise_ids), *qp = i32(p.q_pos), *kpos = i32(p.k_pos), *labels = i32(p.labels);
  float *w = f32(p.w), *lw = f32(p.lw);
  ctx().launch([=] { kernels::cpu::dflash_prepare(ids, mask, anc, kp, d, noise, qp, kpos, labels, w, lw); });
  return p;
}

Tensor dflash_metrics(const Tensor& ce, const Tensor& argmax, const DFlashPrepared& p, const Tensor& keep,
                      int64_t block_size) {
  OpScope op("dflash_metrics");
  const int64_t B = keep.dim(0), N = keep.dim(1);
  DF_CHECK(ce.numel() == B * N * block_size && argmax.numel() == ce.numel(),
           "dflash_metrics: ce " << ce.describe() << " and argmax " << argmax.describe() << " must have B*N*bs = "
                                 << B * N * block_size << " elements");
  Tensor out = Tensor::empty({kernels::cpu::kDFlashSums}, DType::f32);
  if (!on_cpu()) {
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch())
      kernels::cuda::dflash_metrics(f32(ce), i32(argmax), i32(p.labels), f32(p.w), f32(p.lw), i32(keep), B, N,
                                    block_size, f32(out), s);
    return out;
#else
    no_cuda_kernel("dflash_metrics");
#endif
  }
  kernels::cpu::DFlashDims d{B, 0, N, block_size, 0, 0};
  const float *pce = f32(ce), *w = f32(p.w), *lw = f32(p.lw);
  const int32_t *am = i32(argmax), *labels = i32(p.labels), *kp = i32(keep);
  float* po = f32(out);
  ctx().launch([=] { kernels::cpu::dflash_metrics(pce, am, labels, w, lw, kp, d, po); });
  return out;
}

}  // namespace dflash
