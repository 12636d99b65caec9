// Row-strided byte copies and fills on the GPU (any dtype): the first `width` bytes of each of
// `rows` rows, rows `pitch` bytes apart, in the widest unit (16, 4 or 1 bytes) that every
// address, width and pitch allows.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// dst row r [0, W) = src row r [0, W), in units U; pitches in units.
template <class U>
__global__ void strided_copy_kernel(const U* src, int64_t src_pitch, U* dst, int64_t dst_pitch, int64_t W,
                                    int64_t rows) {
  const int64_t n = rows * W;
  for (int64_t e = blockIdx.x * int64_t(kThreads) + threadIdx.x; e < n; e += int64_t(gridDim.x) * kThreads) {
    const int64_t r = e / W, k = e % W;
    dst[r * dst_pitch + k] = src[r * src_pitch + k];
  }
}

template <class U>
__global__ void strided_fill_kernel(U* dst, int64_t pitch, int64_t W, int64_t rows, U value) {
  const int64_t n = rows * W;
  for (int64_t e = blockIdx.x * int64_t(kThreads) + threadIdx.x; e < n; e += int64_t(gridDim.x) * kThreads)
    dst[(e / W) * pitch + e % W] = value;
}

size_t unit_for(std::initializer_list<uintptr_t> values) {
  uintptr_t all = 0;
  for (uintptr_t v : values) all |= v;
  return (all & 15u) == 0 ? 16 : (all & 3u) == 0 ? 4 : 1;
}
}  // namespace

void strided_copy(const void* src, size_t src_pitch, void* dst, size_t dst_pitch, size_t width, int64_t rows,
                  void* stream) {
  if (rows == 0 || width == 0) return;
  const size_t u = unit_for({uintptr_t(src), uintptr_t(dst), src_pitch, dst_pitch, width});
  const int64_t W = int64_t(width / u);
  const unsigned blocks = blocks_for(rows * W, kThreads);
  cudaStream_t s = as_stream(stream);
  if (u == 16)
    strided_copy_kernel<uint4><<<blocks, kThreads, 0, s>>>(static_cast<const uint4*>(src), int64_t(src_pitch / u),
                                                           static_cast<uint4*>(dst), int64_t(dst_pitch / u), W, rows);
  else if (u == 4)
    strided_copy_kernel<uint32_t><<<blocks, kThreads, 0, s>>>(static_cast<const uint32_t*>(src), int64_t(src_pitch / u),
                                                              static_cast<uint32_t*>(dst), int64_t(dst_pitch / u), W,
                                                              rows);
  else
    strided_copy_kernel<uint8_t><<<blocks, kThreads, 0, s>>>(static_cast<const uint8_t*>(src), int64_t(src_pitch),
                                                             static_cast<uint8_t*>(dst), int64_t(dst_pitch), W, rows);
  check_launch("strided_copy");
}

void strided_fill(void* dst, size_t pitch, size_t width, int64_t rows, uint8_t byte, void* stream) {
  if (rows == 0 || width == 0) return;
  const size_t u = unit_for({uintptr_t(dst), pitch, width});
  const int64_t W = int64_t(width / u);
  const unsigned blocks = blocks_for(rows * W, kThreads);
  cudaStream_t s = as_stream(stream);
  const uint32_t word = 0x01010101u * byte;
  if (u == 16)
    strided_fill_kernel<uint4><<<blocks, kThreads, 0, s>>>(static_cast<uint4*>(dst), int64_t(pitch / u), W, rows,
                                                           make_uint4(word, word, word, word));
  else if (u == 4)
    strided_fill_kernel<uint32_t><<<blocks, kThreads, 0, s>>>(static_cast<uint32_t*>(dst), int64_t(pitch / u), W, rows,
                                                              word);
  else
    strided_fill_kernel<uint8_t><<<blocks, kThreads, 0, s>>>(static_cast<uint8_t*>(dst), int64_t(pitch), W, rows, byte);
  check_launch("strided_fill");
}

}  // namespace dflash::kernels::cuda
