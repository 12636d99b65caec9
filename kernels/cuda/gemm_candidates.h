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
  double ms = 0;          // mean of the timed launches (0 when it was not timed: wrong results)
  size_t workspace = 0;   // bytes the candidate needs (at most the workspace given)
  // max over C of (|C - C_cublas| - allowance) / max |C_cublas|, from the same operands and C, where
  // the allowance is one bf16 step (2^-7 |C_cublas|) for a bf16 C and 0 for f32; infinite when C
  // holds a NaN or an infinity. Within kMaxCandidateError the candidate computes the same GEMM.
  double error = 0;
  bool agrees = false;
};

// Beyond the allowance (a bf16 C may be rounded twice, the product and then its sum with beta C:
// on the H200 cuBLASLt's algorithm 66 and cuBLAS agree within it, while algorithm 66 is off by more
// than half a bf16 step from the exact result, tests/test_gpu_optimizer.cpp), 1e-4 of the largest
// |C| is far above what another f32 summation order changes and far below a wrong result.
constexpr double kMaxCandidateError = 1e-4;

struct GemmCandidates {
  double default_ms = 0;                 // cublasGemmEx with CUBLAS_GEMM_DEFAULT, the launcher's choice
  double default_after_ms = 0;           // the same timed again after the candidates (clock drift)
  std::vector<GemmCandidate> candidates;  // cuBLASLt's heuristic order (the first is its own pick)
};

// The fastest candidate that agrees with cuBLAS, or null when none does. A refused candidate is
// never timed (ms 0), so it must never win on time.
inline const GemmCandidate* fastest_agreeing(const GemmCandidates& t) {
  const GemmCandidate* best = nullptr;
  for (const GemmCandidate& c : t.candidates)
    if (c.agrees && (!best || c.ms < best->ms)) best = &c;
  return best;
}

// Device time in ms of the work a function enqueues (runtime/cuda/cuda_backend.h's time_ms).
using DeviceTimer = std::function<double(const std::function<void()>&)>;

// Times `reps` launches of g (its A, B, C pointers must be valid device buffers; C is overwritten)
// through cublasGemmEx and through each of cuBLASLt's first `max_candidates` heuristic candidates
// whose split-K reduction is deterministic and in f32 (none, or in a workspace buffer; never in
// place, never in a bf16 C). Each candidate first runs once from g's C as it was and is compared
// with cublasGemmEx's result (GemmCandidate::error); one that disagrees is not timed. `check`
// holds gemm_check_bytes(g) bytes of device memory nothing else uses during the call. The cuBLAS
// handle must be bound to `stream` (as gemm() requires); the workspace is the one bound to it,
// which the Lt candidates share.
GemmCandidates time_gemm_candidates(const GemmArgs& g, void* cublas_handle, void* workspace, size_t workspace_bytes,
                                    void* stream, int max_candidates, int reps, const DeviceTimer& time_ms,
                                    void* check);
// Bytes time_gemm_candidates needs in `check`: C's extent twice, and the comparison's result.
size_t gemm_check_bytes(const GemmArgs& g);

// Whether this cuBLAS on this GPU can run `config` (9 integers, runtime/gemm_tuning.h) for g's
// shape and types (cublasLtMatmulAlgoCheck; g's pointers are not read).
bool lt_config_runs(const GemmArgs& g, const int32_t config[9]);

// Fills n elements of p (bf16 or f32) with values in [-1, 1] from a hash of (seed, index).
void fill_hashed(void* p, bool bf16, int64_t n, uint32_t seed, void* stream);

}  // namespace dflash::kernels::cuda
