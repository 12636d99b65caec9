// cuBLASLt's candidate algorithms for one GEMM timed against cublasGemmEx's own choice (see
// gemm_candidates.h). The row-major mapping is gemm.cu's: C^T [N,M] = op(B)^T [N,K] op(A)^T [K,M].
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_candidates.h"
#include "kernels/cuda/gemm_lt.h"

namespace dflash::kernels::cuda {

namespace {
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

// out[0] = max over C of max(0, |c - r| - allowance |r|) (+inf where c is not finite), out[1] =
// max |r|, as float bits: non-negative floats order like their bits, so atomicMax is exact.
template <class T>
__global__ void compare_kernel(const T* c, const T* r, int64_t M, int64_t N, int64_t ldc, float allowance,
                               unsigned* out) {
  float excess = 0.0f, largest = 0.0f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * N; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = (i / N) * ldc + i % N;
    const float cv = to_float(c[e]), rv = to_float(r[e]);
    const float d = isfinite(cv) ? fabsf(cv - rv) - allowance * fabsf(rv) : INFINITY;
    excess = fmaxf(excess, d);
    largest = fmaxf(largest, fabsf(rv));
  }
  atomicMax(&out[0], __float_as_uint(excess));
  atomicMax(&out[1], __float_as_uint(largest));
}

size_t aligned(size_t bytes) { return (bytes + 255) & ~size_t(255); }
size_t c_extent(const GemmArgs& g) { return size_t((g.M - 1) * g.ldc + g.N) * (g.c_bf16 ? 2 : 4); }
}  // namespace

size_t gemm_check_bytes(const GemmArgs& g) { return 2 * aligned(c_extent(g)) + 256; }

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
                                    void* stream, int max_candidates, int reps, const DeviceTimer& time_ms,
                                    void* check) {
  cudaStream_t s = as_stream(stream);
  // check: [C as given][cublasGemmEx's result from it][2 result words]
  const size_t extent = c_extent(g);
  char* saved = static_cast<char*>(check);
  char* reference = saved + aligned(extent);
  unsigned* result = reinterpret_cast<unsigned*>(reference + aligned(extent));
  auto cuda_ok = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string("gemm candidates: ") + what + ": " + cudaGetErrorString(e));
  };
  auto restore_c = [&] { cuda_ok(cudaMemcpyAsync(g.C, saved, extent, cudaMemcpyDeviceToDevice, s), "restoring C"); };
  // (max excess, max |reference|) of C against the reference, read back.
  auto compare = [&] {
    cuda_ok(cudaMemsetAsync(result, 0, 2 * sizeof(unsigned), s), "clearing the comparison");
    const float allowance = g.c_bf16 ? 1.0f / 128.0f : 0.0f;
    const unsigned blocks = unsigned(std::min<int64_t>((g.M * g.N + 255) / 256, 1024));
    if (g.c_bf16)
      compare_kernel<<<blocks, 256, 0, s>>>(static_cast<const bf16_t*>(g.C), reinterpret_cast<const bf16_t*>(reference),
                                            g.M, g.N, g.ldc, allowance, result);
    else
      compare_kernel<<<blocks, 256, 0, s>>>(static_cast<const float*>(g.C), reinterpret_cast<const float*>(reference),
                                            g.M, g.N, g.ldc, allowance, result);
    check_launch("gemm candidates: compare");
    unsigned host[2] = {};
    cuda_ok(cudaMemcpyAsync(host, result, sizeof host, cudaMemcpyDeviceToHost, s), "reading the comparison");
    cuda_ok(cudaStreamSynchronize(s), "the comparison");
    float excess, largest;
    std::memcpy(&excess, &host[0], 4);
    std::memcpy(&largest, &host[1], 4);
    return !std::isfinite(excess) ? INFINITY : largest > 0 ? double(excess) / double(largest) : double(excess);
  };
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
  cuda_ok(cudaMemcpyAsync(saved, g.C, extent, cudaMemcpyDeviceToDevice, s), "saving C");
  gemm(plain, cublas_handle, stream);
  cuda_ok(cudaMemcpyAsync(reference, g.C, extent, cudaMemcpyDeviceToDevice, s), "keeping cuBLAS's result");
  out.default_ms = mean_ms([&] { gemm(plain, cublas_handle, stream); });
  const LtGemm d(g);
  const std::vector<cublasLtMatmulHeuristicResult_t> found = lt_heuristics(g, d, workspace_bytes, max_candidates);
  const int returned = int(found.size());
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
    restore_c();
    d.run(g, r.algo, workspace, workspace_bytes, s);
    cand.error = compare();
    cand.agrees = cand.error <= kMaxCandidateError;
    if (cand.agrees) cand.ms = mean_ms([&] { d.run(g, r.algo, workspace, workspace_bytes, s); });
    out.candidates.push_back(cand);
  }
  out.default_after_ms = mean_ms([&] { gemm(plain, cublas_handle, stream); });
  restore_c();
  return out;
}

}  // namespace dflash::kernels::cuda
