// Loss-weight normalisation and weighted accuracy on the GPU: one block, fixed reduction order.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// Block-wide sum in a fixed order (strided per thread, then a tree).
__device__ double block_sum(double v) {
  __shared__ double sh[kThreads];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  double r = sh[0];
  __syncthreads();
  return r;
}

__global__ void normalize_kernel(const float* w, int64_t n, float eps, float* out) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) s += w[i];
  float denom = float(block_sum(s)) + eps;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) out[i] = w[i] / denom;
}

__global__ void accuracy_kernel(const int32_t* argmax, const int32_t* labels, const float* w, int64_t n, float eps,
                                float* out) {
  double hits = 0, total = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    total += w[i];
    if (w[i] > 0.5f && argmax[i] == labels[i]) hits += 1;
  }
  hits = block_sum(hits);
  total = block_sum(total);
  if (threadIdx.x == 0) out[0] = float(hits / (total + eps));
}
}  // namespace

void normalize_weights(const float* w, int64_t n, float eps, float* out, void* stream) {
  normalize_kernel<<<1, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(w, n, eps, out);
  check_launch("normalize_weights");
}

void weighted_accuracy(const int32_t* argmax, const int32_t* labels, const float* w, int64_t n, float eps, float* out,
                       void* stream) {
  accuracy_kernel<<<1, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(argmax, labels, w, n, eps, out);
  check_launch("weighted_accuracy");
}

}  // namespace dflash::kernels::cuda
