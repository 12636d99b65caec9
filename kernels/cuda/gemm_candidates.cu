// cuBLASLt's candidate algorithms for one GEMM timed against cublasGemmEx's own choice (see
// gemm_candidates.h). The row-major mapping is gemm.cu's: C^T [N,M] = op(B)^T [N,K] op(A)^T [K,M].
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdio>
#include <functional>
#include <stdexcept>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_candidates.h"
#include "kernels/cuda/gemm_lt.h"

namespace dflash::kernels::cuda {

namespace {
void lt_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("gemm candidates: ") + what + " failed with cuBLAS status " +
                             std::to_string(int(st)));
}

template <class T>
__global__ void fill_hashed_kernel(T* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed * 2246822519u ^ uint32_t(i >> 32);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = from_float<T>(float(h & 0xFFFFFF) / float(0x800000) - 1.0f);
  }
}

}  // namespace

bool lt_config_runs(const GemmArgs& g, const int32_t config[9]) {
  try {
    const LtGemm d(g);
    (void)lt_algo_from(g, d, config);
    return true;
  } catch (const std::runtime_error&) {
    return false;
  }
}

void fill_hashed(void* p, bool bf16, int64_t n, uint32_t seed, void* stream) {
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, 4096));
  if (bf16) fill_hashed_kernel<<<blocks, 256, 0, as_stream(stream)>>>(static_cast<bf16_t*>(p), n, seed);
  else fill_hashed_kernel<<<blocks, 256, 0, as_stream(stream)>>>(static_cast<float*>(p), n, seed);
  check_launch("fill_hashed");
}

GemmCandidates time_gemm_candidates(const GemmArgs& g, void* cublas_handle, void* workspace, size_t workspace_bytes,
                                    void* stream, int max_candidates, int reps, const DeviceTimer& time_ms) {
  cudaStream_t s = as_stream(stream);
  // Mean of `reps` launches after one untimed launch.
  auto mean_ms = [&](const std::function<void()>& launch) {
    launch();
    return time_ms([&] {
      for (int i = 0; i < reps; ++i) launch();
    }) / reps;
  };
  GemmCandidates out;
  GemmArgs plain = g;
  plain.lt_config = nullptr;
  out.default_ms = mean_ms([&] { gemm(plain, cublas_handle, stream); });
  const LtGemm d(g);
  cublasLtMatmulPreference_t pref = nullptr;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = workspace_bytes;
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
           "MAX_WORKSPACE_BYTES");
  // Split-K reductions in a workspace buffer run in a fixed order; the in-place one is excluded.
  const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                                sizeof reductions),
           "REDUCTION_SCHEME_MASK");
  std::vector<cublasLtMatmulHeuristicResult_t> found(size_t(std::max(1, max_candidates)));
  int returned = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_handle(), d.op, d.first, d.second, d.c, d.c, pref,
                                                           int(found.size()), found.data(), &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  lt_check(st, "cublasLtMatmulAlgoGetHeuristic");
  for (int i = 0; i < returned; ++i) {
    const cublasLtMatmulHeuristicResult_t& r = found[size_t(i)];
    if (r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > workspace_bytes) continue;
    GemmCandidate cand;
    lt_config_of(r.algo, cand.config_values);
    const int32_t* c = cand.config_values;
    char text[200];
    std::snprintf(text, sizeof text, "algo %d tile %d stages %d splitk %d reduction %d swizzle %d custom %d inner %d cluster %d waves %.2f",
                  c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], double(r.wavesCount));
    cand.config = text;
    cand.workspace = r.workspaceSize;
    cand.ms = mean_ms([&] { d.run(g, r.algo, workspace, workspace_bytes, s); });
    out.candidates.push_back(cand);
  }
  return out;
}

}  // namespace dflash::kernels::cuda
