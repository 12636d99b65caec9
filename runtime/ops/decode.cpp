// The decode-path ops (runtime/decode_ops.h): argument checks and kernel calls, CPU or CUDA; and the
// checks the slot-cache ops share with them (runtime/ops/decode_checks.h).
#include "runtime/decode_ops.h"

#include <cmath>

#include "kernels/cpu/decode_kernels.h"
#include "runtime/ops/common.h"
#include "runtime/ops/decode_checks.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/decode_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

void detail::refuse_grad(const char* op, std::initializer_list<const Tensor*> ts) {
  DF_CHECK(!needs_grad(ts), op << ": an input requires grad, but " << op
                               << " has no backward (it serves decoding); run it under NoGrad");
}

void detail::check_cache_attention(const char* op, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                   float scale) {
  const int64_t nh = q.dim(1), hd = q.dim(2), nkv = k_cache.dim(k_cache.ndim() - 2), khd = k_cache.shape().last();
  DF_CHECK(khd == hd, op << ": k_cache " << k_cache.describe() << " has head dim " << khd << " but q " << q.describe()
                         << " has " << hd);
  DF_CHECK(hd >= 1 && hd <= kernels::cpu::kCachedAttentionMaxHeadDim,
           op << ": head dim " << hd << " must be in [1, " << kernels::cpu::kCachedAttentionMaxHeadDim << "]");
  DF_CHECK(nh >= 1 && nkv >= 1 && nh % nkv == 0,
           op << ": " << nh << " query heads and " << nkv
              << " kv heads; the query heads must be a positive multiple of the kv heads");
  // nkv and hd are >= 1 here, so the cache has rows when every leading dim is >= 1.
  DF_CHECK(k_cache.numel() >= 1, op << ": the cache " << k_cache.describe() << " has no rows");
  DF_CHECK(std::isfinite(scale) && scale > 0.0f, op << ": scale = " << scale << "; it must be finite and > 0");
  check_float_dtype(op, q, "q");
  DF_CHECK(k_cache.dtype() == q.dtype() && v_cache.dtype() == q.dtype(),
           op << ": q " << q.describe() << ", k_cache " << k_cache.describe() << " and v_cache " << v_cache.describe()
              << " must share one dtype");
  refuse_grad(op, {&q, &k_cache, &v_cache});
}

namespace {

// An i32 [1] device scalar, or undefined when optional.
void check_scalar(const char* op, const Tensor& t, const char* role, bool optional) {
  if (optional && !t.defined()) return;
  DF_CHECK(t.defined(), op << ": " << role << " is undefined; pass an i32 [1] tensor on the device");
  check_dtype(op, t, DType::i32, role);
  DF_CHECK(t.numel() == 1, op << ": " << role << " is " << t.describe() << " but must hold one i32 (shape [1])");
  check_same_device(op, {&t});
}

}  // namespace

Tensor linear_rowwise(const Tensor& x, const Tensor& w) { return linear_rowwise(x, w, x.dtype()); }

Tensor linear_rowwise(const Tensor& x, const Tensor& w, DType out_dtype) {
  constexpr const char* kOp = "linear_rowwise";
  OpScope op(kOp);
  check_same_device(kOp, {&x, &w});
  check_ndim(kOp, w, 2, "weight");
  check_float_dtype(kOp, x, "x");
  DF_CHECK(x.dtype() == w.dtype(), kOp << ": x is " << x.describe() << " and weight is " << w.describe()
                                       << "; both must have the same dtype");
  DF_CHECK(x.ndim() >= 1 && x.shape().last() == w.dim(1),
           kOp << ": x " << x.describe() << " has " << (x.ndim() ? x.shape().last() : 0) << " features but weight "
               << w.describe() << " expects " << w.dim(1) << " ([out, in])");
  refuse_grad(kOp, {&x, &w});
  const int64_t K = w.dim(1), N = w.dim(0), M = x.numel() / K;
  Shape out_shape = x.shape();
  out_shape.d[out_shape.ndim - 1] = N;
  if (on_cpu()) {
    DF_CHECK(out_dtype == DType::f32, kOp << ": the CPU computes in f32; asked for " << dtype_name(out_dtype));
    Tensor y = Tensor::empty(out_shape, DType::f32);  // (..., N)
    const float *px = f32(x), *pw = f32(w);
    float* py = f32(y);
    note_gemm_cost(M, N, K, false, true, false);
    ctx().launch([=] { kernels::cpu::linear_rows_f32(px, pw, py, M, K, N); });
    return y;
  }
  DF_CHECK(out_dtype == DType::f32 || out_dtype == DType::bf16,
           kOp << ": the output dtype must be f32 or bf16, not " << dtype_name(out_dtype));
  Tensor y = Tensor::empty(out_shape, out_dtype);  // (..., N)
#ifdef DFLASH_CUDA
  note_gemm_cost(M, N, K, false, true, out_dtype == DType::bf16);
  cuda_gemm(GemmKey{M, N, K, K, K, N, false, true, bf16(x), out_dtype == DType::bf16, false}, [&] {
    return kernels::cuda::GemmArgs{M, N, K, x.raw(), K, false, w.raw(), K, true, y.raw(), N, 1.0f, 0.0f,
                                   bf16(x), out_dtype == DType::bf16};
  });
#else
  no_cuda_kernel(kOp);
#endif
  return y;
}

Tensor cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& pos0,
                        float scale) {
  constexpr const char* kOp = "cached_attention";
  OpScope op(kOp);
  check_same_device(kOp, {&q, &k_cache, &v_cache});
  check_scalar(kOp, pos0, "pos0", false);
  DF_CHECK(q.ndim() == 3, kOp << ": q is " << q.describe() << " but must be 3-D [n, nh, hd]");
  DF_CHECK(k_cache.ndim() == 3, kOp << ": k_cache is " << k_cache.describe() << " but must be 3-D [C, nkv, hd]");
  DF_CHECK(v_cache.shape() == k_cache.shape(),
           kOp << ": v_cache " << v_cache.describe() << " must have k_cache's shape " << k_cache.shape().str());
  const int64_t n = q.dim(0), nh = q.dim(1), hd = q.dim(2), C = k_cache.dim(0), nkv = k_cache.dim(1);
  check_cache_attention(kOp, q, k_cache, v_cache, scale);
  Tensor out = Tensor::empty({n, nh, hd}, q.dtype());  // (n, nh, hd)
  if (on_cpu()) {
    const kernels::cpu::CachedAttentionDims d{n, nh, nkv, hd, C, scale};
    const float *pq = f32(q), *pk = f32(k_cache), *pv = f32(v_cache);
    const int32_t* pp = i32(pos0);
    float* po = f32(out);
    ctx().launch([=] { kernels::cpu::cached_attention_forward(pq, pk, pv, pp, d, po); });
    return out;
  }
#ifdef DFLASH_CUDA
  DF_CHECK(hd % 8 == 0 && hd <= kernels::cuda::kCachedAttentionMaxHeadDim,
           kOp << ": head dim " << hd << "; the CUDA kernel needs a multiple of 8 up to "
               << kernels::cuda::kCachedAttentionMaxHeadDim);
  const int64_t splits = kernels::cuda::cached_attention_splits(C);
  Tensor partial_o = Tensor::empty({splits, n, nh, hd}, DType::f32);  // (splits, n, nh, hd)
  Tensor partial_ml = Tensor::empty({splits, n, nh, 2}, DType::f32);  // (splits, n, nh, {max, sum})
  if (void* s = ctx().cuda_stream_for_launch())
    kernels::cuda::cached_attention_forward({q.raw(), k_cache.raw(), v_cache.raw(), out.raw(), bf16(q), i32(pos0), n, nh,
                                             nkv, hd, C, scale, f32(partial_o), f32(partial_ml)},
                                            s);
#else
  no_cuda_kernel(kOp);
#endif
  return out;
}

void copy_rows_(const Tensor& dst, const Tensor& dst_at, const Tensor& src, const Tensor& src_at, int64_t n,
                const Tensor& count) {
  constexpr const char* kOp = "copy_rows";
  OpScope op(kOp);
  check_same_device(kOp, {&dst, &src});
  check_scalar(kOp, dst_at, "dst_at", true);
  check_scalar(kOp, src_at, "src_at", true);
  check_scalar(kOp, count, "count", true);
  DF_CHECK(dst.ndim() >= 1 && src.ndim() >= 1 && dst.dtype() == src.dtype(),
           kOp << ": dst " << dst.describe() << " and src " << src.describe() << " must be tensors of one dtype");
  const int64_t dst_rows = dst.dim(0), src_rows = src.dim(0);
  const size_t row_bytes = dst_rows ? dst.nbytes() / size_t(dst_rows) : 0;
  DF_CHECK(src_rows > 0 && row_bytes == src.nbytes() / size_t(src_rows),
           kOp << ": the rows of dst " << dst.describe() << " and src " << src.describe() << " differ in size");
  DF_CHECK(n >= 0, kOp << ": n = " << n << " rows; it must be >= 0");
  void* pd = dst.raw();
  const void* ps = src.raw();
  const int32_t *pda = i32(dst_at), *psa = i32(src_at), *pc = i32(count);
  if (on_cpu()) {
    ctx().launch([=] { kernels::cpu::copy_rows(pd, dst_rows, pda, ps, src_rows, psa, n, pc, row_bytes); });
    return;
  }
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch())
    kernels::cuda::copy_rows(pd, dst_rows, pda, ps, src_rows, psa, n, pc, row_bytes, s);
#else
  no_cuda_kernel(kOp);
#endif
}

Tensor arange_from(const Tensor& base, int64_t n) {
  constexpr const char* kOp = "arange_from";
  OpScope op(kOp);
  check_scalar(kOp, base, "base", false);
  DF_CHECK(n >= 1, kOp << ": n = " << n << "; it must be >= 1");
  Tensor out = Tensor::empty({n}, DType::i32);  // (n)
  const int32_t* pb = i32(base);
  int32_t* po = i32(out);
  if (on_cpu()) {
    ctx().launch([=] { kernels::cpu::arange_from(pb, n, po); });
    return out;
  }
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::arange_from(pb, n, po, s);
#else
  no_cuda_kernel(kOp);
#endif
  return out;
}

ArgmaxRows argmax_rows(const Tensor& x) {
  constexpr const char* kOp = "argmax_rows";
  OpScope op(kOp);
  check_same_device(kOp, {&x});
  check_float_dtype(kOp, x, "x");
  DF_CHECK(x.ndim() >= 1 && x.shape().last() >= 1, kOp << ": x " << x.describe() << " must be [..., V] with V >= 1");
  const int64_t V = x.shape().last(), n = x.numel() / V;
  ArgmaxRows r{Tensor::empty({n}, DType::i32), Tensor::empty({n}, DType::f32), Tensor::empty({n}, DType::f32)};
  int32_t* pi = i32(r.index);
  float *pm = f32(r.margin), *pt = f32(r.top);
  if (on_cpu()) {
    const float* px = f32(x);
    ctx().launch([=] { kernels::cpu::argmax_rows(px, n, V, pi, pm, pt); });
    return r;
  }
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::argmax_rows(x.raw(), bf16(x), n, V, pi, pm, pt, s);
#else
  no_cuda_kernel(kOp);
#endif
  return r;
}

}  // namespace dflash::ops
