// GEMM through Eigen (single-threaded; workers are our threads). Row-major, any transposes.
// GCC 12's AVX-512 intrinsics (avx512fintrin.h) make their "undefined" vectors by initialising a
// variable from itself; inlined into Eigen's packet math, that use is reported by
// -Wmaybe-uninitialized and -Wuninitialized despite the system-header exemption. Both are silenced
// for the third-party headers alone: Eigen/Core stays the first include, so the intrinsics headers
// are read inside this push/pop and the rest of the file keeps every warning.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;
using Map = Eigen::Map<RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;

template <class OpA, class OpB>
void product(const OpA& a, const OpB& b, Map& c, float alpha, float beta) {
  if (beta == 0.0f) {
    c.noalias() = alpha * (a * b);
  } else {
    if (beta != 1.0f) c *= beta;
    c.noalias() += alpha * (a * b);
  }
}
}  // namespace

void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B,
              int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta) {
  Map c(C, M, N, Eigen::OuterStride<>(ldc));
  if (K == 0) {
    if (beta == 0.0f) c.setZero();
    else c *= beta;
    return;
  }
  ConstMap a(A, trans_a ? K : M, trans_a ? M : K, Eigen::OuterStride<>(lda));
  ConstMap b(B, trans_b ? N : K, trans_b ? K : N, Eigen::OuterStride<>(ldb));
  if (!trans_a && !trans_b) product(a, b, c, alpha, beta);
  else if (!trans_a && trans_b) product(a, b.transpose(), c, alpha, beta);
  else if (trans_a && !trans_b) product(a.transpose(), b, c, alpha, beta);
  else product(a.transpose(), b.transpose(), c, alpha, beta);
}

}  // namespace dflash::kernels::cpu
