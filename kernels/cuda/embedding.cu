// Embedding on the GPU: row lookup in a [V, H] table (a byte copy, any float dtype), and its
// backward, a scatter-add in which every table element sums its rows in order of position, as
// on the CPU: deterministic, without atomics and without scratch.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 128;
constexpr int kIdsPerBlock = 4096;  // table rows one backward block owns
constexpr int kIdTile = 1024;       // ids staged in shared memory at a time

// table (V, row_units), ids (n), out (n, row_units) in units of U bytes.
template <class U>
__global__ void embedding_forward_kernel(const U* table, const int32_t* ids, U* out, int64_t n, int64_t row_units) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const U* src = table + int64_t(ids[i]) * row_units;
    U* dst = out + i * row_units;
    for (int64_t j = threadIdx.x; j < row_units; j += blockDim.x) dst[j] = src[j];
  }
}

template <class U>
void launch_forward(const void* table, const int32_t* ids, void* out, int64_t n, size_t row_bytes, cudaStream_t s) {
  int64_t units = int64_t(row_bytes / sizeof(U));
  unsigned grid = unsigned(n < 65535 * 16 ? n : 65535 * 16);
  embedding_forward_kernel<U><<<grid, kThreads, 0, s>>>(static_cast<const U*>(table), ids, static_cast<U*>(out), n,
                                                         units);
}

// ids (n), dout (n, H), dtable (V, H). Block (x, y) owns columns [x*kThreads, +kThreads) of table
// rows [y*kIdsPerBlock, +kIdsPerBlock); each thread walks all positions in order, so element
// (v, j) receives dout[i, j] for every i with ids[i] == v, in increasing i.
__global__ void embedding_backward_kernel(const int32_t* ids, const void* dout, bool dout_bf16, void* dtable,
                                          bool dtable_bf16, int64_t n, int64_t H) {
  __shared__ int32_t tile[kIdTile];
  const int64_t v0 = int64_t(blockIdx.y) * kIdsPerBlock;
  const int64_t j = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  for (int64_t t0 = 0; t0 < n; t0 += kIdTile) {
    const int m = int(n - t0 < kIdTile ? n - t0 : kIdTile);
    __syncthreads();
    for (int k = threadIdx.x; k < m; k += kThreads) tile[k] = ids[t0 + k];
    __syncthreads();
    if (j >= H) continue;
    for (int k = 0; k < m; ++k) {
      const int64_t row = int64_t(tile[k]) - v0;
      if (row < 0 || row >= kIdsPerBlock) continue;
      accumulate_at(dtable, dtable_bf16, (v0 + row) * H + j, load(dout, dout_bf16, (t0 + k) * H + j));
    }
  }
}
}  // namespace

// table (V, H), ids (n), out (n, H); row_bytes = H * element size.
void embedding_forward(const void* table, const int32_t* ids, void* out, size_t row_bytes, int64_t n, void* stream) {
  if (n == 0 || row_bytes == 0) return;
  cudaStream_t s = as_stream(stream);
  auto fits = [&](size_t u) {
    return row_bytes % u == 0 && reinterpret_cast<uintptr_t>(table) % u == 0 && reinterpret_cast<uintptr_t>(out) % u == 0;
  };
  if (fits(16)) launch_forward<uint4>(table, ids, out, n, row_bytes, s);
  else if (fits(8)) launch_forward<uint2>(table, ids, out, n, row_bytes, s);
  else if (fits(4)) launch_forward<uint32_t>(table, ids, out, n, row_bytes, s);
  else launch_forward<uint16_t>(table, ids, out, n, row_bytes, s);
  check_launch("embedding_forward");
}

void embedding_backward(const int32_t* ids, const void* dout, bool dout_bf16, void* dtable, bool dtable_bf16, int64_t n,
                        int64_t V, int64_t H, void* stream) {
  if (n == 0 || H == 0 || V == 0) return;
  dim3 grid(unsigned((H + kThreads - 1) / kThreads), unsigned((V + kIdsPerBlock - 1) / kIdsPerBlock));
  embedding_backward_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(ids, dout, dout_bf16, dtable, dtable_bf16, n, H);
  check_launch("embedding_backward");
}

}  // namespace dflash::kernels::cuda
