// Elementwise add, mul and scale on the GPU, forward and backward. Forward tensors share one
// dtype (f32 or bf16) and use 16-byte accesses where aligned; backward takes a flag per pointer.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Mul {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct Scale {
  float s;
  __device__ float operator()(float a, float) const { return a * s; }
};

// a, b, dy, da, db (n); da += dy * b and db += dy * a, each skipped when null.
__global__ void mul_backward_kernel(const void* a, const void* b, bool ab_bf16, const void* dy, bool dy_bf16, void* da,
                                    bool da_bf16, void* db, bool db_bf16, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float d = load(dy, dy_bf16, i);
    if (da) accumulate_at(da, da_bf16, i, d * load(b, ab_bf16, i));
    if (db) accumulate_at(db, db_bf16, i, d * load(a, ab_bf16, i));
  }
}

// dy, da (n); da += dy * s.
__global__ void scale_backward_kernel(const void* dy, bool dy_bf16, float s, void* da, bool da_bf16, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    accumulate_at(da, da_bf16, i, load(dy, dy_bf16, i) * s);
}
}  // namespace

// a, b, y (n)
void add_forward(const void* a, const void* b, void* y, bool bf16, int64_t n, void* stream) {
  launch_map(a, b, y, bf16, n, Add{}, stream, "add_forward");
}

void mul_forward(const void* a, const void* b, void* y, bool bf16, int64_t n, void* stream) {
  launch_map(a, b, y, bf16, n, Mul{}, stream, "mul_forward");
}

void mul_backward(const void* a, const void* b, bool ab_bf16, const void* dy, bool dy_bf16, void* da, bool da_bf16,
                  void* db, bool db_bf16, int64_t n, void* stream) {
  if (n == 0 || (!da && !db)) return;
  mul_backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(a, b, ab_bf16, dy, dy_bf16, da,
                                                                                 da_bf16, db, db_bf16, n);
  check_launch("mul_backward");
}

void scale_forward(const void* a, float s, void* y, bool bf16, int64_t n, void* stream) {
  launch_map(a, nullptr, y, bf16, n, Scale{s}, stream, "scale_forward");
}

void scale_backward(const void* dy, bool dy_bf16, float s, void* da, bool da_bf16, int64_t n, void* stream) {
  if (n == 0) return;
  scale_backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(dy, dy_bf16, s, da, da_bf16, n);
  check_launch("scale_backward");
}

}  // namespace dflash::kernels::cuda
