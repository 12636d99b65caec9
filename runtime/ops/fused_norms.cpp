// Forward-only fusions for frozen models (the target under NoGrad): a residual add with the
// RMSNorm after it, and the per-head q/k RMSNorm with the RoPE after it (also from a packed q|k|v
// product into a slot KV cache). Each returns exactly the values of the unfused ops (add then
// rmsnorm; rmsnorm then rope; split, rmsnorm_rope and the cache writes), which stay the ops to use
// where gradients flow: these record no backward and refuse inputs that need one.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "runtime/decode_ops.h"
#include "runtime/ops.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

namespace {
void refuse_grad(const char* op, std::initializer_list<const Tensor*> inputs, const char* unfused) {
  DF_CHECK(!needs_grad(inputs), op << ": an input requires grad, but this fused op is forward-only (no backward is "
                                   << "recorded); fix: call it under NoGrad for a frozen model, or use " << unfused
                                   << " where gradients flow");
}

// inv_freq for rotate-half rope over heads of dim hd: f32 [hd / 2], one frequency a rotated pair.
void check_inv_freq(const char* op, const Tensor& inv_freq, int64_t hd) {
  check_dtype(op, inv_freq, DType::f32, "inv_freq");
  DF_CHECK(hd % 2 == 0 && inv_freq.ndim() == 1 && inv_freq.dim(0) == hd / 2,
           op << ": inv_freq is " << inv_freq.describe() << " but the head dim is " << hd << "; inv_freq must be ["
              << hd / 2 << "] (one frequency per rotated pair) and the head dim even");
}

void check_norm_args(const char* op, const Tensor& x, const Tensor& weight, float eps, const char* x_role,
                     const char* w_role) {
  check_float_dtype(op, x, x_role);
  check_ndim(op, weight, 1, w_role);
  DF_CHECK(weight.dim(0) == x.shape().last(), op << ": " << w_role << " " << weight.describe() << " has "
                                                 << weight.dim(0) << " entries but " << x_role << " " << x.describe()
                                                 << " normalises a last dim of " << x.shape().last()
                                                 << "; the weight must match the last dim");
  DF_CHECK(x.dtype() == weight.dtype(), op << ": " << x_role << " is " << x.describe() << " and " << w_role << " is "
                                           << weight.describe() << "; both must have the same dtype");
  DF_CHECK(std::isfinite(eps) && eps >= 0.0f,
           op << ": eps = " << eps << "; it must be finite and >= 0 (rms_norm_eps is typically 1e-6)");
}
}  // namespace

AddRmsnorm add_rmsnorm(const Tensor& a, const Tensor& b, const Tensor& weight, float eps) {
  OpScope op("add_rmsnorm");
  check_same_device("add_rmsnorm", {&a, &b, &weight});
  DF_CHECK(a.ndim() >= 1 && a.shape() == b.shape() && a.dtype() == b.dtype(),
           "add_rmsnorm: a is " << a.describe() << " and b is " << b.describe()
                                << "; they must have the same shape and dtype (at least one dim)");
  check_norm_args("add_rmsnorm", a, weight, eps, "a", "weight");
  refuse_grad("add_rmsnorm", {&a, &b, &weight}, "ops::add then ops::rmsnorm");

  const int64_t D = a.shape().last(), rows = D ? a.numel() / D : 0;
  AddRmsnorm out{Tensor::empty(a.shape(), a.dtype()), Tensor::empty(a.shape(), a.dtype())};  // (..., D) each
  note_io({&a, &b, &weight}, {&out.sum, &out.normed});
  if (on_cpu()) {
    const float *pa = f32(a), *pb = f32(b), *pw = f32(weight);
    float *pr = f32(out.sum), *py = f32(out.normed);
    ctx().launch([=] {
      kernels::cpu::add_forward(pa, pb, pr, rows * D);
      kernels::cpu::rmsnorm_forward(pr, pw, py, nullptr, rows, D, eps);
    });
  } else {
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch())
      kernels::cuda::add_rmsnorm_forward(a.raw(), b.raw(), weight.raw(), out.sum.raw(), out.normed.raw(), bf16(a), rows,
                                         D, eps, s);
#endif
  }
  return out;
}

RopedQK rmsnorm_rope(const Tensor& q, const Tensor& k, const Tensor& q_weight, const Tensor& k_weight,
                     const Tensor& positions, const Tensor& inv_freq, float eps) {
  OpScope op("rmsnorm_rope");
  check_same_device("rmsnorm_rope", {&q, &k, &q_weight, &k_weight, &positions, &inv_freq});
  DF_CHECK(q.ndim() >= 2 && k.ndim() == q.ndim() && q.dtype() == k.dtype(),
           "rmsnorm_rope: q is " << q.describe() << " and k is " << k.describe()
                                 << "; both must be [..., heads, hd] of one dtype, with the same leading dims");
  int64_t rows = 1;
  for (int i = 0; i < q.ndim() - 2; ++i) {
    DF_CHECK(q.dim(i) == k.dim(i), "rmsnorm_rope: q " << q.describe() << " and k " << k.describe() << " differ in dim "
                                                      << i << "; they must share every dim but heads");
    rows *= q.dim(i);
  }
  const int64_t hq = q.dim(-2), hk = k.dim(-2), hd = q.dim(-1);
  DF_CHECK(k.dim(-1) == hd && hd >= 2 && hd % 2 == 0,
           "rmsnorm_rope: q " << q.describe() << " and k " << k.describe()
                              << " must share an even head dim >= 2 (rotate-half rope)");
  check_norm_args("rmsnorm_rope", q, q_weight, eps, "q", "q_weight");
  check_norm_args("rmsnorm_rope", k, k_weight, eps, "k", "k_weight");
  check_dtype("rmsnorm_rope", positions, DType::i32, "positions");
  check_inv_freq("rmsnorm_rope", inv_freq, hd);
  DF_CHECK(positions.numel() == rows, "rmsnorm_rope: positions " << positions.describe() << " hold "
                                                                 << positions.numel() << " positions but q "
                                                                 << q.describe() << " has " << rows
                                                                 << " rows of heads; give one position per row");
  refuse_grad("rmsnorm_rope", {&q, &k, &q_weight, &k_weight, &inv_freq}, "ops::rmsnorm then ops::rope");

  RopedQK out{Tensor::empty(q.shape(), q.dtype()), Tensor::empty(k.shape(), k.dtype())};
  const int32_t* pp = i32(positions);
  const float* pf = f32(inv_freq);
  note_io({&q, &k, &q_weight, &k_weight}, {&out.q, &out.k});
  if (on_cpu()) {
    // The normed heads into the outputs, then rotated in place (rope reads a pair before writing it).
    const float *pq = f32(q), *pk = f32(k), *pwq = f32(q_weight), *pwk = f32(k_weight);
    float *pyq = f32(out.q), *pyk = f32(out.k);
    ctx().launch([=] {
      kernels::cpu::rmsnorm_forward(pq, pwq, pyq, nullptr, rows * hq, hd, eps);
      kernels::cpu::rmsnorm_forward(pk, pwk, pyk, nullptr, rows * hk, hd, eps);
      kernels::cpu::rope_forward(pyq, pp, pf, pyq, rows, hq, hd);
      kernels::cpu::rope_forward(pyk, pp, pf, pyk, rows, hk, hd);
    });
  } else {
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch())
      kernels::cuda::rmsnorm_rope_forward(q.raw(), k.raw(), q_weight.raw(), k_weight.raw(), pp, pf, out.q.raw(),
                                          out.k.raw(), bf16(q), rows, hq, hk, hd, eps, s);
#endif
  }
  return out;
}

Tensor rmsnorm_rope_into_slots(const Tensor& qkv, const Tensor& q_weight, const Tensor& k_weight, const Tensor& positions,
                               const Tensor& inv_freq, const Tensor& slot, const Tensor& k_cache, const Tensor& v_cache,
                               float eps) {
  constexpr const char* kOp = "rmsnorm_rope_into_slots";
  OpScope op(kOp);
  check_same_device(kOp, {&qkv, &q_weight, &k_weight, &positions, &inv_freq, &slot, &k_cache, &v_cache});
  DF_CHECK(k_cache.ndim() == 4 && v_cache.shape() == k_cache.shape() && k_cache.dtype() == qkv.dtype() &&
               v_cache.dtype() == qkv.dtype(),
           kOp << ": k_cache " << k_cache.describe() << " and v_cache " << v_cache.describe()
               << " must be [S, C, nkv, hd], of one shape and of qkv's dtype (qkv is " << qkv.describe() << ")");
  const int64_t nkv = k_cache.dim(2), hd = k_cache.dim(3);
  DF_CHECK(qkv.ndim() == 2 && hd > 0 && qkv.dim(1) > 2 * nkv * hd && (qkv.dim(1) - 2 * nkv * hd) % hd == 0,
           kOp << ": qkv is " << qkv.describe() << " but must be [n, (nh + 2 * " << nkv << ") * " << hd
               << "]: q's, k's and v's columns, for the caches' " << nkv << " kv heads of dim " << hd);
  const int64_t n = qkv.dim(0), W = qkv.dim(1), nh = (W - 2 * nkv * hd) / hd;
  for (const Tensor* t : {&slot, &positions})
    DF_CHECK(t->dtype() == DType::i32 && t->ndim() == 1 && t->dim(0) == n,
             kOp << ": " << (t == &slot ? "slot" : "positions") << " is " << t->describe() << " but must be i32 [" << n
                 << "], one entry a row of qkv");
  refuse_grad(kOp, {&qkv, &q_weight, &k_weight, &inv_freq},
              "ops::split_columns, ops::rmsnorm_rope and ops::scatter_slot_rows_");
  // The unfused ops (they check the norms' and the rope's arguments): on the CPU, and on CUDA where
  // the fused kernel does not cover the head dim or an alignment.
  auto unfused = [&] {
    const std::vector<Tensor> parts = split_columns(qkv, {nh * hd, nkv * hd, nkv * hd});
    RopedQK qk = rmsnorm_rope(parts[0].reshape({n, nh, hd}), parts[1].reshape({n, nkv, hd}), q_weight, k_weight,
                              positions, inv_freq, eps);
    scatter_slot_rows_(k_cache, qk.k, slot, positions);
    scatter_slot_rows_(v_cache, parts[2].reshape({n, nkv, hd}), slot, positions);
    return qk.q;
  };
  if (on_cpu()) return unfused();
#ifdef DFLASH_CUDA
  check_norm_args(kOp, k_cache, q_weight, eps, "a cache's heads", "q_weight");
  check_norm_args(kOp, k_cache, k_weight, eps, "a cache's heads", "k_weight");
  check_inv_freq(kOp, inv_freq, hd);
  Tensor q = Tensor::empty({n, nh, hd}, qkv.dtype());  // (n, nh, hd)
  const size_t esize = dtype_size(qkv.dtype());
  const char* base = static_cast<const char*>(qkv.raw());
  const void *pk = base + size_t(nh * hd) * esize, *pv = base + size_t((nh + nkv) * hd) * esize;
  const kernels::cuda::RopeSlots slots{W, W, pv, W, k_cache.raw(), v_cache.raw(), i32(slot), k_cache.dim(0),
                                       k_cache.dim(1)};
  if (!kernels::cuda::rmsnorm_rope_into_slots_fits(qkv.raw(), pk, q_weight.raw(), k_weight.raw(), q.raw(), bf16(qkv),
                                                   nh, nkv, hd, slots))
    return unfused();
  note_io({&qkv, &q_weight, &k_weight}, {&q});
  if (void* st = ctx().cuda_stream_for_launch())
    kernels::cuda::rmsnorm_rope_into_slots(qkv.raw(), pk, q_weight.raw(), k_weight.raw(), i32(positions),
                                           f32(inv_freq), q.raw(), bf16(qkv), n, nh, nkv, hd, eps, slots, st);
  return q;
#else
  no_cuda_kernel(kOp);
  return {};
#endif
}

}  // namespace dflash::ops
