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

// add_rmsnorm_kernel's work and bits for long rows (32 lanes a row, P >= 8 packs a lane), a row
// spread over W warps so that a thread holds P/W packs (P = 16 in one warp needs 255 registers: one
// block an SM, whose loads and stores then never overlap); the square sum is chained_square_sum's.
template <class T, int N, int P, int W>
__global__ void __launch_bounds__(kThreads)
    add_rmsnorm_chain_kernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ w,
                             T* __restrict__ r_out, T* __restrict__ y, int64_t rows, int64_t D, float eps) {
  constexpr int kPw = P / W, kRows = kThreads / 32 / W;
  __shared__ float partial[kRows][W][32];
  const int q = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, part = warp % W, slot = warp / W;
  const int64_t r = blockIdx.x * int64_t(kRows) + slot;
  const bool on = r < rows;
  auto at = [&](int k) { return r * D + (int64_t(part * kPw + k) * 32 + q) * N; };
  Vec<T, N> v[kPw];
#pragma unroll
  for (int k = 0; k < kPw; ++k)
    if (on) v[k] = *reinterpret_cast<const Vec<T, N>*>(a + at(k));
#pragma unroll
  for (int k = 0; k < kPw; ++k) {
    if (!on) continue;
    const Vec<T, N> vb = *reinterpret_cast<const Vec<T, N>*>(b + at(k));
#pragma unroll
    for (int i = 0; i < N; ++i) v[k].v[i] = from_float<T>(to_float(v[k].v[i]) + to_float(vb.v[i]));
  }
#pragma unroll
  for (int k = 0; k < kPw; ++k)
    if (on) *reinterpret_cast<Vec<T, N>*>(r_out + at(k)) = v[k];
  const float ss = chained_square_sum<W>(v, on, partial, slot, part, q);
  if (!on) return;
  const float s = 1.0f / sqrtf(ss / float(D) + eps);
#pragma unroll
  for (int k = 0; k < kPw; ++k) {
    const Vec<T, N> wv = *reinterpret_cast<const Vec<T, N>*>(w + (at(k) - r * D));
    Vec<T, N> o;
#pragma unroll
    for (int i = 0; i < N; ++i) o.v[i] = from_float<T>(to_float(v[k].v[i]) * s * to_float(wv.v[i]));
    *reinterpret_cast<Vec<T, N>*>(y + at(k)) = o;
  }
}

template <class T, int N>
bool launch_add_rmsnorm(const void* a, const void* b, const void* w, void* r, void* y, int64_t rows, int64_t D,
                        float eps, cudaStream_t s) {
  if (D % N != 0) return false;
  const int64_t G = resident_row_lanes(D / N);
  if (G == 0) return false;
  const int64_t P = D / N / G;
  if (G == 32 && (P == 8 || P == 16)) {  // 4 packs a thread: a row over P/4 warps
    auto chain = [&](auto p_tag) {
      constexpr int kP = decltype(p_tag)::value, kW = kP / 4, kRows = kThreads / 32 / kW;
      add_rmsnorm_chain_kernel<T, N, kP, kW><<<unsigned((rows + kRows - 1) / kRows), kThreads, 0, s>>>(
          static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(w), static_cast<T*>(r),
          static_cast<T*>(y), rows, D, eps);
    };
    if (P == 8) chain(std::integral_constant<int, 8>{});
    else chain(std::integral_constant<int, 16>{});
    return true;
  }
  const unsigned grid = unsigned((rows + kThreads / G - 1) / (kThreads / G));
  return with_packs_per_lane(P, [&](auto p_tag) {
    add_rmsnorm_kernel<T, N, decltype(p_tag)::value><<<grid, kThreads, 0, s>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(w), static_cast<T*>(r),
        static_cast<T*>(y), rows, D, eps, int(G));
  });
}

// q (rows, hq, hd), k (rows, hk, hd), one position per row: each head's x -> rope(rmsnorm(x) * w),
// w = wq or wk. The (row, head) items in row-major order are dealt kItems to a segment of G = hd/N
// lanes (one pack a lane: the resident rmsnorm with P = 1, so the same sum order): block b owns
// items [b*I, b*I + I), I = kItems * segments, and segment s takes s, s + segments, ... of them
// (at Qwen3-8B's 32 + 8 heads of 128, a block is exactly two rows). Every load of a thread (its
// items' packs and its lane's pack of wq and wk) is issued before the block takes its rows' angles
// (rope_kernel's f32 product and accurate sincosf) and meets at the one barrier, so the angles cost
// no round trip. Lane l's rotation partner is lane l ^ G/2, which holds the elements hd/2 further
// on; the normed values are rounded to T before the rotation, as the unfused rope reads them.
// Every lane runs kItems items (past the end: zeros), so the shuffles always see the whole warp.
template <class T, int N, int kItems>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_rope_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ wq,
                        const T* __restrict__ wk, const int32_t* __restrict__ positions,
                        const float* __restrict__ inv_freq, T* yq, T* yk, int64_t rows, int64_t hq, int64_t hk, int hd,
                        float eps) {
  extern __shared__ float angles[];  // per row of the block: cos [hd/2], then sin [hd/2]
  const int half = hd / 2, G = hd / N, seg = int(threadIdx.x) / G, lane = int(threadIdx.x) % G, segs = kThreads / G;
  const int64_t H = hq + hk, items = rows * H, item0 = blockIdx.x * int64_t(kItems) * segs;
  const int64_t row0 = item0 / H;
  const Vec<T, N> wqv = *reinterpret_cast<const Vec<T, N>*>(wq + lane * N);
  const Vec<T, N> wkv = *reinterpret_cast<const Vec<T, N>*>(wk + lane * N);
  // Item j of this segment is item0 + seg + j*segs = (row, head): walked without a division per
  // item, once to load and once to compute (holding the offsets would cost the loads registers).
  const int step_rows = int(segs / H), step_heads = int(segs % H);
  const int64_t row_first = (item0 + seg) / H;
  const int head_first = int(item0 + seg - row_first * H);
  auto pack_of = [&](int64_t row, int head) -> int32_t {  // in packs of N; -1 past the end
    if (row >= rows) return -1;
    return int32_t(((head < hq ? row * hq + head : row * hk + (head - hq)) * hd) / N + lane);
  };
  Vec<T, N> v[kItems];
  {
    int64_t row = row_first;
    int head = head_first;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int32_t at = pack_of(row, head);
      v[j] = Vec<T, N>{};
      if (at >= 0) v[j] = reinterpret_cast<const Vec<T, N>*>(head < hq ? q : k)[at];
      row += step_rows, head += step_heads;
      if (head >= H) head -= int(H), ++row;
    }
  }
  const int64_t last_item = item0 + int64_t(kItems) * segs < items ? item0 + int64_t(kItems) * segs - 1 : items - 1;
  const int block_rows = int(last_item / H - row0) + 1;
  for (int i = threadIdx.x; i < block_rows * half; i += kThreads) {
    const int r = i / half, f = i - r * half;
    const float pos = float(positions[row0 + r]);
    sincosf(pos * inv_freq[f], &angles[r * hd + half + f], &angles[r * hd + f]);
  }
  __syncthreads();
  const bool low = lane < G / 2;  // holds x1 of its pairs (element index < hd/2)
  const int f0 = (low ? lane : lane - G / 2) * N;
  int64_t row = row_first;
  int head = head_first;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int32_t at = pack_of(row, head);
    const bool on = at >= 0, is_q = head < hq;
    const int local_row = int(row - row0);
    row += step_rows, head += step_heads;
    if (head >= H) head -= int(H), ++row;
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float f = on ? to_float(v[j].v[i]) : 0.0f;
      ss += f * f;
    }
    for (int o = G / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float s = 1.0f / sqrtf(ss / float(hd) + eps);
    float mine[N], other[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float w = to_float(is_q ? wqv.v[i] : wkv.v[i]);
      mine[i] = to_float(from_float<T>(to_float(v[j].v[i]) * s * w));
    }
#pragma unroll
    for (int i = 0; i < N; ++i) other[i] = __shfl_xor_sync(0xffffffffu, mine[i], G / 2);
    if (!on) continue;
    const float* cs = angles + local_row * hd;
    const float* sn = cs + half;
    Vec<T, N> o;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float c = cs[f0 + i], sgn = sn[f0 + i];
      // rope.cu's Rotate::forward: y1 = x1 c - x2 s, y2 = x2 c + x1 s
      const float out = low ? __fmaf_rn(mine[i], c, -__fmul_rn(other[i], sgn))
                            : __fmaf_rn(other[i], sgn, __fmul_rn(mine[i], c));
      o.v[i] = from_float<T>(out);
    }
    reinterpret_cast<Vec<T, N>*>(is_q ? yq : yk)[at] = o;
  }
}

constexpr int kRopeItems = 5;  // items a segment: at 40 heads of 16 lanes, two rows a block

template <class T, int N>
bool launch_rmsnorm_rope(const void* q, const void* k, const void* wq, const void* wk, const int32_t* positions,
                         const float* inv_freq, void* yq, void* yk, int64_t rows, int64_t hq, int64_t hk, int64_t hd,
                         float eps, cudaStream_t s) {
  if (hd % N != 0) return false;
  const int64_t G = hd / N;
  if (G < 2 || G > 32 || resident_row_lanes(G) != G) return false;  // one pack a lane: P = 1
  const int64_t per_block = kRopeItems * (kThreads / G), H = hq + hk;
  const int64_t block_rows = per_block / H + 2;  // rows a block's items can touch, at most
  const size_t smem = size_t(block_rows * hd) * sizeof(float);
  if (smem > 48 * 1024) return false;
  if (rows * (hq > hk ? hq : hk) * (hd / N) > INT32_MAX) return false;  // pack indices in 32 bits
  const int64_t blocks = (rows * H + per_block - 1) / per_block;
  rmsnorm_rope_kernel<T, N, kRopeItems><<<unsigned(blocks), kThreads, smem, s>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(wq), static_cast<const T*>(wk),
      positions, inv_freq, static_cast<T*>(yq), static_cast<T*>(yk), rows, hq, hk, int(hd), eps);
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
