// Forward-only fusions for the frozen target on the GPU: the residual add with the RMSNorm after
// it, and the per-head RMSNorm of q and k with the RoPE after it. Each writes exactly the bits of
// the unfused kernels (add then rmsnorm; rmsnorm then rope) and reads its input once; shapes the
// fused kernels do not cover run the unfused kernels instead.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// a, b, r, y (rows, D), w (D): r = a + b rounded to T (add_forward's map), then y = rmsnorm(r) * w
// with rmsnorm_forward_resident_kernel's layout (G lanes a row, P packs a lane) and sum order.
// Loads first: every pack of a, then of b, then the sums are stored (a store between the loads
// would serialise them, as r may alias nothing the compiler can prove).
template <class T, int N, int P>
__global__ void __launch_bounds__(kThreads)
    add_rmsnorm_kernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ w,
                       T* __restrict__ r_out, T* __restrict__ y, int64_t rows, int64_t D, float eps, int G) {
  const int q = int(threadIdx.x) % G;
  const int64_t r = blockIdx.x * int64_t(kThreads / G) + threadIdx.x / G;
  const bool on = r < rows;
  Vec<T, N> v[P];
#pragma unroll
  for (int k = 0; k < P; ++k)
    if (on) v[k] = *reinterpret_cast<const Vec<T, N>*>(a + r * D + (int64_t(k) * G + q) * N);
#pragma unroll
  for (int k = 0; k < P; ++k) {
    if (!on) continue;
    const Vec<T, N> vb = *reinterpret_cast<const Vec<T, N>*>(b + r * D + (int64_t(k) * G + q) * N);
#pragma unroll
    for (int i = 0; i < N; ++i) v[k].v[i] = from_float<T>(to_float(v[k].v[i]) + to_float(vb.v[i]));
  }
#pragma unroll
  for (int k = 0; k < P; ++k)
    if (on) *reinterpret_cast<Vec<T, N>*>(r_out + r * D + (int64_t(k) * G + q) * N) = v[k];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < P; ++k)
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float f = on ? to_float(v[k].v[i]) : 0.0f;
      ss += f * f;
    }
  for (int o = G / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (!on) return;
  const float s = 1.0f / sqrtf(ss / float(D) + eps);
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const int64_t j = (int64_t(k) * G + q) * N;
    const Vec<T, N> wv = *reinterpret_cast<const Vec<T, N>*>(w + j);
    Vec<T, N> o;
#pragma unroll
    for (int i = 0; i < N; ++i) o.v[i] = from_float<T>(to_float(v[k].v[i]) * s * to_float(wv.v[i]));
    *reinterpret_cast<Vec<T, N>*>(y + r * D + j) = o;
  }
}

template <class T, int N>
bool launch_add_rmsnorm(const void* a, const void* b, const void* w, void* r, void* y, int64_t rows, int64_t D,
                        float eps, cudaStream_t s) {
  if (D % N != 0) return false;
  const int64_t G = resident_row_lanes(D / N);
  if (G == 0) return false;
  const unsigned grid = unsigned((rows + kThreads / G - 1) / (kThreads / G));
  return with_packs_per_lane(D / N / G, [&](auto p_tag) {
    add_rmsnorm_kernel<T, N, decltype(p_tag)::value><<<grid, kThreads, 0, s>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(w), static_cast<T*>(r),
        static_cast<T*>(y), rows, D, eps, int(G));
  });
}

// q (rows, hq, hd), k (rows, hk, hd), one position per row: each head's x -> rope(rmsnorm(x) * w),
// w = wq or wk. One block per row: its hd/2 angles are taken once (rope_kernel's f32 product and
// accurate sincosf) and shared by the row's hq + hk heads; a head is a segment of G = hd/N lanes,
// one pack a lane (the resident rmsnorm with P = 1: the same sum order), and lane l's rotation
// partner is lane l ^ G/2, which holds the elements hd/2 further on. The normed values are rounded
// to T before the rotation, as the unfused rope reads them. Every lane of a warp runs the same
// number of head iterations, so the shuffles always see the whole warp.
template <class T, int N>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_rope_kernel(const T* q, const T* k, const T* wq, const T* wk, const int32_t* positions,
                        const float* inv_freq, T* yq, T* yk, int64_t hq, int64_t hk, int hd, float eps) {
  extern __shared__ float angles[];  // cos [hd/2], then sin [hd/2]
  const int half = hd / 2, G = hd / N, seg = int(threadIdx.x) / G, lane = int(threadIdx.x) % G;
  float* cs = angles;
  float* sn = angles + half;
  const int64_t row = blockIdx.x;
  const float pos = float(positions[row]);
  for (int i = threadIdx.x; i < half; i += kThreads) sincosf(pos * inv_freq[i], &sn[i], &cs[i]);
  __syncthreads();
  const int segs = kThreads / G;
  const bool low = lane < G / 2;  // holds x1 of its pairs (element index < hd/2)
  const int f0 = (low ? lane : lane - G / 2) * N;
  for (int64_t base = 0; base < hq + hk; base += segs) {
    const int64_t h = base + seg;
    const bool on = h < hq + hk, is_q = h < hq;
    const int64_t at = is_q ? (row * hq + h) * hd : (row * hk + (h - hq)) * hd;
    const T* x = is_q ? q : k;
    const T* w = is_q ? wq : wk;
    Vec<T, N> v{}, wv{};
    if (on) {
      v = *reinterpret_cast<const Vec<T, N>*>(x + at + lane * N);
      wv = *reinterpret_cast<const Vec<T, N>*>(w + lane * N);
    }
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float f = on ? to_float(v.v[i]) : 0.0f;
      ss += f * f;
    }
    for (int o = G / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float s = 1.0f / sqrtf(ss / float(hd) + eps);
    float mine[N], other[N];
#pragma unroll
    for (int i = 0; i < N; ++i) mine[i] = to_float(from_float<T>(to_float(v.v[i]) * s * to_float(wv.v[i])));
#pragma unroll
    for (int i = 0; i < N; ++i) other[i] = __shfl_xor_sync(0xffffffffu, mine[i], G / 2);
    if (!on) continue;
    Vec<T, N> o;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float c = cs[f0 + i], sgn = sn[f0 + i];
      // rope.cu's Rotate::forward: y1 = x1 c - x2 s, y2 = x2 c + x1 s
      const float out = low ? __fmaf_rn(mine[i], c, -__fmul_rn(other[i], sgn))
                            : __fmaf_rn(other[i], sgn, __fmul_rn(mine[i], c));
      o.v[i] = from_float<T>(out);
    }
    *reinterpret_cast<Vec<T, N>*>((is_q ? yq : yk) + at + lane * N) = o;
  }
}

template <class T, int N>
bool launch_rmsnorm_rope(const void* q, const void* k, const void* wq, const void* wk, const int32_t* positions,
                         const float* inv_freq, void* yq, void* yk, int64_t rows, int64_t hq, int64_t hk, int64_t hd,
                         float eps, cudaStream_t s) {
  if (hd % N != 0) return false;
  const int64_t G = hd / N;
  if (G < 2 || G > 32 || resident_row_lanes(G) != G) return false;  // one pack a lane: P = 1
  rmsnorm_rope_kernel<T, N><<<unsigned(rows), kThreads, size_t(hd) * sizeof(float), s>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(wq), static_cast<const T*>(wk),
      positions, inv_freq, static_cast<T*>(yq), static_cast<T*>(yk), hq, hk, int(hd), eps);
  return true;
}
}  // namespace

void add_rmsnorm_forward(const void* a, const void* b, const void* w, void* r, void* y, bool bf16, int64_t rows,
                         int64_t D, float eps, void* stream) {
  if (rows == 0 || D == 0) return;
  cudaStream_t s = as_stream(stream);
  const bool aligned = aligned16(a) && aligned16(b) && aligned16(w) && aligned16(r) && aligned16(y);
  const bool fused = aligned && (bf16 ? launch_add_rmsnorm<bf16_t, 8>(a, b, w, r, y, rows, D, eps, s)
                                      : launch_add_rmsnorm<float, 4>(a, b, w, r, y, rows, D, eps, s));
  if (fused) return check_launch("add_rmsnorm_forward");
  add_forward(a, b, r, bf16, rows * D, stream);
  rmsnorm_forward(r, w, y, bf16, nullptr, rows, D, eps, stream);
}

void rmsnorm_rope_forward(const void* q, const void* k, const void* wq, const void* wk, const int32_t* positions,
                          const float* inv_freq, void* yq, void* yk, bool bf16, int64_t rows, int64_t hq, int64_t hk,
                          int64_t hd, float eps, void* stream) {
  if (rows == 0 || hd == 0 || hq + hk == 0) return;
  cudaStream_t s = as_stream(stream);
  const bool aligned = aligned16(q) && aligned16(k) && aligned16(wq) && aligned16(wk) && aligned16(yq) && aligned16(yk);
  const bool fused =
      aligned && (bf16 ? launch_rmsnorm_rope<bf16_t, 8>(q, k, wq, wk, positions, inv_freq, yq, yk, rows, hq, hk, hd, eps, s)
                       : launch_rmsnorm_rope<float, 4>(q, k, wq, wk, positions, inv_freq, yq, yk, rows, hq, hk, hd, eps, s));
  if (fused) return check_launch("rmsnorm_rope_forward");
  // Unfused: the norms into yq, yk, then the rotations in place (rope reads a pair before it writes it).
  rmsnorm_forward(q, wq, yq, bf16, nullptr, rows * hq, hd, eps, stream);
  rmsnorm_forward(k, wk, yk, bf16, nullptr, rows * hk, hd, eps, stream);
  rope_forward(yq, positions, inv_freq, yq, bf16, rows, hq, hd, stream);
  rope_forward(yk, positions, inv_freq, yk, bf16, rows, hk, hd, stream);
}

}  // namespace dflash::kernels::cuda
