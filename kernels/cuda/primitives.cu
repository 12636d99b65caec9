// Fill, accumulate and copy on the GPU. Fill and accumulate are templated on each pointer's dtype
// and move 8-element packs (16-byte accesses) when every pointer is 16-byte aligned.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// p (n) = value; packs [0, packs) as packs, the elements after them one by one.
template <class T>
__global__ void __launch_bounds__(kThreads) fill_kernel(T* p, int64_t n, int64_t packs, float value) {
  const int64_t stride = int64_t(gridDim.x) * kThreads, first = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  float v[kPack];
#pragma unroll
  for (int j = 0; j < kPack; ++j) v[j] = value;
  for (int64_t k = first; k < packs; k += stride) store_pack(p + k * kPack, v);
  for (int64_t i = packs * kPack + first; i < n; i += stride) p[i] = from_float<T>(value);
}

// dst (n) += src (n): the sum in f32, rounded once to dst's dtype (as the scalar kernel before).
template <class D, class S>
__global__ void __launch_bounds__(kThreads) accumulate_kernel(D* dst, const S* src, int64_t n, int64_t packs) {
  const int64_t stride = int64_t(gridDim.x) * kThreads, first = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  for (int64_t k = first; k < packs; k += stride) {
    float d[kPack], s[kPack];
    load_pack(dst + k * kPack, d);
    load_pack(src + k * kPack, s);
#pragma unroll
    for (int j = 0; j < kPack; ++j) d[j] = __fadd_rn(d[j], s[j]);
    store_pack(dst + k * kPack, d);
  }
  for (int64_t i = packs * kPack + first; i < n; i += stride) dst[i] = from_float<D>(__fadd_rn(to_float(dst[i]), to_float(src[i])));
}

// dst (bytes) = src (bytes), device to device: uint4 packs [0, packs), then the bytes after them.
// A kernel rather than a copy node, so that compute-sanitizer's initcheck checks the source when
// the copy runs: a graph's memcpy node is checked at cudaGraphLaunch, before the kernel nodes
// that write its source have run.
__global__ void __launch_bounds__(kThreads) copy_kernel(unsigned char* dst, const unsigned char* src, int64_t bytes,
                                                        int64_t packs) {
  const int64_t stride = int64_t(gridDim.x) * kThreads, first = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  for (int64_t k = first; k < packs; k += stride)
    reinterpret_cast<uint4*>(dst)[k] = reinterpret_cast<const uint4*>(src)[k];
  for (int64_t i = packs * 16 + first; i < bytes; i += stride) dst[i] = src[i];
}

// Whole packs when every pointer allows 16-byte accesses, else none (all elements one by one).
int64_t packs_of(int64_t n, bool aligned) { return aligned ? n / kPack : 0; }
int64_t work_items(int64_t n, int64_t packs) { return packs > 0 ? packs : n; }
}  // namespace

void fill(void* p, bool bf16, int64_t n, float value, void* stream) {
  if (n == 0) return;
  const int64_t packs = packs_of(n, aligned16(p));
  with_dtype(bf16, [&](auto t) {
    using T = typename decltype(t)::type;
    fill_kernel<T><<<grid_for<fill_kernel<T>>(work_items(n, packs), kThreads), kThreads, 0, as_stream(stream)>>>(
        static_cast<T*>(p), n, packs, value);
  });
  check_launch("fill");
}

void accumulate(void* dst, bool dst_bf16, const void* src, bool src_bf16, int64_t n, void* stream) {
  if (n == 0) return;
  const int64_t packs = packs_of(n, aligned16(dst) && aligned16(src));
  with_dtype(dst_bf16, [&](auto td) {
    with_dtype(src_bf16, [&](auto ts) {
      using D = typename decltype(td)::type;
      using S = typename decltype(ts)::type;
      accumulate_kernel<D, S><<<grid_for<accumulate_kernel<D, S>>(work_items(n, packs), kThreads), kThreads, 0,
                                as_stream(stream)>>>(static_cast<D*>(dst), static_cast<const S*>(src), n, packs);
    });
  });
  check_launch("accumulate");
}

void copy_on_device(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return;
  const int64_t n = int64_t(bytes), packs = aligned16(dst) && aligned16(src) ? n / 16 : 0;
  copy_kernel<<<grid_for<copy_kernel>(work_items(n, packs), kThreads), kThreads, 0, as_stream(stream)>>>(
      static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), n, packs);
  check_launch("copy");
}

void copy(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return;
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess) throw std::runtime_error(std::string("copy: cudaMemcpyAsync failed: ") + cudaGetErrorString(e));
}

}  // namespace dflash::kernels::cuda
