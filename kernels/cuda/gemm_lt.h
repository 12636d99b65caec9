// cuBLASLt descriptors of one GEMM in gemm.cu's row-major mapping (C^T [N,M] = op(B)^T op(A)^T),
// the algorithm <-> configuration conversions, and the per-thread Lt handle; shared by the
// launcher (gemm.cu) and the candidate timing (gemm_candidates.cu). CUDA sources only.
#pragma once
#include <cublasLt.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

cublasLtHandle_t lt_handle();  // one per thread and current device, made on first use

struct LtGemm {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, c = nullptr;  // B, A, C as Lt's A, B, C (= D)
  explicit LtGemm(const GemmArgs& g);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  void run(const GemmArgs& g, const cublasLtMatmulAlgo_t& algo, void* workspace, size_t workspace_bytes,
           cudaStream_t stream) const;
};

// The 9 configuration attributes (runtime/gemm_tuning.h's GemmAlgoConfig order) of an algorithm,
// and the algorithm they describe for g's types (checked with cublasLtMatmulAlgoCheck: throws,
// naming the shape, when this cuBLAS cannot run it).
void lt_config_of(const cublasLtMatmulAlgo_t& algo, int32_t out[9]);
cublasLtMatmulAlgo_t lt_algo_from(const GemmArgs& g, const LtGemm& d, const int32_t config[9]);

// cuBLASLt's heuristic candidates for g, best first, at most `max_results`: within workspace_bytes,
// split-K only with the reduction in an f32 workspace (a fixed order; neither in place nor in C's
// type, whose bf16 partial sums lose precision); with `pointer_alignments` the algorithms that run
// on g's pointers as aligned (else cuBLASLt assumes 256-byte alignment).
std::vector<cublasLtMatmulHeuristicResult_t> lt_heuristics(const GemmArgs& g, const LtGemm& d, size_t workspace_bytes,
                                                           int max_results, bool pointer_alignments = false);

}  // namespace dflash::kernels::cuda
