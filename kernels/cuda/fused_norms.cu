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
// The row is held as 32-bit words (Words16): all of a is loaded, then b in two halves (its first
// half in flight beside a), so at bf16, P = 16, the kernel fits 128 registers: 2 blocks an SM,
// whose load phases overlap each other's sums and stores (as Vec<bf16_t, 8>: 255 registers, one
// block; capped at 80, 3 blocks, b's loads were serialised and it ran 9 % slower).
template <class T, int N, int P, bool Ahead>
__global__ void __launch_bounds__(kThreads, sizeof(T) == 2 && P == 16 && !Ahead ? 2 : 1)
    add_rmsnorm_kernel(const T* a, const T* b, const T* w, T* r_out, T* y, int64_t rows, int64_t D, float eps, int G) {
  static_assert(N == Words16<T>::kElems, "one 16-byte access a pack");
  constexpr int H = (P + 1) / 2;  // b's first half
  const int q = int(threadIdx.x) % G;
  const int64_t r = blockIdx.x * int64_t(blockDim.x / G) + threadIdx.x / G;
  const bool on = r < rows;
  const Words16<T> zero{make_uint4(0, 0, 0, 0)};
  auto at = [&](int k) { return r * D + (int64_t(k) * G + q) * N; };
  Words16<T> v[P], vb[H];  // v: a, then r = a + b (rows past the end: zeros)
#pragma unroll
  for (int k = 0; k < P; ++k) v[k] = on ? load_words16(a + at(k)) : zero;
  auto add_half = [&](int k0, int k1) {
#pragma unroll
    for (int k = k0; k < k1; ++k) vb[k - k0] = on ? load_words16(b + at(k)) : zero;
#pragma unroll
    for (int k = k0; k < k1; ++k) {
      float fa[N], fb[N];
      to_floats(v[k], fa);
      to_floats(vb[k - k0], fb);
#pragma unroll
      for (int i = 0; i < N; ++i) fa[i] = fa[i] + fb[i];
      v[k] = from_floats<T>(fa);
    }
  };
  add_half(0, H);
  add_half(H, P);
#pragma unroll
  for (int k = 0; k < P; ++k)
    if (on) store_words16(r_out + at(k), v[k]);
  const float ss = resident_row_square_sum(v, G);
  if (!on) return;
  const float s = 1.0f / sqrtf(ss / float(D) + eps);
#pragma unroll
  for (int k = 0; k < P; ++k) hold_words(v[k]);  // the row stays in words, not its unpacked floats
  store_resident_row_normed<T, P, Ahead>(v, s, w, y + r * D, G, q);
}

template <class T, int N>
bool launch_add_rmsnorm(const void* a, const void* b, const void* w, void* r, void* y, int64_t rows, int64_t D,
                        float eps, cudaStream_t s) {
  if (D % N != 0) return false;
  const int64_t G = resident_row_lanes(D / N);
  if (G == 0) return false;
  const ResidentLaunch L = resident_launch(rows, G, kThreads);
  const unsigned grid = unsigned((rows + L.rows_per_block - 1) / L.rows_per_block);
  const unsigned threads = unsigned(L.rows_per_block * G);
  return with_packs_per_lane(D / N / G, [&](auto p_tag) {
    constexpr int P = decltype(p_tag)::value;
    auto kernel = L.weights_ahead ? add_rmsnorm_kernel<T, N, P, true> : add_rmsnorm_kernel<T, N, P, false>;
    kernel<<<grid, threads, 0, s>>>(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(w),
                                    static_cast<T*>(r), static_cast<T*>(y), rows, D, eps, int(G));
  });
}

// q (rows, hq, hd), k (rows, hk, hd), one position per row: each head's x -> rope(rmsnorm(x) * w),
// w = wq or wk. One block per row: its hd/2 angles are taken once (rope_kernel's f32 product and
// accurate sincosf) and shared by the row's hq + hk heads; a head is a segment of G = hd/N lanes,
// one pack a lane (the resident rmsnorm with P = 1: the same sum order), and lane l's rotation
// partner is lane l ^ G/2, which holds the elements hd/2 further on. A lane's weights and its
// rotation coefficients are the same for every head, so they are taken once. The normed values
// are rounded to T before the rotation, as the unfused rope reads them, so they cross to the
// partner as T's words. Every lane of a warp runs the same number of head iterations, so the
// shuffles always see the whole warp. Rows are read a.ldq and a.ldk elements apart; with Slots, k
// goes to the cache row (slot, position) and v is copied beside it (RopeSlots), not to yk.
template <class T>
struct RopeKernelArgs {
  const T *q, *k, *wq, *wk;
  const int32_t* positions;
  const float* inv_freq;
  T *yq, *yk;
  int64_t hq, hk, ldq, ldk;
  float eps;
  const T* v;
  int64_t ldv;
  T *k_cache, *v_cache;
  const int32_t* slot;
  int64_t S, C;
};
template <class T, int N, int G, bool Slots>
__global__ void __launch_bounds__(kThreads) rmsnorm_rope_kernel(const RopeKernelArgs<T> a) {
  static_assert(N == Words16<T>::kElems && G >= 2 && G <= 32 && (G & (G - 1)) == 0, "one pack a lane");
  constexpr int hd = G * N, half = hd / 2, segs = kThreads / G;
  __shared__ float angles[hd];  // cos [half], then sin [half]
  const int seg = int(threadIdx.x) / G, lane = int(threadIdx.x) % G;
  const int64_t row = blockIdx.x, hq = a.hq, hk = a.hk, heads = hq + hk;
  const Words16<T> zero{make_uint4(0, 0, 0, 0)};
  auto src = [&](int64_t h) {
    return (h < hq ? a.q + row * a.ldq + h * hd : a.k + row * a.ldk + (h - hq) * hd) + lane * N;
  };
  auto load_head = [&](int64_t h) { return h < heads ? load_words16(src(h)) : zero; };
  // The first kPreloaded rounds' heads are loaded before the angles: the row's reads are in
  // flight while the position, the sincosf and the barrier complete (later rounds load in turn).
  constexpr int kPreloaded = 4;
  Words16<T> pre[kPreloaded];
#pragma unroll
  for (int i = 0; i < kPreloaded; ++i) pre[i] = load_head(int64_t(i) * segs + seg);
  const int32_t position = a.positions[row];
  T* k_row = a.yk + row * hk * hd;  // where the row's k heads go
  int64_t at = 0;                    // with Slots: the cache row's offset
  bool k_kept = true;
  if constexpr (Slots) {  // scatter_slot_rows' rule: a row outside the cache is not written
    const int64_t sl = a.slot[row];
    k_kept = sl >= 0 && sl < a.S && position >= 0 && position < a.C;
    at = k_kept ? (sl * a.C + position) * hk * hd : 0;
    k_row = a.k_cache + at;
  }
  const float pos = float(position);
  for (int i = threadIdx.x; i < half; i += kThreads) sincosf(pos * a.inv_freq[i], &angles[half + i], &angles[i]);
  float wqf[N], wkf[N];
  to_floats(load_words16(a.wq + lane * N), wqf);
  to_floats(load_words16(a.wk + lane * N), wkf);
  // v's copy stores after every load above is issued: a store the compiler must assume aliases a
  // later load would hold that load until the store completes.
  if constexpr (Slots)
    if (k_kept)
      for (int64_t i = threadIdx.x; i < hk * hd / N; i += kThreads)
        store_words16(a.v_cache + at + i * N, load_words16(a.v + row * a.ldv + i * N));
  __syncthreads();
  // rope.cu's Rotate::forward: y1 = x1 c - x2 s = fma(x1, c, x2 * -s) on the lane holding x1 (low),
  // y2 = x2 c + x1 s = fma(x1, s, x2 * c) on the other: out = fma(A, b, B * d) with A the partner's
  // value on the high lane, B the partner's on the low one.
  const bool low = lane < G / 2;
  const int f0 = (low ? lane : lane - G / 2) * N;
  float bc[N], dc[N];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float c = angles[f0 + i], sn = angles[half + f0 + i];
    bc[i] = low ? c : sn;
    dc[i] = low ? -sn : c;
  }
  // One round: head h (its segment's lanes) from its loaded words x.
  auto round = [&](int64_t h, const Words16<T>& x) {
    const bool on = h < heads, is_q = h < hq;
    float f[N];
    to_floats(x, f);
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) ss += f[i] * f[i];
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float s = 1.0f / sqrtf(ss / float(hd) + a.eps);
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = f[i] * s * (is_q ? wqf[i] : wkf[i]);
    const Words16<T> mine = from_floats<T>(f);
    Words16<T> other;
    other.u.x = __shfl_xor_sync(0xffffffffu, mine.u.x, G / 2);
    other.u.y = __shfl_xor_sync(0xffffffffu, mine.u.y, G / 2);
    other.u.z = __shfl_xor_sync(0xffffffffu, mine.u.z, G / 2);
    other.u.w = __shfl_xor_sync(0xffffffffu, mine.u.w, G / 2);
    if (!on || !(is_q || k_kept)) return;
    float m[N], o[N];
    to_floats(mine, m);
    to_floats(other, o);
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = __fmaf_rn(low ? m[i] : o[i], bc[i], __fmul_rn(low ? o[i] : m[i], dc[i]));
    store_words16((is_q ? a.yq + (row * hq + h) * hd : k_row + (h - hq) * hd) + lane * N, from_floats<T>(f));
  };
#pragma unroll
  for (int i = 0; i < kPreloaded; ++i)
    if (int64_t(i) * segs < heads) round(int64_t(i) * segs + seg, pre[i]);
  for (int64_t base = int64_t(kPreloaded) * segs; base < heads; base += segs) round(base + seg, load_head(base + seg));
}

// The kernel's arguments (yk unused with slots, slots.k_cache set; else rows are contiguous).
template <class T>
RopeKernelArgs<T> rope_kernel_args(const void* q, const void* k, const void* wq, const void* wk,
                                   const int32_t* positions, const float* inv_freq, void* yq, void* yk, int64_t hq,
                                   int64_t hk, int64_t hd, float eps, const RopeSlots& slots) {
  const bool into_slots = slots.k_cache != nullptr;
  return {static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(wq), static_cast<const T*>(wk),
          positions, inv_freq, static_cast<T*>(yq), static_cast<T*>(yk), hq, hk, into_slots ? slots.ldq : hq * hd,
          into_slots ? slots.ldk : hk * hd, eps, static_cast<const T*>(slots.v), slots.ldv,
          static_cast<T*>(slots.k_cache), static_cast<T*>(slots.v_cache), slots.slot, slots.S, slots.C};
}
// Whether the fused kernel covers them: hd of 2 to 32 of T's packs, rows and pointers pack-aligned.
template <class T>
bool rope_kernel_fits(const RopeKernelArgs<T>& a, int64_t hd) {
  constexpr int64_t N = Words16<T>::kElems;
  const int64_t lanes = hd / N;
  if (hd % N != 0 || lanes < 2 || lanes > 32 || (lanes & (lanes - 1)) != 0) return false;
  if (a.ldq % N != 0 || a.ldk % N != 0 || a.ldv % N != 0) return false;
  for (const void* p : {static_cast<const void*>(a.q), static_cast<const void*>(a.k), static_cast<const void*>(a.wq),
                        static_cast<const void*>(a.wk), static_cast<const void*>(a.yq), static_cast<const void*>(a.yk),
                        static_cast<const void*>(a.v), static_cast<const void*>(a.k_cache),
                        static_cast<const void*>(a.v_cache)})
    if (!aligned16(p)) return false;
  return true;
}
template <class T>
void launch_rope_kernel(const RopeKernelArgs<T>& a, int64_t rows, int64_t hd, cudaStream_t s) {
  constexpr int N = Words16<T>::kElems;
  auto go = [&](auto g_tag) {
    constexpr int G = decltype(g_tag)::value;
    auto kernel = a.k_cache ? rmsnorm_rope_kernel<T, N, G, true> : rmsnorm_rope_kernel<T, N, G, false>;
    kernel<<<unsigned(rows), kThreads, 0, s>>>(a);
  };
  switch (hd / N) {  // lanes a head: one pack a lane
    case 2: return go(std::integral_constant<int, 2>{});
    case 4: return go(std::integral_constant<int, 4>{});
    case 8: return go(std::integral_constant<int, 8>{});
    case 16: return go(std::integral_constant<int, 16>{});
    default: return go(std::integral_constant<int, 32>{});  // rope_kernel_fits admits no other
  }
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
  const bool fused = with_dtype(bf16, [&](auto t) {
    using T = typename decltype(t)::type;
    const RopeKernelArgs<T> a = rope_kernel_args<T>(q, k, wq, wk, positions, inv_freq, yq, yk, hq, hk, hd, eps, {});
    if (!rope_kernel_fits(a, hd)) return false;
    launch_rope_kernel(a, rows, hd, s);
    return true;
  });
  if (fused) return check_launch("rmsnorm_rope_forward");
  // Unfused: the norms into yq, yk, then the rotations in place (rope reads a pair before it writes it).
  rmsnorm_forward(q, wq, yq, bf16, nullptr, rows * hq, hd, eps, stream);
  rmsnorm_forward(k, wk, yk, bf16, nullptr, rows * hk, hd, eps, stream);
  rope_forward(yq, positions, inv_freq, yq, bf16, rows, hq, hd, stream);
  rope_forward(yk, positions, inv_freq, yk, bf16, rows, hk, hd, stream);
}

bool rmsnorm_rope_into_slots_fits(const void* q, const void* k, const void* wq, const void* wk, void* yq, bool bf16,
                                  int64_t hq, int64_t hk, int64_t hd, const RopeSlots& slots) {
  if (!slots.k_cache || !slots.v_cache || !slots.v || !slots.slot) return false;
  return with_dtype(bf16, [&](auto t) {
    using T = typename decltype(t)::type;
    const RopeKernelArgs<T> a = rope_kernel_args<T>(q, k, wq, wk, nullptr, nullptr, yq, nullptr, hq, hk, hd, 0.0f, slots);
    return rope_kernel_fits(a, hd);
  });
}

void rmsnorm_rope_into_slots(const void* q, const void* k, const void* wq, const void* wk, const int32_t* positions,
                             const float* inv_freq, void* yq, bool bf16, int64_t rows, int64_t hq, int64_t hk,
                             int64_t hd, float eps, const RopeSlots& slots, void* stream) {
  if (rows == 0) return;
  with_dtype(bf16, [&](auto t) {
    using T = typename decltype(t)::type;
    launch_rope_kernel(rope_kernel_args<T>(q, k, wq, wk, positions, inv_freq, yq, nullptr, hq, hk, hd, eps, slots),
                       rows, hd, as_stream(stream));
  });
  check_launch("rmsnorm_rope_into_slots");
}

}  // namespace dflash::kernels::cuda
