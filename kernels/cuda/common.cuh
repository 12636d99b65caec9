// Shared device helpers: bf16/f32 loads and stores, 16-byte vectors and 8-element packs, dtype
// dispatch at launch, grids sized to the GPU, fixed-order warp and block reductions, a vectorised
// elementwise map, launch checks.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace dflash::kernels::cuda {

using bf16_t = __nv_bfloat16;

inline void check_launch(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": CUDA launch failed: " + cudaGetErrorString(e));
}

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// Element access with the dtype chosen at run time (one flag per pointer).
__device__ __forceinline__ float load(const void* p, bool bf16, int64_t i) {
  return bf16 ? __bfloat162float(static_cast<const bf16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void store(void* p, bool bf16, int64_t i, float v) {
  if (bf16) static_cast<bf16_t*>(p)[i] = __float2bfloat16(v);
  else static_cast<float*>(p)[i] = v;
}
// p[i] += v, the sum taken in f32 and rounded once to p's dtype.
__device__ __forceinline__ void accumulate_at(void* p, bool bf16, int64_t i, float v) {
  store(p, bf16, i, load(p, bf16, i) + v);
}

// Element access with the dtype chosen at compile time (templated kernels).
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(bf16_t v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ bf16_t from_float<bf16_t>(float v) { return __float2bfloat16(v); }

// 2^x with flush to zero (one MUFU.EX2; exp2(-inf) = 0, NaN for NaN). Deterministic: same input,
// same bits.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 1/x within 1 ulp (one MUFU.RCP, flush to zero); for x in [1, 2], where no operand or result is
// denormal, infinite or NaN. Deterministic: same input, same bits.
__device__ __forceinline__ float rcp_approx_ftz(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// N elements of T loaded or stored as one access (16 bytes when N * sizeof(T) == 16).
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ---- 8-element packs: the unit of the vectorised memory-bound kernels ----
// A pack is 8 consecutive elements starting at an element index that is a multiple of 8: one
// 16-byte access for bf16, two for f32. Every pack of a pointer is 16-byte aligned exactly when
// the pointer is, so a kernel takes the pack path when all its pointers are aligned16() and does
// the elements past the last whole pack one by one. bf16 -> f32 is exact (the bits shifted up);
// f32 -> bf16 rounds to nearest even (cvt.rn, as __float2bfloat16).
constexpr int kPack = 8;

// The raw bits of one pack, for holding loads in as few registers as the dtype needs (4 for bf16)
// until they are used.
template <class T>
struct RawPack;
template <>
struct RawPack<float> {
  float4 a, b;
};
template <>
struct RawPack<bf16_t> {
  uint4 u;
};
__device__ __forceinline__ RawPack<float> load_raw(const float* p) {
  return {reinterpret_cast<const float4*>(p)[0], reinterpret_cast<const float4*>(p)[1]};
}
__device__ __forceinline__ RawPack<bf16_t> load_raw(const bf16_t* p) { return {*reinterpret_cast<const uint4*>(p)}; }
__device__ __forceinline__ void unpack(const RawPack<float>& r, float (&v)[kPack]) {
  v[0] = r.a.x, v[1] = r.a.y, v[2] = r.a.z, v[3] = r.a.w, v[4] = r.b.x, v[5] = r.b.y, v[6] = r.b.z, v[7] = r.b.w;
}
__device__ __forceinline__ void unpack(const RawPack<bf16_t>& r, float (&v)[kPack]) {
  const uint32_t w[4] = {r.u.x, r.u.y, r.u.z, r.u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = __uint_as_float(w[k] << 16);  // the lower address holds the even element
    v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}
template <class T>
__device__ __forceinline__ void load_pack(const T* p, float (&v)[kPack]) {
  unpack(load_raw(p), v);
}
__device__ __forceinline__ void store_pack(float* p, const float (&v)[kPack]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // each half rounded like __float2bfloat16
  uint32_t w;
  memcpy(&w, &h, sizeof(w));
  return w;
}
__device__ __forceinline__ void store_pack(bf16_t* p, const float (&v)[kPack]) {
  *reinterpret_cast<uint4*>(p) =
      make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
}

// ---- 16-byte words: a row held in registers ----
// One 16-byte access (16 / sizeof(T) elements, a power of two) kept as four 32-bit words. A kernel
// that holds a whole row this way needs 4 registers per access; held as Vec<bf16_t, 8> the values
// pass through 16-bit registers, and ptxas gave each its own (rmsnorm's resident forward: 148
// registers instead of 80 for a 4096-wide bf16 row over 32 lanes).
template <class T>
struct Words16 {
  static constexpr int kElems = 16 / int(sizeof(T));
  uint4 u;
};
template <class T>
__device__ __forceinline__ Words16<T> load_words16(const T* p) {
  return {*reinterpret_cast<const uint4*>(p)};
}
template <class T>
__device__ __forceinline__ void store_words16(T* p, const Words16<T>& w) {
  *reinterpret_cast<uint4*>(p) = w.u;
}
// Claims (by an empty asm) to rewrite the words, so floats unpacked from them before this point are
// unpacked again after it instead of staying live beside them (a row's second pass then needs 4
// registers an access, not 12; add_rmsnorm at bf16, P = 16: 118 registers, without it 128 and spills).
template <class T>
__device__ __forceinline__ void hold_words(Words16<T>& w) {
  asm volatile("" : "+r"(w.u.x), "+r"(w.u.y), "+r"(w.u.z), "+r"(w.u.w));
}
__device__ __forceinline__ void to_floats(const Words16<bf16_t>& w, float (&v)[8]) { unpack(RawPack<bf16_t>{w.u}, v); }
__device__ __forceinline__ void to_floats(const Words16<float>& w, float (&v)[4]) {
  v[0] = __uint_as_float(w.u.x), v[1] = __uint_as_float(w.u.y), v[2] = __uint_as_float(w.u.z),
  v[3] = __uint_as_float(w.u.w);
}
// Rounded to T as from_float<T> rounds each element.
template <class T>
__device__ __forceinline__ Words16<T> from_floats(const float (&v)[Words16<T>::kElems]) {
  if constexpr (std::is_same_v<T, bf16_t>)
    return {make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]))};
  else
    return {make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]))};
}

// ---- dtype dispatch at launch ----
// with_dtype(flag, f) calls f(Type<bf16_t>{}) when flag is set, f(Type<float>{}) otherwise, so a
// launcher instantiates one kernel per combination of pointer dtypes (no per-element branches).
template <class T>
struct Type {
  using type = T;
};
template <class F>
decltype(auto) with_dtype(bool bf16, F&& f) {
  if (bf16) return f(Type<bf16_t>{});
  return f(Type<float>{});
}

// ---- grids sized to the GPU ----
// Streaming multiprocessors of the current device, queried once per device.
inline int sm_count() {
  static std::atomic<int> cached[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    (void)cudaGetLastError();
    return 132;
  }
  int n = cached[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
      (void)cudaGetLastError();
      n = 132;
    }
    cached[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

// Blocks of `threads` for a grid-stride loop of Kernel over `items` work units: one full wave
// (as many blocks as every SM holds at once, from the occupancy calculator, queried once per
// kernel; each kernel is launched with one block size), or fewer when the work is smaller. Only
// the speed depends on it: kernels whose results depend on the grid use fixed grids instead.
template <auto Kernel>
unsigned grid_for(int64_t items, int threads) {
  static std::atomic<int> per_sm{0};
  int b = per_sm.load(std::memory_order_relaxed);
  if (b == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, threads, 0) != cudaSuccess || b <= 0) {
      (void)cudaGetLastError();
      b = 1;
    }
    per_sm.store(b, std::memory_order_relaxed);
  }
  const int64_t wave = int64_t(b) * sm_count(), need = (items + threads - 1) / threads;
  return unsigned(need < 1 ? 1 : need < wave ? need : wave);
}

inline unsigned blocks_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > 65535 * 32 ? 65535 * 32 : b));
}

// Register-resident rows of `packs` packs (rmsnorm.cu's resident layout, which the fused norms
// copy for its sum order): the lanes a row takes, the smallest power of two >= packs and at most
// 32, and 0 when the row does not split into them evenly.
inline int64_t resident_row_lanes(int64_t packs) {
  int64_t G = 32;
  while (G > 1 && G / 2 >= packs) G /= 2;
  return packs % G == 0 ? G : 0;
}
// A resident launch: the rows a block takes and whether a lane loads its weights before its stores.
// Full blocks (threads / G rows) when they fill every SM. A smaller grid is latency-bound (a warp's
// round trips to memory set its time, not the bandwidth): there a block takes fewer rows, down to one
// warp, so that more SMs share them, and the weights are loaded ahead of the stores (the compiler
// must assume that a store may alias them, so a load after a store waits for it: P round trips).
struct ResidentLaunch {
  int rows_per_block;
  bool weights_ahead;
};
inline ResidentLaunch resident_launch(int64_t rows, int64_t G, int threads) {
  const int full = int(threads / G), least = G >= 32 ? 1 : int(32 / G);
  const int64_t sms = sm_count();
  if ((rows + full - 1) / full >= sms) return {full, false};
  int per = full;
  while (per > least && (rows + per - 1) / per < sms) per /= 2;
  return {per, true};
}
// go(std::integral_constant<int, P>{}) for P packs a lane in {1, 2, 4, 8, 16}; false for others.
template <class F>
bool with_packs_per_lane(int64_t P, F&& go) {
  switch (P) {
    case 1: go(std::integral_constant<int, 1>{}); return true;
    case 2: go(std::integral_constant<int, 2>{}); return true;
    case 4: go(std::integral_constant<int, 4>{}); return true;
    case 8: go(std::integral_constant<int, 8>{}); return true;
    case 16: go(std::integral_constant<int, 16>{}); return true;
    default: return false;
  }
}

// A resident row's two passes, shared by rmsnorm's resident forward and the target's add_rmsnorm so
// both keep one sum order. Lane q of the row's G holds packs q, q + G, ... as words (rows past the
// end hold zeros and still call the first, which every lane of the warp must reach).
// The row's sum of squares: each lane's in pack order, then a butterfly over the G lanes.
template <class T, int P>
__device__ __forceinline__ float resident_row_square_sum(const Words16<T> (&v)[P], int G) {
  constexpr int N = Words16<T>::kElems;
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < P; ++k) {
    float f[N];
    to_floats(v[k], f);
#pragma unroll
    for (int i = 0; i < N; ++i) ss += f[i] * f[i];
  }
  for (int o = G / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  return ss;
}
// y_row = x * s * w, each pack rounded to T, from the held words (w: the row's D weights); with
// Ahead, all of the lane's weights are loaded before its first store (ResidentLaunch).
template <class T, int P, bool Ahead>
__device__ __forceinline__ void store_resident_row_normed(const Words16<T> (&v)[P], float s, const T* w, T* y_row,
                                                          int G, int q) {
  constexpr int N = Words16<T>::kElems;
  auto at = [&](int k) { return (int64_t(k) * G + q) * N; };
  auto store = [&](int k, const Words16<T>& wk) {
    float f[N], wf[N];
    to_floats(v[k], f);
    to_floats(wk, wf);
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = f[i] * s * wf[i];
    store_words16(y_row + at(k), from_floats<T>(f));
  };
  if constexpr (Ahead) {
    Words16<T> wv[P];
#pragma unroll
    for (int k = 0; k < P; ++k) wv[k] = load_words16(w + at(k));
#pragma unroll
    for (int k = 0; k < P; ++k) store(k, wv[k]);
  } else {
#pragma unroll
    for (int k = 0; k < P; ++k) store(k, load_words16(w + at(k)));
  }
}

// Butterfly sum over a full warp: every lane ends with the same bits, in a fixed order.
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);  // offsets 16 to 1: all 32 lanes
  return v;
}

// Sum over a block of Threads threads (a multiple of 32): warps first, then warp totals in
// warp order. Every thread gets the result. sh holds Threads / 32 values.
template <int Threads, class T>
__device__ __forceinline__ T block_sum(T v, T* sh) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // sh may still be read from an earlier call
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  T total = sh[0];
  for (int w = 1; w < Threads / 32; ++w) total += sh[w];
  return total;
}

// y = f(a, b) elementwise over n elements of T; b may be null (then f sees 0). N elements per
// access; the tail past a multiple of N is done one by one.
template <class T, int N, class F>
__global__ void map_kernel(const T* a, const T* b, T* y, int64_t n, F f) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t nvec = n / N;
  for (int64_t i = first; i < nvec; i += stride) {
    Vec<T, N> va = reinterpret_cast<const Vec<T, N>*>(a)[i], vb{}, vy;
    if (b) vb = reinterpret_cast<const Vec<T, N>*>(b)[i];
#pragma unroll
    for (int k = 0; k < N; ++k) vy.v[k] = from_float<T>(f(to_float(va.v[k]), b ? to_float(vb.v[k]) : 0.0f));
    reinterpret_cast<Vec<T, N>*>(y)[i] = vy;
  }
  for (int64_t i = nvec * N + first; i < n; i += stride)
    y[i] = from_float<T>(f(to_float(a[i]), b ? to_float(b[i]) : 0.0f));
}

// Launches map_kernel for f32 or bf16 tensors, 16-byte accesses when every pointer allows them.
template <class F>
void launch_map(const void* a, const void* b, void* y, bool bf16, int64_t n, F f, void* stream, const char* what) {
  if (n == 0) return;
  const bool vec = aligned16(a) && (!b || aligned16(b)) && aligned16(y);
  constexpr int kThreads = 256;
  cudaStream_t s = as_stream(stream);
  if (bf16) {
    auto pa = static_cast<const bf16_t*>(a), pb = static_cast<const bf16_t*>(b);
    auto py = static_cast<bf16_t*>(y);
    if (vec) map_kernel<bf16_t, 8><<<blocks_for(n / 8 + 1, kThreads), kThreads, 0, s>>>(pa, pb, py, n, f);
    else map_kernel<bf16_t, 1><<<blocks_for(n, kThreads), kThreads, 0, s>>>(pa, pb, py, n, f);
  } else {
    auto pa = static_cast<const float*>(a), pb = static_cast<const float*>(b);
    auto py = static_cast<float*>(y);
    if (vec) map_kernel<float, 4><<<blocks_for(n / 4 + 1, kThreads), kThreads, 0, s>>>(pa, pb, py, n, f);
    else map_kernel<float, 1><<<blocks_for(n, kThreads), kThreads, 0, s>>>(pa, pb, py, n, f);
  }
  check_launch(what);
}

}  // namespace dflash::kernels::cuda
