// matmul, linear and linear_residual: forward GEMM (with the residual as its addend) and the two
// backward GEMMs (dA, dB), accumulating unless fresh.
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash::ops {
using namespace detail;

namespace {

// C[M,N] (+)= op(A) op(B) on the context's device, each operand starting `*_at` elements into its
// tensor, with leading dims lda, ldb, ldc. Dtypes: f32 on the CPU; on CUDA A/B f32 or bf16
// (same), C f32 or bf16.
// `addend` (optional; C's shape and dtype, whole tensors, c_at 0) takes C's place as the addend:
// C = op(A) op(B) + addend, on CUDA in the GEMM's epilogue (one rounding of the f32 sum), on the
// CPU as the GEMM then addend + C (the values of add(addend, gemm)).
void gemm_at(int64_t M, int64_t N, int64_t K, const Tensor& A, int64_t a_at, int64_t lda, bool ta, const Tensor& B,
             int64_t b_at, int64_t ldb, bool tb, const Tensor& C, int64_t c_at, int64_t ldc, float beta,
             const Tensor* addend = nullptr) {
  note_gemm_cost(M, N, K, ta, tb, C.dtype() == DType::bf16);
  if (on_cpu()) {
    const float* a = f32(A) + a_at;
    const float* b = f32(B) + b_at;
    float* c = f32(C) + c_at;
    ctx().launch([=] { kernels::cpu::gemm_f32(M, N, K, a, lda, ta, b, ldb, tb, c, ldc, 1.0f, addend ? 0.0f : beta); });
    if (addend) {
      note_io({addend, &C}, {&C});
      const float* r = f32(*addend);
      ctx().launch([=, n = M * N] { kernels::cpu::add_forward(r, c, c, n); });
    }
    return;
  }
#ifdef DFLASH_CUDA
  const bool ab16 = A.dtype() == DType::bf16, c16 = C.dtype() == DType::bf16;
  if (addend) beta = 1.0f;
  cuda_gemm(GemmKey{M, N, K, lda, ldb, ldc, ta, tb, ab16, c16, beta != 0.0f}, [&] {
    auto at = [](const Tensor& t, int64_t elems) { return static_cast<char*>(t.raw()) + elems * dtype_size(t.dtype()); };
    kernels::cuda::GemmArgs g{M, N, K, at(A, a_at), lda, ta, at(B, b_at), ldb, tb, at(C, c_at), ldc, 1.0f, beta,
                              ab16, c16};
    if (addend) g.addend = addend->raw();
    return g;
  });
#endif
}

// Whole row-major operands: C[M,N] (+)= op(A) op(B) (or = op(A) op(B) + addend).
void gemm(int64_t M, int64_t N, int64_t K, const Tensor& A, bool ta, const Tensor& B, bool tb, const Tensor& C,
          float beta, const Tensor* addend = nullptr) {
  gemm_at(M, N, K, A, 0, ta ? M : K, ta, B, 0, tb ? K : N, tb, C, 0, N, beta, addend);
}

// out = op(a) op(b) (+ residual, out's shape) with a and b viewed as 2-D; the shared forward and
// backward of matmul, linear and linear_residual.
Tensor matmul_2d(const char* name, const Tensor& a, const Tensor& b, bool ta, bool tb, int64_t M, int64_t K,
                 int64_t N, const Shape& out_shape, const Tensor* residual = nullptr) {
  Tensor out = Tensor::empty(out_shape, a.dtype());
  gemm(M, N, K, a, ta, b, tb, out, 0.0f, residual);
  const Tensor none;
  const Tensor& r = residual ? *residual : none;
  if (needs_grad({&a, &b, &r})) {
    record_node(name, {&out}, [a, b, r = grad_key(r), ta, tb, M, K, N](NodeGrads& g) {
      Tensor dc = g.out(0);
      if (!dc.defined()) return;
      // dB first: it is a's last reader here, so a fresh dA (written with beta 0, no zero fill)
      // may then take a's own buffer when nothing else holds a, e.g. the down projection's T x I
      // input, one buffer less at the peak of a drafter layer's backward.
      // A fresh dB (a weight's first gradient under FreshLeafGrads) is written with beta 0.
      if (auto [db, db_fresh] = g.in_overwritable(b); db.defined()) {
        const float beta = db_fresh ? 0.0f : 1.0f;
        if (!tb) gemm(K, N, M, a, !ta, dc, false, db, beta);   // dB = op(A)^T dC
        else gemm(N, K, M, dc, true, a, ta, db, beta);          // dB = dC^T op(A)
      }
      if (auto [da, fresh] = g.in_overwritable(a, a); da.defined()) {
        const float beta = fresh ? 0.0f : 1.0f;
        if (!ta) gemm(M, K, N, dc, false, b, !tb, da, beta);   // dA = dC op(B)^T
        else gemm(K, M, N, b, tb, dc, true, da, beta);          // dA = op(B) dC^T
      }
      // Last, once the GEMMs have read it: dC is the residual's gradient as it is (no copy).
      if (r.defined() && r.requires_grad()) g.pass(r, dc);
    });
  }
  return out;
}

void check_float(const char* op, const Tensor& t, const char* role) {
  if (on_cpu()) check_dtype(op, t, DType::f32, role);
  else DF_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16,
                op << ": " << role << " is " << t.describe() << "; it must be f32 or bf16");
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  OpScope op("matmul");
  check_same_device("matmul", {&a, &b});
  check_ndim("matmul", a, 2, "a");
  check_ndim("matmul", b, 2, "b");
  check_float("matmul", a, "a");
  DF_CHECK(a.dtype() == b.dtype(), "matmul: a is " << a.describe() << " and b is " << b.describe()
                                                   << "; both must have the same dtype");
  int64_t M = trans_a ? a.dim(1) : a.dim(0), K = trans_a ? a.dim(0) : a.dim(1);
  int64_t Kb = trans_b ? b.dim(1) : b.dim(0), N = trans_b ? b.dim(0) : b.dim(1);
  DF_CHECK(K == Kb, "matmul: inner dimensions differ: a " << a.describe() << (trans_a ? " (transposed)" : "")
                                                          << " has " << K << ", b " << b.describe()
                                                          << (trans_b ? " (transposed)" : "") << " has " << Kb
                                                          << "; transpose one operand or fix its shape");
  return matmul_2d("matmul", a, b, trans_a, trans_b, M, K, N, Shape{M, N});
}

namespace {
// x [..., in] through weight [out, in] (+ residual [..., out]): the shared checks and the GEMM.
Tensor linear_op(const char* name, const Tensor& x, const Tensor& weight, const Tensor* residual) {
  if (residual) check_same_device(name, {&x, &weight, residual});
  else check_same_device(name, {&x, &weight});
  check_ndim(name, weight, 2, "weight");
  check_float(name, x, "x");
  DF_CHECK(x.dtype() == weight.dtype() && (!residual || residual->dtype() == x.dtype()),
           name << ": x is " << x.describe() << " and weight is " << weight.describe()
                << (residual ? " and residual is " + residual->describe() : std::string())
                << "; they must have the same dtype");
  DF_CHECK(x.ndim() >= 1 && x.shape().last() == weight.dim(1),
           name << ": x " << x.describe() << " has " << x.shape().last() << " features but weight "
                << weight.describe() << " expects " << weight.dim(1) << " (weights are [out, in] like torch Linear)");
  int64_t rows = x.shape().rows(), in = weight.dim(1), out = weight.dim(0);
  Shape out_shape = x.shape();
  out_shape.d[out_shape.ndim - 1] = out;
  DF_CHECK(!residual || residual->shape() == out_shape,
           name << ": residual " << residual->describe() << " must have the output's shape " << out_shape.str()
                << " (x " << x.describe() << " through weight " << weight.describe() << ")");
  return matmul_2d(name, x, weight, false, true, rows, in, out, out_shape, residual);
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight) {
  OpScope op("linear");
  return linear_op("linear", x, weight, nullptr);
}

Tensor linear_residual(const Tensor& x, const Tensor& weight, const Tensor& residual) {
  OpScope op("linear_residual");
  return linear_op("linear_residual", x, weight, &residual);
}

Tensor linear_concat_rows(const Tensor& a, const Tensor& b, const Tensor& weight) {
  OpScope op("linear");
  check_same_device("linear_concat_rows", {&a, &b, &weight});
  check_ndim("linear_concat_rows", a, 3, "a");
  check_ndim("linear_concat_rows", b, 3, "b");
  check_ndim("linear_concat_rows", weight, 2, "weight");
  check_float("linear_concat_rows", a, "a");
  DF_CHECK(a.dtype() == b.dtype() && a.dtype() == weight.dtype(),
           "linear_concat_rows: a " << a.describe() << ", b " << b.describe() << " and weight " << weight.describe()
                                    << " must share one dtype");
  DF_CHECK(a.dim(0) == b.dim(0) && a.dim(2) == weight.dim(1) && b.dim(2) == weight.dim(1),
           "linear_concat_rows: a " << a.describe() << " and b " << b.describe()
                                    << " must agree on the batch and have weight " << weight.describe()
                                    << "'s input width " << weight.dim(1));
  const int64_t B = a.dim(0), Sa = a.dim(1), Sb = b.dim(1), in = weight.dim(1), out = weight.dim(0);
  Tensor y = Tensor::empty({B, Sa + Sb, out}, a.dtype());  // (B, Sa + Sb, out)
  for (int64_t r = 0; r < B; ++r) {
    gemm_at(Sa, out, in, a, r * Sa * in, in, false, weight, 0, in, true, y, r * (Sa + Sb) * out, out, 0.0f);
    gemm_at(Sb, out, in, b, r * Sb * in, in, false, weight, 0, in, true, y, (r * (Sa + Sb) + Sa) * out, out, 0.0f);
  }
  if (needs_grad({&a, &b, &weight})) {
    record_node("linear", {&y}, [a, b, weight, B, Sa, Sb, in, out](NodeGrads& g) {
      Tensor dy = g.out(0);
      if (!dy.defined()) return;
      auto [da, da_fresh] = g.in_overwritable(a);
      auto [db, db_fresh] = g.in_overwritable(b);
      auto [dw, dw_fresh] = g.in_overwritable(weight);
      for (int64_t r = 0; r < B; ++r) {
        const int64_t ya = r * (Sa + Sb) * out, yb = (r * (Sa + Sb) + Sa) * out;
        // dA = dY_a W, dB = dY_b W (each batch row's rows written once: fresh buffers take beta 0),
        // dW (+)= dY_a^T A + dY_b^T B (beta 0 for the first when dW is fresh).
        if (da.defined())
          gemm_at(Sa, in, out, dy, ya, out, false, weight, 0, in, false, da, r * Sa * in, in, da_fresh ? 0.0f : 1.0f);
        if (db.defined())
          gemm_at(Sb, in, out, dy, yb, out, false, weight, 0, in, false, db, r * Sb * in, in, db_fresh ? 0.0f : 1.0f);
        if (dw.defined()) {
          gemm_at(out, in, Sa, dy, ya, out, true, a, r * Sa * in, in, false, dw, 0, in, r == 0 && dw_fresh ? 0.0f : 1.0f);
          gemm_at(out, in, Sb, dy, yb, out, true, b, r * Sb * in, in, false, dw, 0, in, 1.0f);
        }
      }
    });
  }
  return y;
}

}  // namespace dflash::ops
