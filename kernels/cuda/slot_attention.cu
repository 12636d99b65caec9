// Attention of query rows over a KV cache of fixed slots on the GPU (kernels/cpu/slot_attention.cpp
// is the reference): the batched decode step's attention, where every row has its own slot and
// length. Split over the keys as in flash-decoding. Pass 1: one CTA per (row, kv head, key slice)
// holds the row's query heads of that kv head (the GQA group) and streams the slice's keys and
// values through shared memory in tiles of 32, so each key and value of a slot is read once per
// step however many query heads share it; each head keeps an online softmax (max, sum, and the
// unnormalised output, f32). Pass 2 merges the slices per (row, head). Lengths are read on the
// device, so one capture serves every step: a row reads only its own keys, slices past its
// length find none and are skipped in the merge.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/generate_kernels.h"
#include "kernels/cuda/kv_tiles.cuh"

namespace dflash::kernels::cuda {

namespace {

constexpr int kKeys = 32;                      // keys per tile: one per lane when scoring
constexpr int kWarps = 4;                      // per CTA
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = int(kSlotAttentionMaxGroup) / kWarps;  // query heads per warp
constexpr int64_t kKeysPerSlice = 256;         // cache rows per key slice (sets the slice count)
constexpr int kMaxSlices = 32;

struct Geometry {
  int64_t n, nh, nkv, hd, S, C, group, slices;
  float scale;
  bool packs;  // bf16 k and v at 16-byte aligned addresses: tiles load in 8-element packs
};

// Smem: Q [group][HD] f32, K [kKeys][HD + 1] f32 (the +1 keeps lanes on distinct banks when each
// lane reads its own key's row), V [kKeys][HD] f32.
template <int HD>
constexpr int smem_bytes() {
  return int(sizeof(float)) * (int(kSlotAttentionMaxGroup) * HD + kKeys * (HD + 1) + kKeys * HD);
}

template <int HD>
__global__ void __launch_bounds__(kThreads) slices_kernel(SlotAttentionArgs a, Geometry G) {
  constexpr int D32 = HD / 32;  // head-dim elements per lane in the output
  extern __shared__ float smem[];
  float* sQ = smem;                                 // [group][HD]
  float* sK = sQ + kSlotAttentionMaxGroup * HD;     // [kKeys][HD + 1]
  float* sV = sK + kKeys * (HD + 1);                // [kKeys][HD]
  unsigned bid = blockIdx.x;
  const int64_t slice = bid % unsigned(G.slices);
  bid /= unsigned(G.slices);
  const int64_t g = bid % unsigned(G.nkv);
  const int64_t i = bid / unsigned(G.nkv);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t hd = G.hd, s = a.slot[i];
  // The row's last visible key (-1: a padding row, or a slot outside the cache: no key at all).
  int64_t last = a.pos[i] < G.C ? a.pos[i] : G.C - 1;
  if (s < 0 || s >= G.S) last = -1;
  const int64_t keys = last + 1, per = (keys + G.slices - 1) / G.slices;
  const int64_t k0 = slice * per, k1 = (slice + 1) * per < keys ? (slice + 1) * per : keys;
  const int64_t kv_stride = G.nkv * hd;
  const int64_t slot_base = (s < 0 ? 0 : s) * G.C * kv_stride + g * hd;

  // The group's query heads into shared memory (columns past hd are 0).
  for (int e = threadIdx.x; e < G.group * HD; e += blockDim.x) {
    const int r = e / HD, d = e % HD;
    sQ[e] = d < hd ? load(a.q, a.bf16, (i * G.nh + g * G.group + r) * hd + d) : 0.0f;
  }

  // Per head of this warp: running max and sum; output accumulators per lane.
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][D32];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int dd = 0; dd < D32; ++dd) acc[rr][dd] = 0.0f;
  }

  for (int64_t t0 = k0; t0 < k1; t0 += kKeys) {
    __syncthreads();  // the previous tile is consumed (and, the first time, sQ is written)
    if (G.packs) {
      auto at = [&](int j, int d) { return slot_base + (t0 + j) * kv_stride + d; };
      auto valid = [&](int j) { return t0 + j < k1; };
      float* const dst[2] = {sK, sV};
      const int stride[2] = {HD + 1, HD};
      const bf16_t* const src[2] = {static_cast<const bf16_t*>(a.k), static_cast<const bf16_t*>(a.v)};
      load_tiles_packs<HD, kThreads>(dst, stride, src, hd, at, valid);
    } else {
      for (int e = threadIdx.x; e < kKeys * HD; e += blockDim.x) {
        const int j = e / HD, d = e % HD;
        const int64_t key = t0 + j;
        float kv = 0.0f, vv = 0.0f;
        if (key < k1 && d < hd) {
          const int64_t off = slot_base + key * kv_stride + d;
          kv = load(a.k, a.bf16, off);
          vv = load(a.v, a.bf16, off);
        }
        sK[j * (HD + 1) + d] = kv;
        sV[j * HD + d] = vv;
      }
    }
    __syncthreads();
    const int64_t key = t0 + lane;  // this lane's key when scoring
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = rr * kWarps + warp;  // heads dealt round-robin: a group of 4 uses every warp
      if (r >= G.group) continue;        // warp-uniform
      const float* q = sQ + r * HD;
      const float* k = sK + lane * (HD + 1);
      // Four independent partial sums (columns d % 4), added pairwise: the order depends on
      // neither the row count nor the slot.
      float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 8
      for (int d = 0; d < HD; d += 4)
#pragma unroll
        for (int u = 0; u < 4; ++u) s4[u] = fmaf(q[d + u], k[d + u], s4[u]);
      float sc = (s4[0] + s4[1]) + (s4[2] + s4[3]);
      sc = key < k1 ? sc * G.scale : -INFINITY;
      float mx = sc;
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m[rr], mx);      // finite: key t0 < k1 is visible
      const float corr = __expf(m[rr] - m_new);  // 0 while m is -inf
      const float p = sc == -INFINITY ? 0.0f : __expf(sc - m_new);
      l[rr] = l[rr] * corr + warp_sum(p);
      m[rr] = m_new;
#pragma unroll
      for (int dd = 0; dd < D32; ++dd) acc[rr][dd] *= corr;
      for (int j = 0; j < kKeys; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
        const float* v = sV + j * HD;
#pragma unroll
        for (int dd = 0; dd < D32; ++dd) acc[rr][dd] = fmaf(pj, v[lane + 32 * dd], acc[rr][dd]);
      }
    }
  }

  // Partials: [slice][i][head] (max, sum) and [slice][i][head][hd] (unnormalised output); a slice
  // without keys writes max -inf.
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = rr * kWarps + warp;
    if (r >= G.group) continue;
    const int64_t at = (slice * G.n + i) * G.nh + g * G.group + r;
    if (lane == 0) {
      a.partial_ml[2 * at] = m[rr];
      a.partial_ml[2 * at + 1] = l[rr];
    }
#pragma unroll
    for (int dd = 0; dd < D32; ++dd) {
      const int d = lane + 32 * dd;
      if (d < hd) a.partial_o[at * hd + d] = acc[rr][dd];
    }
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

template <int HD>
void launch(const SlotAttentionArgs& a, const Geometry& G, cudaStream_t s) {
  constexpr int smem = smem_bytes<HD>();
  static_assert(smem <= 227 * 1024, "slot attention: shared memory exceeds the sm_90 limit");
  auto kernel = slices_kernel<HD>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("slot_attention: cudaFuncSetAttribute failed: ") + cudaGetErrorString(e));
  kernel<<<unsigned(G.n * G.nkv * G.slices), kThreads, smem, s>>>(a, G);
  check_launch("slot_attention (slices)");
  merge_kernel<<<unsigned(G.n * G.nh), 64, 0, s>>>(a, G);
  check_launch("slot_attention (merge)");
}

}  // namespace

int slot_attention_splits(int64_t C) {
  const int64_t s = (C + kKeysPerSlice - 1) / kKeysPerSlice;
  return int(s < 1 ? 1 : (s > kMaxSlices ? kMaxSlices : s));
}

void slot_attention_forward(const SlotAttentionArgs& a, void* stream) {
  if (a.n == 0) return;
  if (a.hd % 8 != 0 || a.hd > kSlotAttentionMaxHeadDim || a.nh % a.nkv != 0 || a.nh / a.nkv > kSlotAttentionMaxGroup)
    throw std::runtime_error("slot_attention: head dim must be a multiple of 8 up to 256, nh a multiple of nkv and "
                             "at most 16 query heads per kv head");
  Geometry G;
  G.n = a.n, G.nh = a.nh, G.nkv = a.nkv, G.hd = a.hd, G.S = a.S, G.C = a.C, G.scale = a.scale;
  G.group = a.nh / a.nkv;
  G.slices = slot_attention_splits(a.C);
  G.packs = a.bf16 && aligned16(a.k) && aligned16(a.v);  // hd % 8 == 0: every row stays aligned
  cudaStream_t s = as_stream(stream);
  if (a.hd <= 32) launch<32>(a, G, s);
  else if (a.hd <= 64) launch<64>(a, G, s);
  else if (a.hd <= 128) launch<128>(a, G, s);
  else launch<256>(a, G, s);
}

}  // namespace dflash::kernels::cuda
