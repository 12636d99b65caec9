// SwiGLU on the GPU: y = silu(g) * u, forward (16-byte accesses where aligned) and backward
// (a dtype flag per pointer). The sigmoid never takes exp of a positive argument, as on the CPU.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float v) {
  if (v >= 0.0f) return 1.0f / (1.0f + expf(-v));
  float e = expf(v);
  return e / (1.0f + e);
}

struct Swiglu {
  __device__ float operator()(float g, float u) const { return g * sigmoid(g) * u; }
};

// g, u, dy (n); dg, du (n) may be null.
//   dg += dy * u * sig * (1 + g * (1 - sig)),  du += dy * g * sig
__global__ void swiglu_backward_kernel(const void* g, const void* u, bool gu_bf16, const void* dy, bool dy_bf16,
                                       void* dg, bool dg_bf16, void* du, bool du_bf16, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float gi = load(g, gu_bf16, i), ui = load(u, gu_bf16, i), d = load(dy, dy_bf16, i);
    float s = sigmoid(gi);
    if (dg) accumulate_at(dg, dg_bf16, i, d * ui * s * (1.0f + gi * (1.0f - s)));
    if (du) accumulate_at(du, du_bf16, i, d * gi * s);
  }
}
}  // namespace

// g, u, y (n), one dtype.
void swiglu_forward(const void* g, const void* u, void* y, bool bf16, int64_t n, void* stream) {
  launch_map(g, u, y, bf16, n, Swiglu{}, stream, "swiglu_forward");
}

void swiglu_backward(const void* g, const void* u, bool gu_bf16, const void* dy, bool dy_bf16, void* dg, bool dg_bf16,
                     void* du, bool du_bf16, int64_t n, void* stream) {
  if (n == 0 || (!dg && !du)) return;
  swiglu_backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(g, u, gu_bf16, dy, dy_bf16, dg,
                                                                                    dg_bf16, du, du_bf16, n);
  check_launch("swiglu_backward");
}

}  // namespace dflash::kernels::cuda
