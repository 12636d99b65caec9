// cuBLASLt's candidate algorithms for one GEMM, each timed against the algorithm cublasGemmEx
// picks itself (kernels/cuda/gemm.cu): what tuning the GEMMs at startup could gain. Plain C++.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

struct GemmCandidate {
  std::string config;     // "algo 66 tile 18 stages 20 splitk 1 reduction 0 swizzle 0 custom 0 inner 0 cluster 2 waves 1.2"
  int32_t config_values[9] = {};  // the same as runtime/gemm_tuning.h's GemmAlgoConfig
  double ms = 0;          // mean of the timed launches
  size_t workspace = 0;   // bytes the candidate needs (at most the workspace given)
};

struct GemmCandidates {
  double default_ms = 0;                 // cublasGemmEx with CUBLAS_GEMM_DEFAULT, the launcher's choice
  std::vector<GemmCandidate> candidates;  // cuBLASLt's heuristic order (the first is its own pick)
};

// Device time in ms of the work a function enqueues (runtime/cuda/cuda_backend.h's time_ms).
using DeviceTimer = std::function<double(const std::function<void()>&)>;

// Times `reps` launches of g (its A, B, C pointers must be valid device buffers; C is overwritten)
// through cublasGemmEx and through each of cuBLASLt's first `max_candidates` heuristic candidates
// whose split-K reduction is deterministic (none, or in a workspace buffer; never in place). The
// cuBLAS handle must be bound to `stream` (as gemm() requires); the workspace is the one bound
// to it, which the Lt candidates share.
GemmCandidates time_gemm_candidates(const GemmArgs& g, void* cublas_handle, void* workspace, size_t workspace_bytes,
                                    void* stream, int max_candidates, int reps, const DeviceTimer& time_ms);

// Whether this cuBLAS on this GPU can run `config` (9 integers, runtime/gemm_tuning.h) for g's
// shape and types (cublasLtMatmulAlgoCheck; g's pointers are not read).
bool lt_config_runs(const GemmArgs& g, const int32_t config[9]);

// Fills n elements of p (bf16 or f32) with values in [-1, 1] from a hash of (seed, index).
void fill_hashed(void* p, bool bf16, int64_t n, uint32_t seed, void* stream);

}  // namespace dflash::kernels::cuda
