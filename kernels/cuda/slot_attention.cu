// Attention of query rows over a KV cache of fixed slots on the GPU (kernels/cpu/slot_attention.cpp
// is the reference): the batched decode step's attention, where every row has its own slot and
// length. Split over the keys as in flash-decoding. Pass 1: one CTA per (row, kv head, head chunk,
// key slice); its four warps take the slice's keys in blocks of KB, each warp all GW query heads of
// its chunk (a GQA group shares every key it reads). A lane owns HD/32 columns: it loads its part
// of each key and value row straight from memory (a warp reads whole rows), the per-head partial
// dot products are summed across lanes by one reduce-scatter (each lane ends with whole scores),
// and each head keeps an online softmax (max, sum, unnormalised output, f32). The warps' states
// merge in shared memory into the slice's partial. Pass 2 merges the slices per (row, head).
// Lengths are read on the device, so one capture serves every step: a row reads only its own keys,
// slices past its length find none and are skipped in the merge.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/generate_kernels.h"
#include "kernels/heuristics.h"

namespace dflash::kernels::cuda {

namespace {

constexpr int kWarps = 4;  // per CTA, each over its own blocks of keys
constexpr int kThreads = kWarps * 32;

struct Geometry {
  int64_t n, nh, nkv, hd, S, C, group, chunks, slices;
  float scale;
};

// A lane's DL columns of one row (cache element `off`, a multiple of DL) as f32: one access, no
// branch, so a block's loads are all in flight together.
template <class T, int DL>
__device__ __forceinline__ void load_columns(float (&dst)[DL], const T* base, int64_t off) {
  const Vec<T, DL> v = *reinterpret_cast<const Vec<T, DL>*>(base + off);
#pragma unroll
  for (int e = 0; e < DL; ++e) dst[e] = to_float(v.v[e]);
}

// One halving step of reduce_scatter: lanes with bit O set keep values [HALF, 2 * HALF) (moved down
// to [0, HALF)), the others [0, HALF), each adding its partner's copy of the half it keeps.
template <int V, int O, int HALF>
__device__ __forceinline__ void halve(float (&x)[V], int lane) {
  const bool upper = (lane & O) != 0;
#pragma unroll
  for (int t = 0; t < HALF; ++t) {
    const float send = upper ? x[t] : x[t + HALF], keep = upper ? x[t + HALF] : x[t];
    x[t] = keep + __shfl_xor_sync(0xffffffffu, send, O);
  }
  if constexpr (HALF > 1) halve<V, O / 2, HALF / 2>(x, lane);
}

// Sums V values across the warp's 32 lanes so that lane l ends with the total of value l / (32 / V)
// in x[0]: full butterflies while more lanes than values remain, then halving steps (bit 4 of the
// lane picks the upper half first). Fixed order: same inputs, same bits.
template <int V>
__device__ __forceinline__ void reduce_scatter(float (&x)[V], int lane) {
  static_assert(V >= 1 && V <= 32 && (V & (V - 1)) == 0, "reduce_scatter: V must be a power of two up to 32");
  constexpr int R = 32 / V;  // lanes per value at the end
#pragma unroll
  for (int o = 1; o < R; o <<= 1)
#pragma unroll
    for (int t = 0; t < V; ++t) x[t] += __shfl_xor_sync(0xffffffffu, x[t], o);
  if constexpr (V > 1) halve<V, 16, V / 2>(x, lane);
}

// T: the cache's element type; HD: the head dim padded to a power of two (a lane owns DL = HD/32
// columns); GW: query heads per
// warp, GW * DL <= 32; KB: keys per block (8, 4 for HD 256 to spare registers), GW * KB <= 32 values
// reduced at once.
template <class T, int HD, int GW>
__global__ void __launch_bounds__(kThreads) slices_kernel(SlotAttentionArgs a, Geometry G) {
  constexpr int DL = HD / 32, KB = (DL >= 8 ? 4 : 8) < 32 / GW ? (DL >= 8 ? 4 : 8) : 32 / GW, V = GW * KB, R = 32 / V;
  __shared__ float sM[kWarps][GW], sL[kWarps][GW], sO[kWarps][GW][HD];
  unsigned bid = blockIdx.x;
  const int64_t slice = bid % unsigned(G.slices);
  bid /= unsigned(G.slices);
  const int64_t chunk = bid % unsigned(G.chunks);
  bid /= unsigned(G.chunks);
  const int64_t g = bid % unsigned(G.nkv);
  const int64_t i = bid / unsigned(G.nkv);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t hd = G.hd, s = a.slot[i], head0 = g * G.group + chunk * GW;  // the chunk's first query head
  const int heads = int(G.group - chunk * GW < GW ? G.group - chunk * GW : GW);  // real heads in the chunk
  // The row's last visible key (-1: a padding row, or a slot outside the cache: no key at all).
  int64_t last = a.pos[i] < G.C ? a.pos[i] : G.C - 1;
  if (s < 0 || s >= G.S) last = -1;
  const int64_t keys = last + 1, per = (keys + G.slices - 1) / G.slices;
  const int64_t k0 = slice * per, k1 = (slice + 1) * per < keys ? (slice + 1) * per : keys;
  const int64_t kv_stride = G.nkv * hd, d0 = int64_t(lane) * DL;
  const bool mine = d0 < hd;  // hd % 8 == 0 and DL <= 8: a lane's columns are all in or all out
  // A lane past hd reads column 0 (its query is 0, its output dropped); a key past k1 reads row
  // k1 - 1 (its score is -inf, its probability 0): every load is in bounds and unconditional.
  const int64_t slot_base = (s < 0 ? 0 : s) * G.C * kv_stride + g * hd + (mine ? d0 : 0);
  const T* const kc = static_cast<const T*>(a.k);
  const T* const vc = static_cast<const T*>(a.v);

  float q[GW][DL], acc[GW][DL];
#pragma unroll
  for (int h = 0; h < GW; ++h)
#pragma unroll
    for (int e = 0; e < DL; ++e) {
      q[h][e] = h < heads && mine ? load(a.q, a.bf16, (i * G.nh + head0 + h) * hd + d0 + e) * G.scale : 0.0f;
      acc[h][e] = 0.0f;
    }
  // This lane's head (value index / KB) and its running max and sum.
  const int my_head = (lane / R) / KB;
  float m = -INFINITY, l = 0.0f;

  for (int64_t t0 = k0 + int64_t(warp) * KB; t0 < k1; t0 += int64_t(kWarps) * KB) {
    float kr[KB][DL], vr[KB][DL];
#pragma unroll
    for (int j = 0; j < KB; ++j) {
      const int64_t row = slot_base + (t0 + j < k1 ? t0 + j : k1 - 1) * kv_stride;
      load_columns<T, DL>(kr[j], kc, row);
      load_columns<T, DL>(vr[j], vc, row);
    }
    // Scores: value h * KB + j is head h's dot product with key j; lane l ends with value l / R.
    float x[V];
#pragma unroll
    for (int h = 0; h < GW; ++h)
#pragma unroll
      for (int j = 0; j < KB; ++j) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < DL; ++e) d = fmaf(q[h][e], kr[j][e], d);
        x[h * KB + j] = d;
      }
    reduce_scatter<V>(x, lane);
    const float sc = t0 + (lane / R) % KB < k1 ? x[0] : -INFINITY;
    // The head's max and sum over its KB keys: its lanes are KB * R consecutive ones.
    float mx = sc;
#pragma unroll
    for (int o = R; o < KB * R; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const float m_new = fmaxf(m, mx);  // finite: key t0 < k1 is visible
    const float corr = __expf(m - m_new);  // 0 while m is -inf
    float p = sc == -INFINITY ? 0.0f : __expf(sc - m_new), ps = p;
#pragma unroll
    for (int o = R; o < KB * R; o <<= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
    l = l * corr + ps;
    m = m_new;
#pragma unroll
    for (int h = 0; h < GW; ++h) {
      const float ch = __shfl_sync(0xffffffffu, corr, h * KB * R);
#pragma unroll
      for (int e = 0; e < DL; ++e) acc[h][e] *= ch;
#pragma unroll
      for (int j = 0; j < KB; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, (h * KB + j) * R);
#pragma unroll
        for (int e = 0; e < DL; ++e) acc[h][e] = fmaf(pj, vr[j][e], acc[h][e]);
      }
    }
  }

  // The four warps' states into shared memory, then merged into the slice's partial:
  // [slice][i][head] (max, sum) and [slice][i][head][hd] (unnormalised output); a slice without
  // keys writes max -inf.
  if (lane % (KB * R) == 0) sM[warp][my_head] = m, sL[warp][my_head] = l;
#pragma unroll
  for (int h = 0; h < GW; ++h)
#pragma unroll
    for (int e = 0; e < DL; ++e) sO[warp][h][lane * DL + e] = acc[h][e];
  __syncthreads();
  for (int c = threadIdx.x; c < heads * HD; c += kThreads) {
    const int h = c / HD, d = c % HD;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sM[w][h]);
    float L = 0.0f, O = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = sM[w][h] == -INFINITY ? 0.0f : __expf(sM[w][h] - M);
      L = fmaf(sL[w][h], f, L);
      O = fmaf(sO[w][h][d], f, O);
    }
    const int64_t at = (slice * G.n + i) * G.nh + head0 + h;
    if (d == 0) a.partial_ml[2 * at] = M, a.partial_ml[2 * at + 1] = L;
    if (d < hd) a.partial_o[at * hd + d] = O;
  }
}

// Pass 2: one CTA per (row, head); slices with no visible key (max -inf) add nothing. A padding
// row has no slice with a key: its output is 0.
__global__ void merge_kernel(SlotAttentionArgs a, Geometry G) {
  const int64_t ih = blockIdx.x;  // i * nh + head
  const int64_t plane = G.n * G.nh;
  float M = -INFINITY;
  for (int64_t s = 0; s < G.slices; ++s) M = fmaxf(M, a.partial_ml[2 * (s * plane + ih)]);
  float L = 0.0f;
  for (int64_t s = 0; s < G.slices; ++s) {
    const float ms = a.partial_ml[2 * (s * plane + ih)];
    if (ms != -INFINITY) L += a.partial_ml[2 * (s * plane + ih) + 1] * __expf(ms - M);
  }
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  for (int64_t d = threadIdx.x; d < G.hd; d += blockDim.x) {
    float o = 0.0f;
    for (int64_t s = 0; s < G.slices; ++s) {
      const float ms = a.partial_ml[2 * (s * plane + ih)];
      if (ms != -INFINITY) o += a.partial_o[(s * plane + ih) * G.hd + d] * __expf(ms - M);
    }
    store(a.out, a.bf16, ih * G.hd + d, o * inv);
  }
}

template <int HD, int GW>
void launch(const SlotAttentionArgs& a, const Geometry& G, cudaStream_t s) {
  auto kernel = a.bf16 ? slices_kernel<bf16_t, HD, GW> : slices_kernel<float, HD, GW>;
  kernel<<<unsigned(G.n * G.nkv * G.chunks * G.slices), kThreads, 0, s>>>(a, G);
  check_launch("slot_attention (slices)");
  merge_kernel<<<unsigned(G.n * G.nh), 64, 0, s>>>(a, G);
  check_launch("slot_attention (merge)");
}

// Query heads a warp takes: the whole group when its columns fit 32 registers, else chunks.
template <int HD>
void launch_heads(const SlotAttentionArgs& a, Geometry& G, cudaStream_t s) {
  constexpr int most = 32 / (HD / 32);  // GW * DL <= 32
  int gw = 1;
  while (gw < G.group && gw < most) gw <<= 1;
  G.chunks = (G.group + gw - 1) / gw;
  if constexpr (most >= 16) if (gw == 16) return launch<HD, 16>(a, G, s);
  if constexpr (most >= 8) if (gw == 8) return launch<HD, 8>(a, G, s);
  if (gw == 4) return launch<HD, 4>(a, G, s);
  if (gw == 2) return launch<HD, 2>(a, G, s);
  launch<HD, 1>(a, G, s);
}

}  // namespace

int slot_attention_slices(int64_t n, int64_t nkv, int64_t C) {
  return heuristics::slot_attention_slices(n, nkv, C, sm_count());
}

void slot_attention_forward(const SlotAttentionArgs& a, void* stream) {
  if (a.n == 0) return;
  if (a.hd % 8 != 0 || a.hd > kSlotAttentionMaxHeadDim || a.nh % a.nkv != 0 || a.nh / a.nkv > kSlotAttentionMaxGroup)
    throw std::runtime_error("slot_attention: head dim must be a multiple of 8 up to 256, nh a multiple of nkv and "
                             "at most 16 query heads per kv head");
  Geometry G;
  G.n = a.n, G.nh = a.nh, G.nkv = a.nkv, G.hd = a.hd, G.S = a.S, G.C = a.C, G.scale = a.scale;
  G.group = a.nh / a.nkv;
  G.slices = slot_attention_slices(a.n, a.nkv, a.C);
  if (!aligned16(a.k) || !aligned16(a.v))
    throw std::runtime_error("slot_attention: the key and value caches must start at 16-byte aligned addresses "
                             "(whole tensors are; pass the cache itself, not an offset view)");
  cudaStream_t s = as_stream(stream);
  if (a.hd <= 32) launch_heads<32>(a, G, s);
  else if (a.hd <= 64) launch_heads<64>(a, G, s);
  else if (a.hd <= 128) launch_heads<128>(a, G, s);
  else launch_heads<256>(a, G, s);
}

}  // namespace dflash::kernels::cuda
