// Rotary position embedding on the GPU, rotate-half convention (HF Llama/Qwen), forward and
// backward. The angle is the f32 product float(pos) * inv_freq[i] and cos/sin are taken in f32
// (accurate sincosf, no fast math), as on the CPU.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// One thread per (row, i < hd/2) pair; the angle is shared by all heads of the row.
// x, y (rows, heads, hd): y[i] = x[i] c - x[i+half] s, y[i+half] = x[i+half] c + x[i] s.
// inverse = true applies R(-angle) and accumulates: dx[i] += dy[i] c + dy[i+half] s,
// dx[i+half] += dy[i+half] c - dy[i] s.
template <bool kInverse>
__global__ void rope_kernel(const void* x, bool x_bf16, const int32_t* positions, const float* inv_freq, void* y,
                            bool y_bf16, int64_t rows, int64_t heads, int64_t hd) {
  const int64_t half = hd / 2, pairs = rows * half;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < pairs; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = t / half, i = t % half;
    float sn, cs;
    sincosf(float(positions[r]) * inv_freq[i], &sn, &cs);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t lo = (r * heads + h) * hd + i, hi = lo + half;
      const float x1 = load(x, x_bf16, lo), x2 = load(x, x_bf16, hi);
      if (kInverse) {
        accumulate_at(y, y_bf16, lo, x1 * cs + x2 * sn);
        accumulate_at(y, y_bf16, hi, x2 * cs - x1 * sn);
      } else {
        store(y, y_bf16, lo, x1 * cs - x2 * sn);
        store(y, y_bf16, hi, x2 * cs + x1 * sn);
      }
    }
  }
}
}  // namespace

// x, y (rows, heads, hd) of one dtype; positions (rows); inv_freq (hd/2) f32.
void rope_forward(const void* x, const int32_t* positions, const float* inv_freq, void* y, bool bf16, int64_t rows,
                  int64_t heads, int64_t hd, void* stream) {
  const int64_t pairs = rows * (hd / 2);
  if (pairs == 0 || heads == 0) return;
  rope_kernel<false><<<blocks_for(pairs, kThreads), kThreads, 0, as_stream(stream)>>>(x, bf16, positions, inv_freq, y,
                                                                                     bf16, rows, heads, hd);
  check_launch("rope_forward");
}

// dy, dx (rows, heads, hd): dx += R(-angle) dy.
void rope_backward(const void* dy, bool dy_bf16, const int32_t* positions, const float* inv_freq, void* dx,
                   bool dx_bf16, int64_t rows, int64_t heads, int64_t hd, void* stream) {
  const int64_t pairs = rows * (hd / 2);
  if (pairs == 0 || heads == 0) return;
  rope_kernel<true><<<blocks_for(pairs, kThreads), kThreads, 0, as_stream(stream)>>>(dy, dy_bf16, positions, inv_freq,
                                                                                   dx, dx_bf16, rows, heads, hd);
  check_launch("rope_backward");
}

}  // namespace dflash::kernels::cuda
