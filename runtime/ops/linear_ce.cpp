// linear_cross_entropy: the frozen lm_head fused with softmax cross-entropy and chunked over rows,
// so the full logits [R, V] are never held; backward recomputes each chunk's logits.
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

// The CUDA path: the same chunking, with each chunk's GEMM and row kernels in kernels/cuda.
// The loss is written by one fixed-order reduction over ce after the last chunk.
LinearCrossEntropy linear_cross_entropy_cuda(const Tensor& h, const Tensor& weight, const Tensor& labels,
                                             const Tensor& row_weights, int64_t chunk) {
  const int64_t R = h.dim(0), H = h.dim(1), V = weight.dim(0);
  const bool half = bf16(h);
  LinearCrossEntropy res;
  res.loss = Tensor::empty({1}, DType::f32);
  res.ce = Tensor::empty({R}, DType::f32);
  res.argmax = Tensor::empty({R}, DType::i32);
  res.scratch_bytes = size_t(chunk) * size_t(V) * (sizeof(float) + (half ? 2 : 0));
  Tensor lse = Tensor::empty({R}, DType::f32);            // (R) saved for backward
  Tensor logits = Tensor::empty({chunk, V}, DType::f32);  // (chunk, V) the only logits ever held
  if (ctx().profile_log()) {
    CallCost c;
    c.flop = 2.0 * double(R) * double(V) * double(H);
    c.shape = "lm_head + CE forward, chunks of " + std::to_string(chunk);
    ctx().set_pending_cost(c);
  }
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch()) {
    kernels::cuda::LinearCeForward a{h.raw(),   weight.raw(),  half,        i32(labels), f32(row_weights),
                                     R,         H,             V,           chunk,       f32(logits),
                                     f32(lse),  f32(res.ce),   i32(res.argmax), f32(res.loss)};
    kernels::cuda::linear_ce_forward(a, ctx().cublas(), s);
  }
#endif
  logits = Tensor();  // freed before backward's scratch is placed

  if (needs_grad({&h, &weight})) {
    record_node(kOp, {&res.loss}, [h, weight, labels, row_weights, lse, R, H, V, chunk, half](NodeGrads& g) {
      Tensor dloss = g.out(0), dh = g.in(h), dw = g.in(weight);
      if (!dloss.defined() || (!dh.defined() && !dw.defined())) return;
      DF_CHECK(dloss.dtype() == DType::f32, kOp << ": the loss gradient is " << dloss.describe() << "; it must be f32");
      Tensor logits = Tensor::empty({chunk, V}, DType::f32);                         // (chunk, V) recomputed logits
      Tensor dlogits = half ? Tensor::empty({chunk, V}, DType::bf16) : logits;  // (chunk, V) in h's dtype for cuBLAS
      if (ctx().profile_log()) {
        CallCost c;
        c.flop = 2.0 * double(R) * double(V) * double(H) * (1 + (dh.defined() ? 1 : 0) + (dw.defined() ? 1 : 0));
        c.shape = "recompute logits + dlogits GEMMs";
        ctx().set_pending_cost(c);
      }
#ifdef DFLASH_CUDA
      if (void* s = ctx().cuda_stream_for_launch()) {
        kernels::cuda::LinearCeBackward a{h.raw(),  weight.raw(), half,  i32(labels), f32(row_weights), f32(lse),
                                          f32(dloss), R,          H,     V,           chunk,            f32(logits),
                                          dlogits.raw(), raw(dh), bf16(dh), raw(dw),  bf16(dw)};
        kernels::cuda::linear_ce_backward(a, ctx().cublas(), s);
      }
#endif
    });
  }
  return res;
}
}  // namespace

LinearCrossEntropy linear_cross_entropy(const Tensor& h, const Tensor& weight, const Tensor& labels,
                                        const Tensor& row_weights, int64_t chunk_rows) {
  OpScope op(kOp);
  check_inputs(h, weight, labels, row_weights, chunk_rows);
  const int64_t R = h.dim(0), H = h.dim(1), V = weight.dim(0), chunk = std::min(chunk_rows, R);

  if (!on_cpu()) return linear_cross_entropy_cuda(h, weight, labels, row_weights, chunk);

  LinearCrossEntropy res;
  res.loss = Tensor::zeros({1}, DType::f32);
  res.ce = Tensor::empty({R}, DType::f32);
  res.argmax = Tensor::empty({R}, DType::i32);
  res.scratch_bytes = size_t(chunk) * size_t(V) * sizeof(float);
  Tensor lse = Tensor::empty({R}, DType::f32);           // (R) saved for backward
  Tensor logits = Tensor::empty({chunk, V}, DType::f32);  // (chunk, V) the only logits ever held

  const float *ph = f32(h), *pw = f32(weight), *prw = f32(row_weights);
  const int32_t* plab = i32(labels);
  float *plogits = f32(logits), *plse = f32(lse), *pce = f32(res.ce), *ploss = f32(res.loss);
  int32_t* pargmax = i32(res.argmax);
  for (int64_t r0 = 0; r0 < R; r0 += chunk) {
    const int64_t n = std::min(chunk, R - r0);
    gemm_cpu(n, V, H, ph + r0 * H, H, false, pw, H, true, plogits, V, 0.0f);  // (n, V) = h (n, H) W^T
    ctx().launch([=] {
      kernels::cpu::ce_chunk_forward(plogits, plab + r0, prw + r0, n, V, plse + r0, pce + r0, pargmax + r0, ploss);
    });
  }

  if (needs_grad({&h, &weight})) {
    record_node(kOp, {&res.loss}, [h, weight, labels, row_weights, lse, R, H, V, chunk](NodeGrads& g) {
      Tensor dloss = g.out(0);
      if (!dloss.defined()) return;
      float* pdh = f32(g.in(h));       // (R, H) +=
      float* pdw = f32(g.in(weight));  // (V, H) +=
      if (!pdh && !pdw) return;
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
    });
  }
  return res;
}

}  // namespace dflash::ops
