// Probe: ce_rows_forward's row kernel alone (linked with kernels/cuda/linear_ce.cu, or a copy of it
// with one feature taken out) at V = 320 in clusters of 1 or 2 CTAs, outside the test binary, so
// racecheck's failure on ce_rows_slice_kernel can be narrowed (scripts/gpu-check.sh racecheck-probe).
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {
void gemm(const GemmArgs&, void*, void*) { std::abort(); }  // linear_ce.cu's GEMMs: not called here
}  // namespace dflash::kernels::cuda

int main(int argc, char** argv) {
  const int C = argc > 1 ? std::atoi(argv[1]) : 1;
  const int64_t n = 4, V = 320;
  setenv("DFLASH_CE_SLICE_BYTES", std::to_string(V * 2 / C).c_str(), 1);
  std::vector<unsigned short> logits(n * V);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 0x3f80 + (i * 7919 % 97);  // bf16 near 1..2
  std::vector<int32_t> labels = {3, 170, -1, 319};
  std::vector<float> weights = {1.f, 0.5f, 1.f, 0.f};
  void *x, *d, *w, *lse, *ce, *am;
  int32_t* lab;
  cudaMalloc(&x, n * V * 2), cudaMalloc(&d, n * V * 2), cudaMalloc(&lab, n * 4), cudaMalloc(&w, n * 4);
  cudaMalloc(&lse, n * 4), cudaMalloc(&ce, n * 4), cudaMalloc(&am, n * 4);
  cudaMemcpy(x, logits.data(), n * V * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(lab, labels.data(), n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(w, weights.data(), n * 4, cudaMemcpyHostToDevice);
  std::printf("cluster size chosen: %d\n", dflash::kernels::cuda::ce_rows_cluster(x, d, true, V));
  dflash::kernels::cuda::ce_rows_forward(x, true, lab, static_cast<float*>(w), n, V, static_cast<float*>(lse),
                                         static_cast<float*>(ce), static_cast<int32_t*>(am), d, nullptr);
  const cudaError_t e = cudaDeviceSynchronize();
  float host[4] = {};
  cudaMemcpy(host, lse, sizeof host, cudaMemcpyDeviceToHost);
  std::printf("C %d: %s, lse[0] = %f\n", C, cudaGetErrorString(e), host[0]);
  return e == cudaSuccess ? 0 : 1;
}
