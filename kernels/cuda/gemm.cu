// GEMM through cuBLAS: row-major C = op(A) op(B) computed as column-major C^T = op(B)^T op(A)^T,
// bf16 or f32 inputs with fp32 accumulation.
#include <cublas_v2.h>
#include <nvtx3/nvToolsExtMemCudaRt.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
// compute-sanitizer's initcheck does not see cuBLAS's stores on the H200: its gpu-sanitize probes
// flag reads of GEMM outputs and none of our kernels' outputs (docs/TESTING.md). The GEMM writes
// every row of C, so the tool is told so (through NVTX; a no-op without a tool attached).
void mark_initialized(void* c, size_t bytes, cudaStream_t stream) {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("dflash");
  nvtxMemVirtualRangeDesc_t range{bytes, c};
  nvtxMemMarkInitializedBatch_t batch{NVTX_EXT_COMPATID_MEM, sizeof(batch), NVTX_MEM_TYPE_VIRTUAL_ADDRESS, 1,
                                      sizeof(range), &range};
  nvtxMemCudaMarkInitialized(domain, stream, 0, &batch);
}
}  // namespace

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
  if (g.M > 0 && g.N > 0)
    mark_initialized(g.C, size_t((g.M - 1) * g.ldc + g.N) * (g.c_bf16 ? 2 : 4), static_cast<cudaStream_t>(stream));
}

}  // namespace dflash::kernels::cuda
