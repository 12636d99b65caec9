// RMSNorm on the GPU over rows of D: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps). Forward:
// one warp per row (16-byte accesses where aligned). Backward: one fused pass computes dx and the
// weight gradient's partial sums over fixed row ranges (8-element packs, templated on each
// pointer's dtype), then a second kernel adds the partials up in a fixed order; so every sum has
// an order that depends only on (rows, D), never on the device or the run.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;  // forward: one warp per row
constexpr int64_t kMinDwRows = 8;             // rows per dw partial, at least
constexpr int64_t kMaxDwPartials = 512;       // = blocks of the fused backward, at most
constexpr int kMaxSegment = 32;               // rows of at most 32 packs: a lane segment per row
constexpr int64_t kMaxBlockPacks = 4;         // longer rows: the block per row, up to 4 packs a thread
// The fused backward's grid is up to kMaxDwPartials = 512 blocks, each a latency-bound walk over its
// rows: at 3 blocks an SM (70-98 registers) that is 396 blocks, then a second wave of 116 blocks at
// a third of the loads in flight. 4 an SM (<= 64 registers) holds the whole grid at once. Asked for
// rows of bf16 x, dy and dx up to 512 packs (no spills there; the f32 variants would spill).
constexpr int kBlockKernelMinBlocks = 4;

// x, y (rows, D), w (D), rstd (rows) or null. N elements per access; D % N == 0.
template <class T, int N>
__global__ void rmsnorm_forward_kernel(const T* x, const T* w, T* y, float* rstd, int64_t rows, int64_t D, float eps) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const T* xr = x + r * D;
  T* yr = y + r * D;
  float ss = 0.0f;
  for (int64_t j = int64_t(lane) * N; j < D; j += 32 * N) {
    Vec<T, N> v = *reinterpret_cast<const Vec<T, N>*>(xr + j);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      float f = to_float(v.v[k]);
      ss += f * f;
    }
  }
  ss = warp_sum(ss);
  const float s = 1.0f / sqrtf(ss / float(D) + eps);
  if (rstd && lane == 0) rstd[r] = s;
  for (int64_t j = int64_t(lane) * N; j < D; j += 32 * N) {
    Vec<T, N> v = *reinterpret_cast<const Vec<T, N>*>(xr + j), wv = *reinterpret_cast<const Vec<T, N>*>(w + j), o;
#pragma unroll
    for (int k = 0; k < N; ++k) o.v[k] = from_float<T>(to_float(v.v[k]) * s * to_float(wv.v[k]));
    *reinterpret_cast<Vec<T, N>*>(yr + j) = o;
  }
}

// Rows of D = G * N * P (G lanes a row, a power of two <= 32; P packs a lane): the row's packs
// are loaded once, all at once, and held in registers; lane q owns packs q, q + G, ... in that
// order. The square sum is each lane's in pack order, then a butterfly over the row's G lanes:
// for G = 32 the order of rmsnorm_forward_kernel, and for G < 32 the same bits too (its missing
// lanes add zeros). Rows past the end still reach the shuffles. The packs are held as 32-bit words
// (Words16): 80 registers at bf16, P = 16, against 148 as Vec<bf16_t, 8> (3 blocks an SM, not 1).
template <class T, int N, int P, bool Ahead>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_resident_kernel(const T* x, const T* w, T* y, float* rstd, int64_t rows, int64_t D, float eps,
                                    int G) {
  static_assert(N == Words16<T>::kElems, "one 16-byte access a pack");
  const int q = int(threadIdx.x) % G;
  const int64_t r = blockIdx.x * int64_t(blockDim.x / G) + threadIdx.x / G;
  const bool on = r < rows;
  Words16<T> v[P];
#pragma unroll
  for (int k = 0; k < P; ++k)
    v[k] = on ? load_words16(x + r * D + (int64_t(k) * G + q) * N) : Words16<T>{make_uint4(0, 0, 0, 0)};
  const float ss = resident_row_square_sum(v, G);  // rows past the end add zeros
  if (!on) return;
  const float s = 1.0f / sqrtf(ss / float(D) + eps);
  if (rstd && q == 0) rstd[r] = s;
  store_resident_row_normed<T, P, Ahead>(v, s, w, y + r * D, G, q);
}

// The resident kernel when D splits into G lanes of P <= 16 packs of N, else the looping one; its
// blocks and weight loads by resident_launch.
template <class T, int N>
bool launch_forward_resident(const void* x, const void* w, void* y, float* rstd, int64_t rows, int64_t D, float eps,
                             cudaStream_t s) {
  if (N == 1 || D % N != 0) return false;
  const int64_t G = resident_row_lanes(D / N);
  if (G == 0) return false;
  const ResidentLaunch L = resident_launch(rows, G, kThreads);
  const unsigned grid = unsigned((rows + L.rows_per_block - 1) / L.rows_per_block);
  const unsigned threads = unsigned(L.rows_per_block * G);
  return with_packs_per_lane(D / N / G, [&](auto p_tag) {
    constexpr int P = decltype(p_tag)::value;
    auto kernel = L.weights_ahead ? rmsnorm_forward_resident_kernel<T, N, P, true>
                                  : rmsnorm_forward_resident_kernel<T, N, P, false>;
    kernel<<<grid, threads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), rstd, rows,
                                    D, eps, int(G));
  });
}

template <class T, int N>
void launch_forward(const void* x, const void* w, void* y, float* rstd, int64_t rows, int64_t D, float eps,
                    cudaStream_t s) {
  unsigned grid = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  rmsnorm_forward_kernel<T, N><<<grid, kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(w),
                                                          static_cast<T*>(y), rstd, rows, D, eps);
}

// ---- backward ----
// Per row r (s = rstd[r], dot = sum_j dy_j w_j x_j, c = s^3 dot / D):
//   dx_k += s w_k dy_k - c x_k,   dw partial += dy_k x_k s
// The per-element terms keep the rounding of the original scalar kernel, pinned by intrinsics:
//   dot term fma(dy*w, x, .), dx' = dx + fma(s*w, dy, -(c*x)), dw term fma(dy*x, s, .).
__device__ __forceinline__ float dot_term(float acc, float dy, float w, float x) {
  return __fmaf_rn(__fmul_rn(dy, w), x, acc);
}
__device__ __forceinline__ float dx_coefficient(float s, float dot, int64_t D) {
  return __fdiv_rn(__fmul_rn(__fmul_rn(__fmul_rn(s, s), s), dot), float(D));
}
__device__ __forceinline__ float dx_term(float acc, float s, float w, float dy, float c, float x) {
  return __fadd_rn(__fmaf_rn(__fmul_rn(s, w), dy, -__fmul_rn(c, x)), acc);
}
__device__ __forceinline__ float dw_term(float acc, float dy, float x, float s) {
  return __fmaf_rn(__fmul_rn(dy, x), s, acc);
}

// Packs per row D/8 <= 32: a segment of G (a power of two >= D/8) lanes per row, lane q owning
// columns [8q, 8q+8); a block holds 256/G rows at a time. Block p owns rows
// [p*rows_per, min((p+1)*rows_per, rows)) (rows_per a multiple of 256/G). The row dot is a
// butterfly over the segment (fixed order). dw: each slot (row position in the block) sums its
// rows in row order; the slots are then added in slot order into partials[p, :].
template <class TX, class TDY, class TDX>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_backward_segment_kernel(const TX* x, const TX* w, const float* rstd, const TDY* dy, TDX* dx,
                                    float* partials, int64_t rows, int64_t D, int64_t rows_per, int G, bool dx_fresh) {
  __shared__ float slot_sums[kThreads * kPack];  // [256/G slots][G*8 columns]
  const int t = threadIdx.x, slot = t / G, q = t % G, slots = kThreads / G;
  const bool column = q < int(D / kPack);
  float wv[kPack] = {}, acc[kPack] = {};
  if (column) load_pack(w + q * kPack, wv);
  const int64_t r0 = blockIdx.x * rows_per, r1 = r0 + rows_per < rows ? r0 + rows_per : rows;
  for (int64_t base = r0; base < r1; base += slots) {
    const int64_t r = base + slot, e = r * D + q * kPack;
    const bool on = column && r < r1;
    float xv[kPack] = {}, dv[kPack] = {}, ov[kPack] = {}, s = 0.0f;
    if (on) {
      load_pack(x + e, xv);
      load_pack(dy + e, dv);
      if (dx && !dx_fresh) load_pack(dx + e, ov);  // a fresh dx: added to 0, a zero-filled dx's bits
      s = rstd[r];
    }
    if (dx) {  // uniform: every lane reaches the shuffles
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < kPack; ++j) dot = dot_term(dot, dv[j], wv[j], xv[j]);
      for (int o = G / 2; o > 0; o >>= 1) dot = __fadd_rn(dot, __shfl_xor_sync(0xffffffffu, dot, o));
      if (on) {
        const float c = dx_coefficient(s, dot, D);
#pragma unroll
        for (int j = 0; j < kPack; ++j) ov[j] = dx_term(ov[j], s, wv[j], dv[j], c, xv[j]);
        store_pack(dx + e, ov);
      }
    }
    if (partials && on) {
#pragma unroll
      for (int j = 0; j < kPack; ++j) acc[j] = dw_term(acc[j], dv[j], xv[j], s);
    }
  }
  if (!partials) return;
#pragma unroll
  for (int j = 0; j < kPack; ++j) slot_sums[slot * G * kPack + q * kPack + j] = acc[j];
  __syncthreads();
  for (int64_t col = t; col < D; col += kThreads) {
    float sum = slot_sums[col];
    for (int k = 1; k < slots; ++k) sum = __fadd_rn(sum, slot_sums[k * G * kPack + col]);
    partials[blockIdx.x * D + col] = sum;
  }
}

// Packs per row 32 < D/8 <= 256*C: the whole block per row, thread t owning packs t + 256k
// (k < C). Rows of block p go one at a time in row order; the row dot is a warp butterfly, then
// the 8 warp sums in warp order (double-buffered shared memory: one barrier per row). dw: each
// column has one owner thread, which sums its rows in row order into partials[p, :].
template <class TX, class TDY, class TDX, int C>
__global__ void __launch_bounds__(kThreads, C <= 2 && sizeof(TX) + sizeof(TDY) + sizeof(TDX) == 6 ? kBlockKernelMinBlocks : 1)
    rmsnorm_backward_block_kernel(const TX* x, const TX* w, const float* rstd, const TDY* dy, TDX* dx,
                                  float* partials, int64_t rows, int64_t D, int64_t rows_per, bool dx_fresh) {
  __shared__ float warp_sums[2][kThreads / 32];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, packs = int(D / kPack);
  float acc[C][kPack] = {};
  int buffer = 0;
  const int64_t r0 = blockIdx.x * rows_per, r1 = r0 + rows_per < rows ? r0 + rows_per : rows;
  for (int64_t r = r0; r < r1; ++r) {
    const float s = rstd[r];
    // The row's loads are issued together and held raw (bf16: 4 registers a pack) across the barrier.
    RawPack<TX> xr[C];
    RawPack<TDY> dr[C];
    RawPack<TDX> orr[C];
#pragma unroll
    for (int k = 0; k < C; ++k) {
      const int p = t + k * kThreads;
      if (p >= packs) continue;
      xr[k] = load_raw(x + r * D + p * kPack);
      dr[k] = load_raw(dy + r * D + p * kPack);
      if (dx && !dx_fresh) orr[k] = load_raw(dx + r * D + p * kPack);
    }
    if (dx) {  // uniform: every thread reaches the barrier
      float dot = 0.0f;
#pragma unroll
      for (int k = 0; k < C; ++k) {
        const int p = t + k * kThreads;
        if (p >= packs) continue;
        float xv[kPack], dv[kPack], wv[kPack];
        unpack(xr[k], xv);
        unpack(dr[k], dv);
        load_pack(w + p * kPack, wv);
#pragma unroll
        for (int j = 0; j < kPack; ++j) dot = dot_term(dot, dv[j], wv[j], xv[j]);
      }
      dot = warp_sum(dot);
      if (lane == 0) warp_sums[buffer][warp] = dot;
      __syncthreads();  // the other buffer is rewritten only after the next barrier: all have read this one
      dot = warp_sums[buffer][0];
#pragma unroll
      for (int k = 1; k < kThreads / 32; ++k) dot = __fadd_rn(dot, warp_sums[buffer][k]);
      buffer ^= 1;
      const float c = dx_coefficient(s, dot, D);
#pragma unroll
      for (int k = 0; k < C; ++k) {
        const int p = t + k * kThreads;
        if (p >= packs) continue;
        float xv[kPack], dv[kPack], wv[kPack], ov[kPack];
        unpack(xr[k], xv);
        unpack(dr[k], dv);
        if (dx_fresh) {
#pragma unroll
          for (int j = 0; j < kPack; ++j) ov[j] = 0.0f;  // added to 0, a zero-filled dx's bits
        } else {
          unpack(orr[k], ov);
        }
        load_pack(w + p * kPack, wv);
#pragma unroll
        for (int j = 0; j < kPack; ++j) ov[j] = dx_term(ov[j], s, wv[j], dv[j], c, xv[j]);
        store_pack(dx + r * D + p * kPack, ov);
      }
    }
    if (partials) {
#pragma unroll
      for (int k = 0; k < C; ++k) {
        if (t + k * kThreads >= packs) continue;
        float xv[kPack], dv[kPack];
        unpack(xr[k], xv);
        unpack(dr[k], dv);
#pragma unroll
        for (int j = 0; j < kPack; ++j) acc[k][j] = dw_term(acc[k][j], dv[j], xv[j], s);
      }
    }
  }
  if (!partials) return;
#pragma unroll
  for (int k = 0; k < C; ++k) {
    const int p = t + k * kThreads;
    if (p < packs) store_pack(partials + blockIdx.x * D + p * kPack, acc[k]);
  }
}

// Fallback for any D and alignment (runtime dtype flags): one warp per row for dx, and the
// partials by one thread per column over the block's rows in row order.
__global__ void rmsnorm_dx_kernel(const void* x, const void* w, bool xw_bf16, const float* rstd, const void* dy,
                                  bool dy_bf16, void* dx, bool dx_bf16, int64_t rows, int64_t D, bool dx_fresh) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const int64_t base = r * D;
  float dot = 0.0f;
  for (int64_t j = lane; j < D; j += 32)
    dot = dot_term(dot, load(dy, dy_bf16, base + j), load(w, xw_bf16, j), load(x, xw_bf16, base + j));
  dot = warp_sum(dot);
  const float s = rstd[r], c = dx_coefficient(s, dot, D);
  for (int64_t j = lane; j < D; j += 32)
    store(dx, dx_bf16, base + j,
          dx_term(dx_fresh ? 0.0f : load(dx, dx_bf16, base + j), s, load(w, xw_bf16, j), load(dy, dy_bf16, base + j), c,
                  load(x, xw_bf16, base + j)));
}

__global__ void rmsnorm_dw_partial_kernel(const void* x, bool x_bf16, const float* rstd, const void* dy, bool dy_bf16,
                                          float* partials, int64_t rows, int64_t D, int64_t rows_per) {
  const int64_t r0 = blockIdx.x * rows_per, r1 = r0 + rows_per < rows ? r0 + rows_per : rows;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    float acc = 0.0f;
    for (int64_t r = r0; r < r1; ++r) acc = dw_term(acc, load(dy, dy_bf16, r * D + j), load(x, x_bf16, r * D + j), rstd[r]);
    partials[blockIdx.x * D + j] = acc;
  }
}

// dw[j] += sum_p partials[p, j]: 8 runs of consecutive partials, each summed in order of p, then
// the 8 run sums in run order. A block covers 32 columns (one warp per run, coalesced).
template <class TW>
__global__ void __launch_bounds__(kThreads) rmsnorm_dw_finish_kernel(const float* partials, int64_t P, TW* dw, int64_t D) {
  constexpr int kRuns = kThreads / 32;
  __shared__ float run_sums[kRuns][32];
  const int lane = threadIdx.x & 31, run = threadIdx.x >> 5;
  const int64_t col = blockIdx.x * int64_t(32) + lane, per = (P + kRuns - 1) / kRuns;
  const int64_t p0 = run * per, p1 = p0 + per < P ? p0 + per : P;
  float sum = 0.0f;
  if (col < D)
    for (int64_t p = p0; p < p1; ++p) sum = __fadd_rn(sum, partials[p * D + col]);
  run_sums[run][lane] = sum;
  __syncthreads();
  if (run != 0 || col >= D) return;
  float total = run_sums[0][lane];
#pragma unroll
  for (int k = 1; k < kRuns; ++k) total = __fadd_rn(total, run_sums[k][lane]);
  dw[col] = from_float<TW>(__fadd_rn(to_float(dw[col]), total));
}

int segment_lanes(int64_t packs) {
  int g = 1;
  while (g < packs) g *= 2;
  return g;
}

// Rows that one block step of the fused kernel covers for rows of D (1 outside the segment layout).
int64_t rows_per_step(int64_t D) {
  return D % kPack == 0 && D / kPack <= kMaxSegment ? kThreads / segment_lanes(D / kPack) : 1;
}

// Rows per dw partial (= per block of the fused kernel): a function of (rows, D) only, so the dw
// summation order never depends on the device or on which kernel path runs.
int64_t dw_rows_per_partial(int64_t rows, int64_t D) {
  int64_t per = (rows + kMaxDwPartials - 1) / kMaxDwPartials;
  if (per < kMinDwRows) per = kMinDwRows;
  const int64_t step = rows_per_step(D);
  return (per + step - 1) / step * step;
}

template <class TX, class TDY, class TDX>
void launch_fused(const void* x, const void* w, const float* rstd, const void* dy, void* dx, float* partials,
                  int64_t rows, int64_t D, int64_t per, int64_t P, cudaStream_t s, bool dx_fresh) {
  const auto px = static_cast<const TX*>(x), pw = static_cast<const TX*>(w);
  const auto pdy = static_cast<const TDY*>(dy);
  const auto pdx = static_cast<TDX*>(dx);
  const int64_t packs = D / kPack;
  if (packs <= kMaxSegment) {
    rmsnorm_backward_segment_kernel<TX, TDY, TDX><<<unsigned(P), kThreads, 0, s>>>(
        px, pw, rstd, pdy, pdx, partials, rows, D, per, segment_lanes(packs), dx_fresh);
  } else if (packs <= 2 * kThreads) {
    rmsnorm_backward_block_kernel<TX, TDY, TDX, 2><<<unsigned(P), kThreads, 0, s>>>(px, pw, rstd, pdy, pdx, partials,
                                                                                    rows, D, per, dx_fresh);
  } else {
    rmsnorm_backward_block_kernel<TX, TDY, TDX, kMaxBlockPacks><<<unsigned(P), kThreads, 0, s>>>(
        px, pw, rstd, pdy, pdx, partials, rows, D, per, dx_fresh);
  }
}
}  // namespace

// x, y (rows, D), w (D), one dtype; rstd (rows) f32 or null.
void rmsnorm_forward(const void* x, const void* w, void* y, bool bf16, float* rstd, int64_t rows, int64_t D, float eps,
                     void* stream) {
  if (rows == 0 || D == 0) return;
  cudaStream_t s = as_stream(stream);
  const bool aligned = aligned16(x) && aligned16(w) && aligned16(y);
  const bool resident = aligned && (bf16 ? launch_forward_resident<bf16_t, 8>(x, w, y, rstd, rows, D, eps, s)
                                         : launch_forward_resident<float, 4>(x, w, y, rstd, rows, D, eps, s));
  if (!resident && bf16) {
    if (aligned && D % 8 == 0) launch_forward<bf16_t, 8>(x, w, y, rstd, rows, D, eps, s);
    else launch_forward<bf16_t, 1>(x, w, y, rstd, rows, D, eps, s);
  } else if (!resident) {
    if (aligned && D % 4 == 0) launch_forward<float, 4>(x, w, y, rstd, rows, D, eps, s);
    else launch_forward<float, 1>(x, w, y, rstd, rows, D, eps, s);
  }
  check_launch("rmsnorm_forward");
}

int64_t rmsnorm_dw_partials(int64_t rows, int64_t D) {
  if (rows <= 0) return 0;
  const int64_t per = dw_rows_per_partial(rows, D);
  return (rows + per - 1) / per;
}

void rmsnorm_backward(const void* x, const void* w, bool xw_bf16, const float* rstd, const void* dy, bool dy_bf16,
                      void* dx, bool dx_bf16, void* dw, bool dw_bf16, float* dw_partials, int64_t rows, int64_t D,
                      void* stream, bool dx_fresh) {
  if (rows == 0 || D == 0 || (!dx && !dw)) return;
  cudaStream_t s = as_stream(stream);
  const int64_t per = dw_rows_per_partial(rows, D), P = rmsnorm_dw_partials(rows, D);
  float* partials = dw ? dw_partials : nullptr;
  const bool fused = D % kPack == 0 && D / kPack <= kMaxBlockPacks * kThreads && aligned16(x) && aligned16(w) &&
                     aligned16(dy) && (!dx || aligned16(dx)) && (!partials || aligned16(partials));
  if (fused) {
    if (!dx) dx_bf16 = xw_bf16;  // a null dx takes x's dtype: no extra instantiation
    with_dtype(xw_bf16, [&](auto tx) {
      with_dtype(dy_bf16, [&](auto tdy) {
        with_dtype(dx_bf16, [&](auto tdx) {
          launch_fused<typename decltype(tx)::type, typename decltype(tdy)::type, typename decltype(tdx)::type>(
              x, w, rstd, dy, dx, partials, rows, D, per, P, s, dx_fresh);
        });
      });
    });
    check_launch("rmsnorm_backward: fused dx and dw partials");
  } else {
    if (dx) {
      const unsigned grid = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
      rmsnorm_dx_kernel<<<grid, kThreads, 0, s>>>(x, w, xw_bf16, rstd, dy, dy_bf16, dx, dx_bf16, rows, D, dx_fresh);
      check_launch("rmsnorm_backward: dx");
    }
    if (partials) {
      rmsnorm_dw_partial_kernel<<<unsigned(P), kThreads, 0, s>>>(x, xw_bf16, rstd, dy, dy_bf16, partials, rows, D, per);
      check_launch("rmsnorm_backward: dw partials");
    }
  }
  if (partials) {
    const unsigned grid = unsigned((D + 31) / 32);
    if (dw_bf16) rmsnorm_dw_finish_kernel<bf16_t><<<grid, kThreads, 0, s>>>(partials, P, static_cast<bf16_t*>(dw), D);
    else rmsnorm_dw_finish_kernel<float><<<grid, kThreads, 0, s>>>(partials, P, static_cast<float*>(dw), D);
    check_launch("rmsnorm_backward: dw");
  }
}

}  // namespace dflash::kernels::cuda
