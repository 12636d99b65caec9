// The slot-KV-cache ops of batched decoding (runtime/decode_ops.h): argument checks and kernel
// calls, CPU or CUDA.
#include "kernels/cpu/generate_kernels.h"
#include "runtime/decode_ops.h"
#include "runtime/ops/common.h"
#include "runtime/ops/decode_checks.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/generate_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

namespace {

// An i32 [n] index tensor on the device.
void check_index(const char* op, const Tensor& t, int64_t n, const char* role) {
  DF_CHECK(t.defined(), op << ": " << role << " is undefined; pass an i32 [" << n << "] tensor on the device");
  check_dtype(op, t, DType::i32, role);
  DF_CHECK(t.ndim() == 1 && t.dim(0) == n,
           op << ": " << role << " is " << t.describe() << " but must be i32 [" << n << "]");
}

}  // namespace

Tensor slot_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& slot,
                      const Tensor& pos, float scale) {
  constexpr const char* kOp = "slot_attention";
  OpScope op(kOp);
  check_same_device(kOp, {&q, &k_cache, &v_cache, &slot, &pos});
  DF_CHECK(q.ndim() == 3, kOp << ": q is " << q.describe() << " but must be 3-D [n, nh, hd]");
  DF_CHECK(k_cache.ndim() == 4, kOp << ": k_cache is " << k_cache.describe() << " but must be 4-D [S, C, nkv, hd]");
  DF_CHECK(v_cache.shape() == k_cache.shape(),
           kOp << ": v_cache " << v_cache.describe() << " must have k_cache's shape " << k_cache.shape().str());
  const int64_t n = q.dim(0), nh = q.dim(1), hd = q.dim(2);
  const int64_t S = k_cache.dim(0), C = k_cache.dim(1), nkv = k_cache.dim(2);
  check_index(kOp, slot, n, "slot");
  check_index(kOp, pos, n, "pos");
  check_cache_attention(kOp, q, k_cache, v_cache, scale);
  Tensor out = Tensor::empty({n, nh, hd}, q.dtype());  // (n, nh, hd)
  if (on_cpu()) {
    const kernels::cpu::SlotAttentionDims d{n, nh, nkv, hd, S, C, scale};
    const float *pq = f32(q), *pk = f32(k_cache), *pv = f32(v_cache);
    const int32_t *ps = i32(slot), *pp = i32(pos);
    float* po = f32(out);
    ctx().launch([=] { kernels::cpu::slot_attention_forward(pq, pk, pv, ps, pp, d, po); });
    return out;
  }
#ifdef DFLASH_CUDA
  DF_CHECK(hd % 8 == 0 && hd <= kernels::cuda::kSlotAttentionMaxHeadDim,
           kOp << ": head dim " << hd << "; the CUDA kernel needs a multiple of 8 up to "
               << kernels::cuda::kSlotAttentionMaxHeadDim);
  DF_CHECK(nh / nkv <= kernels::cuda::kSlotAttentionMaxGroup,
           kOp << ": " << nh / nkv << " query heads per kv head; the CUDA kernel takes at most "
               << kernels::cuda::kSlotAttentionMaxGroup);
  const int64_t splits = kernels::cuda::slot_attention_slices(n, nkv, C);
  Tensor partial_o = Tensor::empty({splits, n, nh, hd}, DType::f32);  // (splits, n, nh, hd)
  Tensor partial_ml = Tensor::empty({splits, n, nh, 2}, DType::f32);  // (splits, n, nh, {max, sum})
  if (void* st = ctx().cuda_stream_for_launch())
    kernels::cuda::slot_attention_forward({q.raw(), k_cache.raw(), v_cache.raw(), out.raw(), bf16(q), i32(slot),
                                           i32(pos), n, nh, nkv, hd, S, C, scale, f32(partial_o), f32(partial_ml)},
                                          st);
#else
  no_cuda_kernel(kOp);
#endif
  return out;
}

void scatter_slot_rows_(const Tensor& cache, const Tensor& src, const Tensor& slot, const Tensor& pos) {
  constexpr const char* kOp = "scatter_slot_rows";
  OpScope op(kOp);
  check_same_device(kOp, {&cache, &src, &slot, &pos});
  DF_CHECK(cache.ndim() >= 3 && src.ndim() == cache.ndim() - 1 && src.dtype() == cache.dtype(),
           kOp << ": cache " << cache.describe() << " must be [S, C, ...] and src " << src.describe()
               << " [n, ...] of the same dtype");
  for (int d = 1; d < src.ndim(); ++d)
    DF_CHECK(src.dim(d) == cache.dim(d + 1), kOp << ": src " << src.describe() << " rows do not match the cache "
                                                 << cache.describe() << " rows");
  const int64_t n = src.dim(0), S = cache.dim(0), C = cache.dim(1);
  check_index(kOp, slot, n, "slot");
  check_index(kOp, pos, n, "pos");
  DF_CHECK(!needs_grad({&src}), kOp << ": src requires grad; run it under NoGrad");
  const size_t row_bytes = n ? src.nbytes() / size_t(n) : 0;
  void* pc = cache.raw();
  const void* psrc = src.raw();
  const int32_t *ps = i32(slot), *pp = i32(pos);
  if (on_cpu()) {
    ctx().launch([=] { kernels::cpu::scatter_slot_rows(pc, S, C, psrc, n, ps, pp, row_bytes); });
    return;
  }
#ifdef DFLASH_CUDA
  if (void* st = ctx().cuda_stream_for_launch())
    kernels::cuda::scatter_slot_rows(pc, S, C, psrc, n, ps, pp, row_bytes, st);
#else
  no_cuda_kernel(kOp);
#endif
}

Tensor gather_rows(const Tensor& src, const Tensor& index) {
  constexpr const char* kOp = "gather_rows";
  OpScope op(kOp);
  check_same_device(kOp, {&src, &index});
  DF_CHECK(src.ndim() >= 1 && src.dim(0) >= 1, kOp << ": src " << src.describe() << " must have rows");
  DF_CHECK(index.defined() && index.dtype() == DType::i32 && index.ndim() == 1 && index.dim(0) >= 1,
           kOp << ": index " << index.describe() << " must be i32 [m] with m >= 1");
  DF_CHECK(!needs_grad({&src}), kOp << ": src requires grad; run it under NoGrad");
  const int64_t n = src.dim(0), m = index.dim(0);
  Shape shape = src.shape();
  shape.d[0] = m;
  Tensor out = Tensor::empty(shape, src.dtype());  // (m, ...)
  const size_t row_bytes = src.nbytes() / size_t(n);
  const void* ps = src.raw();
  const int32_t* pi = i32(index);
  void* po = out.raw();
  if (on_cpu()) {
    ctx().launch([=] { kernels::cpu::gather_rows(ps, n, pi, m, po, row_bytes); });
    return out;
  }
#ifdef DFLASH_CUDA
  if (void* st = ctx().cuda_stream_for_launch()) kernels::cuda::gather_rows(ps, n, pi, m, po, row_bytes, st);
#else
  no_cuda_kernel(kOp);
#endif
  return out;
}

}  // namespace dflash::ops
