// Fill, accumulate and copy on the GPU.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
__global__ void fill_kernel(void* p, bool bf16, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store(p, bf16, i, value);
}
__global__ void accumulate_kernel(void* dst, bool db, const void* src, bool sb, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store(dst, db, i, load(dst, db, i) + load(src, sb, i));
}
}  // namespace

void fill(void* p, bool bf16, int64_t n, float value, void* stream) {
  if (n == 0) return;
  fill_kernel<<<blocks_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(p, bf16, n, value);
  check_launch("fill");
}

void accumulate(void* dst, bool dst_bf16, const void* src, bool src_bf16, int64_t n, void* stream) {
  if (n == 0) return;
  accumulate_kernel<<<blocks_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(dst, dst_bf16, src, src_bf16, n);
  check_launch("accumulate");
}

void copy(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return;
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess) throw std::runtime_error(std::string("copy: cudaMemcpyAsync failed: ") + cudaGetErrorString(e));
}

}  // namespace dflash::kernels::cuda
