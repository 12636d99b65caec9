// linear_cross_entropy: the lm_head fused with softmax cross-entropy and chunked over rows, so the
// full logits [R, V] are never held. A frozen lm_head gets its dh in the forward (logits once);
// a trainable one recomputes each chunk's logits in backward for dh and dweight.
#include <algorithm>

#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

namespace {
constexpr const char* kOp = "linear_cross_entropy";

// C[M,N] = op(A) op(B) + beta * C over raw row-major pointers with leading dims: matmul.cpp's
// gemm on sub-blocks (a chunk of rows) that are not tensors of their own.
void gemm_cpu(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool ta, const float* b, int64_t ldb,
              bool tb, float* c, int64_t ldc, float beta) {
  note_gemm_cost(M, N, K, ta, tb, false);
  ctx().launch([=] { kernels::cpu::gemm_f32(M, N, K, a, lda, ta, b, ldb, tb, c, ldc, 1.0f, beta); });
}

void check_inputs(const Tensor& h, const Tensor& weight, const Tensor& labels, const Tensor& row_weights,
                  int64_t chunk_rows) {
  check_same_device(kOp, {&h, &weight, &labels, &row_weights});
  check_float_dtype(kOp, h, "h");
  check_float_dtype(kOp, weight, "weight");
  DF_CHECK(h.dtype() == weight.dtype(), kOp << ": h is " << h.describe() << " and weight is " << weight.describe()
                                            << "; both must have the same dtype (bf16 on a GPU)");
  check_dtype(kOp, labels, DType::i32, "labels");
  check_dtype(kOp, row_weights, DType::f32, "row_weights");
  check_ndim(kOp, h, 2, "h (rows x hidden; flatten leading dims first)");
  check_ndim(kOp, weight, 2, "weight (the lm_head, [vocab, hidden])");
  DF_CHECK(weight.dim(1) == h.dim(1), kOp << ": h " << h.describe() << " has " << h.dim(1)
                                          << " features but weight " << weight.describe() << " expects "
                                          << weight.dim(1) << " (the lm_head is stored [vocab, hidden])");
  DF_CHECK(weight.dim(0) > 0, kOp << ": weight " << weight.describe() << " has an empty vocabulary");
  Shape per_row{h.dim(0)};
  DF_CHECK(labels.shape() == per_row, kOp << ": labels " << labels.describe() << " must hold one label per row of h "
                                          << h.describe() << ", i.e. have shape " << per_row.str());
  DF_CHECK(row_weights.shape() == per_row, kOp << ": row_weights " << row_weights.describe()
                                               << " must hold one weight per row of h " << h.describe()
                                               << ", i.e. have shape " << per_row.str());
  DF_CHECK(!needs_grad({&row_weights}), kOp << ": row_weights " << row_weights.describe()
                                            << " requires grad, but the op gives it none; compute the "
                                               "weights from frozen tensors or under NoGrad");
  DF_CHECK(chunk_rows > 0, kOp << ": chunk_rows is " << chunk_rows
                               << "; it must be at least 1 (the rows of logits held at once)");
}

// Per chunk of rows on the device: logits GEMM, the row kernel (lse, ce, argmax and, in training,
// the unit-upstream dlogits over the logits), then dh_unit[chunk] = dlogits W. The loss is
// written by one fixed-order reduction over ce after the last chunk. Each GEMM and kernel is its
// own call, so the profiler names them. On a GPU the logits have h's dtype (bf16: the GEMM rounds
// them once, as PyTorch's bf16 lm_head does, and no f32 chunk is written or read twice).
void forward_chunks(const Tensor& h, const Tensor& weight, const Tensor& labels, const Tensor& row_weights,
                    int64_t chunk, const LinearCrossEntropy& res, const Tensor& lse, const Tensor& dh_unit) {
  const int64_t R = h.dim(0), H = h.dim(1), V = weight.dim(0);
  [[maybe_unused]] const bool half = bf16(h), grad = dh_unit.defined();
  const DType logits_dtype = on_cpu() ? DType::f32 : h.dtype();
  Tensor logits = Tensor::empty({chunk, V}, logits_dtype);  // (chunk, V); in training dlogits overwrite them
  Tensor dlogits = grad ? logits : Tensor();
  const size_t esize = dtype_size(h.dtype());
  for (int64_t r0 = 0; r0 < R; r0 += chunk) {
    const int64_t n = std::min(chunk, R - r0);
    const char* hr = static_cast<const char*>(h.raw()) + size_t(r0 * H) * esize;
    if (on_cpu()) {
      const float *ph = reinterpret_cast<const float*>(hr), *pw = f32(weight), *prw = f32(row_weights);
      const int32_t* plab = i32(labels) + r0;
      float *plogits = f32(logits), *plse = f32(lse) + r0, *pce = f32(res.ce) + r0, *ploss = f32(res.loss);
      int32_t* pargmax = i32(res.argmax) + r0;
      gemm_cpu(n, V, H, ph, H, false, pw, H, true, plogits, V, 0.0f);  // (n, V) = h (n, H) W^T
      ctx().launch([=] { kernels::cpu::ce_chunk_forward(plogits, plab, prw + r0, n, V, plse, pce, pargmax, ploss); });
      if (grad) {
        static const float kUnit = 1.0f;
        const float* punit = &kUnit;
        ctx().launch([=] { kernels::cpu::ce_chunk_backward(plogits, plab, prw + r0, plse, punit, n, V); });
        gemm_cpu(n, H, V, plogits, V, false, pw, H, false, f32(dh_unit) + r0 * H, H, 0.0f);  // dlogits W
      }
      continue;
    }
#ifdef DFLASH_CUDA
    note_gemm_cost(n, V, H, false, true, half);  // logits of h's dtype
    cuda_gemm(GemmKey{n, V, H, H, H, V, false, true, half, half, false}, [&] {
      return kernels::cuda::GemmArgs{n, V, H, hr, H, false, weight.raw(), H, true, logits.raw(), V, 1.0f, 0.0f, half, half};
    });
    // The row kernel reads the logits once, and in training writes dlogits, reading them again
    // unless a cluster of CTAs holds each row on chip.
    const bool single_read = grad && kernels::cuda::ce_rows_cluster(logits.raw(), raw(dlogits), half, V) > 0;
    note_bytes_cost(double(n) * double(V) * double(esize) * (grad ? (single_read ? 2.0 : 3.0) : 1.0));
    if (void* s = ctx().cuda_stream_for_launch())
      kernels::cuda::ce_rows_forward(logits.raw(), half, i32(labels) + r0, f32(row_weights) + r0, n, V, f32(lse) + r0,
                                     f32(res.ce) + r0, i32(res.argmax) + r0, raw(dlogits), s);
    if (grad) {
      void* dst = static_cast<char*>(dh_unit.raw()) + size_t(r0 * H) * dtype_size(dh_unit.dtype());
      note_gemm_cost(n, H, V, false, false, bf16(dh_unit));
      cuda_gemm(GemmKey{n, H, V, V, H, H, false, false, half, bf16(dh_unit), false}, [&] {
        return kernels::cuda::GemmArgs{n, H, V, dlogits.raw(), V, false, weight.raw(), H, false, dst, H, 1.0f, 0.0f,
                                       half, bf16(dh_unit)};
      });
    }
#endif
  }
#ifdef DFLASH_CUDA
  if (!on_cpu())
    if (void* s = ctx().cuda_stream_for_launch())
      kernels::cuda::ce_loss(f32(res.ce), f32(row_weights), R, chunk, f32(res.loss), s);
#endif
}

// dst += dloss[0] * src, dloss a one-element f32 tensor on the device.
void scaled_accumulate(const Tensor& dst, const Tensor& src, const Tensor& dloss) {
  note_io({&src}, {}, {&dst});
  const int64_t n = dst.numel();
  if (on_cpu()) {
    float* d = f32(dst);
    const float *p = f32(src), *k = f32(dloss);
    ctx().launch([=] {
      for (int64_t i = 0; i < n; ++i) d[i] += k[0] * p[i];
    });
    return;
  }
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch())
    kernels::cuda::scaled_accumulate(dst.raw(), bf16(dst), src.raw(), bf16(src), f32(dloss), n, s);
#endif
}

// The lm_head needs its gradient (tests; never the drafter, whose lm_head is frozen): backward
// recomputes each chunk's logits and accumulates dh and dweight from them.
void record_recompute_backward(const Tensor& h, const Tensor& weight, const Tensor& labels, const Tensor& row_weights,
                               const Tensor& lse, Tensor& loss, int64_t chunk) {
  const int64_t R = h.dim(0), H = h.dim(1), V = weight.dim(0);
  record_node(kOp, {&loss}, [h, weight, labels, row_weights, lse, R, H, V, chunk](NodeGrads& g) {
    Tensor dloss = g.out(0), dh = g.in(h), dw = g.in(weight);
    if (!dloss.defined() || (!dh.defined() && !dw.defined())) return;
    DF_CHECK(dloss.dtype() == DType::f32, kOp << ": the loss gradient is " << dloss.describe() << "; it must be f32");
    [[maybe_unused]] const bool half = bf16(h);
    if (on_cpu()) {
      float* pdh = f32(dh);  // (R, H) +=
      float* pdw = f32(dw);  // (V, H) +=
      Tensor dlogits = Tensor::empty({chunk, V}, DType::f32);  // (chunk, V) recomputed logits, then dlogits
      const float *ph = f32(h), *pw = f32(weight), *prw = f32(row_weights), *plse = f32(lse), *pdloss = f32(dloss);
      const int32_t* plab = i32(labels);
      float* pd = f32(dlogits);
      for (int64_t r0 = 0; r0 < R; r0 += chunk) {
        const int64_t n = std::min(chunk, R - r0);
        gemm_cpu(n, V, H, ph + r0 * H, H, false, pw, H, true, pd, V, 0.0f);
        ctx().launch([=] { kernels::cpu::ce_chunk_backward(pd, plab + r0, prw + r0, plse + r0, pdloss, n, V); });
        if (pdh) gemm_cpu(n, H, V, pd, V, false, pw, H, false, pdh + r0 * H, H, 1.0f);  // dh += dlogits W
        if (pdw) gemm_cpu(V, H, n, pd, V, true, ph + r0 * H, H, false, pdw, H, 1.0f);  // dW += dlogits^T h
      }
      return;
    }
    Tensor logits = Tensor::empty({chunk, V}, h.dtype());  // (chunk, V) recomputed logits, then dlogits over them
    if (ctx().profile_log()) {
      CallCost c;
      c.flop = 2.0 * double(R) * double(V) * double(H) * (1 + (dh.defined() ? 1 : 0) + (dw.defined() ? 1 : 0));
      c.shape = "recompute logits + dlogits GEMMs";
      ctx().set_pending_cost(c);
    }
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch()) {
      kernels::cuda::LinearCeBackward a{h.raw(),  weight.raw(), half,  i32(labels), f32(row_weights), f32(lse),
                                        f32(dloss), R,          H,     V,           chunk,            logits.raw(),
                                        logits.raw(), raw(dh), bf16(dh), raw(dw),  bf16(dw)};
      kernels::cuda::linear_ce_backward(a, ctx().cublas(), s);
    }
#endif
  });
}
}  // namespace

LinearCrossEntropy linear_cross_entropy(const Tensor& h, const Tensor& weight, const Tensor& labels,
                                        const Tensor& row_weights, int64_t chunk_rows) {
  OpScope op(kOp);
  check_inputs(h, weight, labels, row_weights, chunk_rows);
  const int64_t R = h.dim(0), H = h.dim(1), V = weight.dim(0), chunk = std::min(chunk_rows, R);
  const bool half = !on_cpu() && bf16(h);
  const bool grad = needs_grad({&h, &weight});
  // The frozen lm_head (the drafter's case): the gradient for a unit upstream gradient is made
  // in the forward, from the logits already at hand, and backward only scales it by dloss. So
  // the logits are computed once, not twice.
  const bool in_forward = grad && !needs_grad({&weight});
  LinearCrossEntropy res;
  res.loss = on_cpu() ? Tensor::zeros({1}, DType::f32) : Tensor::empty({1}, DType::f32);
  res.ce = Tensor::empty({R}, DType::f32);
  res.argmax = Tensor::empty({R}, DType::i32);
  res.scratch_bytes = size_t(chunk) * size_t(V) * (half ? 2 : sizeof(float));
  Tensor lse = Tensor::empty({R}, DType::f32);                                   // (R)
  Tensor dh_unit = in_forward ? Tensor::empty({R, H}, h.dtype()) : Tensor();    // (R, H) dh for dloss = 1
  forward_chunks(h, weight, labels, row_weights, chunk, res, lse, dh_unit);
  if (!grad) return res;
  if (!in_forward) {
    record_recompute_backward(h, weight, labels, row_weights, lse, res.loss, chunk);
    return res;
  }
  record_node(kOp, {&res.loss}, [h, dh_unit](NodeGrads& g) {
    Tensor dloss = g.out(0), dh = g.in(h);
    if (!dloss.defined() || !dh.defined()) return;
    DF_CHECK(dloss.dtype() == DType::f32, kOp << ": the loss gradient is " << dloss.describe() << "; it must be f32");
    scaled_accumulate(dh, dh_unit, dloss);
  });
  return res;
}

}  // namespace dflash::ops
