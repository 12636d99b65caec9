// GEMM through cuBLAS: row-major C = op(A) op(B) computed as column-major C^T = op(B)^T op(A)^T,
// bf16 or f32 inputs with fp32 accumulation.
#include <cublas_v2.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

void gemm(const GemmArgs& g, void* handle, void* stream) {
  cublasHandle_t h = static_cast<cublasHandle_t>(handle);
  // The handle was bound to its context's stream together with the fixed workspace. It is not
  // rebound here: cublasSetStream resets the workspace to cuBLAS's default pool, which would let
  // eager and captured GEMMs pick different algorithms (and allocate inside a capture).
  cudaStream_t bound = nullptr;
  if (cublasGetStream(h, &bound) != CUBLAS_STATUS_SUCCESS || bound != static_cast<cudaStream_t>(stream))
    throw std::runtime_error("gemm: the cuBLAS handle is bound to another stream; launch on the stream of the "
                             "context that owns the handle");
  // Column-major view: C^T [N,M] = op(B)^T [N,K] * op(A)^T [K,M]. A row-major matrix with leading
  // dim ld is the column-major transpose with the same ld.
  cublasOperation_t opB = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opA = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cudaDataType_t ab = g.ab_bf16 ? CUDA_R_16BF : CUDA_R_32F;
  cudaDataType_t c = g.c_bf16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasComputeType_t compute = g.ab_bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC;
  cublasStatus_t st = cublasGemmEx(h, opB, opA, int(g.N), int(g.M), int(g.K), &g.alpha, g.B, ab, int(g.ldb), g.A, ab,
                                   int(g.lda), &g.beta, g.C, c, int(g.ldc), compute, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("gemm: cublasGemmEx failed with status " + std::to_string(int(st)) + " for M=" +
                             std::to_string(g.M) + " N=" + std::to_string(g.N) + " K=" + std::to_string(g.K));
}

}  // namespace dflash::kernels::cuda
