// Attention of n query rows over a KV cache on the GPU (kernels/cpu/decode.cpp's
// cached_attention_forward is the reference), split over the keys as in flash-decoding: a verify
// block of 16 rows over thousands of cached keys has too few rows to fill the GPU by rows alone.
// Pass 1: one CTA per (kv head, key slice, chunk of the rows that use that head) computes each
// row's online softmax over its slice (max, sum and the unnormalised output, f32). Pass 2 merges
// the slices per (row, head). The cache length is read on the device, so one capture serves every
// round; slices past it find no keys and are skipped in the merge.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_kernels.h"
#include "kernels/cuda/kv_tiles.cuh"

namespace dflash::kernels::cuda {

namespace {

constexpr int kKeys = 32;             // keys per tile: one per lane when scoring
constexpr int kWarps = 4;             // per CTA
constexpr int kRowsPerWarp = 8;       // query rows (row = (query i, head of the group)) per warp
constexpr int kRows = kWarps * kRowsPerWarp;  // per CTA
constexpr int64_t kKeysPerSlice = 256;        // cache rows per key slice (sets the slice count)
constexpr int kMaxSlices = 32;

struct Geometry {
  int64_t n, nh, nkv, hd, C, group, rows_per_kv, chunks, slices;
  float scale;
  bool packs;  // bf16 q, k, v at 16-byte aligned addresses: tiles load in 8-element packs
};

constexpr int kThreads = kWarps * 32;

// Row r of kv head g: query i = r / group, head g * group + r % group.
__device__ __forceinline__ int64_t head_of(const Geometry& G, int64_t g, int64_t r) { return g * G.group + r % G.group; }

// Smem: Q [kRows][HD] f32, K [kKeys][HD + 1] f32 (the +1 keeps lanes on distinct banks when each
// lane reads its own key's row), V [kKeys][HD] f32.
template <int HD>
constexpr int smem_bytes() {
  return int(sizeof(float)) * (kRows * HD + kKeys * (HD + 1) + kKeys * HD);
}

template <int HD>
__global__ void __launch_bounds__(kThreads) slices_kernel(CachedAttentionArgs a, Geometry G) {
  constexpr int D32 = HD / 32;  // head-dim elements per lane in the output
  extern __shared__ float smem[];
  float* sQ = smem;                       // [kRows][HD]
  float* sK = sQ + kRows * HD;            // [kKeys][HD + 1]
  float* sV = sK + kKeys * (HD + 1);      // [kKeys][HD]
  unsigned bid = blockIdx.x;
  const int64_t chunk = bid % unsigned(G.chunks);
  bid /= unsigned(G.chunks);
  const int64_t slice = bid % unsigned(G.slices);
  const int64_t g = bid / unsigned(G.slices);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t hd = G.hd, pos0 = a.pos0[0];
  // Keys any row may see: 0 .. min(pos0 + n, C) - 1, cut into G.slices slices.
  const int64_t keys = pos0 + G.n < G.C ? pos0 + G.n : G.C;
  const int64_t per = (keys + G.slices - 1) / G.slices;
  const int64_t k0 = slice * per, k1 = (slice + 1) * per < keys ? (slice + 1) * per : keys;
  const int64_t row0 = chunk * kRows;
  const int nrows = int(G.rows_per_kv - row0 < kRows ? G.rows_per_kv - row0 : kRows);
  const int64_t kv_stride = G.nkv * hd;

  // The chunk's rows into shared memory (rows past nrows and columns past hd are 0).
  if (G.packs) {
    float* const dst[1] = {sQ};
    const int stride[1] = {HD};
    const bf16_t* const src[1] = {static_cast<const bf16_t*>(a.q)};
    load_tiles_packs<HD, kThreads>(
        dst, stride, src, hd,
        [&](int r, int d) {
          const int64_t row = row0 + r;
          return (row / G.group * G.nh + head_of(G, g, row)) * hd + d;
        },
        [&](int r) { return r < nrows; });
  } else {
    for (int e = threadIdx.x; e < kRows * HD; e += blockDim.x) {
      const int r = e / HD, d = e % HD;
      float v = 0.0f;
      if (r < nrows && d < hd) {
        const int64_t row = row0 + r, i = row / G.group;
        v = load(a.q, a.bf16, (i * G.nh + head_of(G, g, row)) * hd + d);
      }
      sQ[e] = v;
    }
  }

  // Per row of this warp: position, running max and sum; output accumulators per lane.
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][D32];
  int64_t last[kRowsPerWarp];  // the row's last visible key (-1: none, a padded row)
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = rr * kWarps + warp;  // rows dealt round-robin: a few rows still use every warp
    last[rr] = r < nrows ? pos0 + (row0 + r) / G.group : -1;
    if (last[rr] > G.C - 1) last[rr] = G.C - 1;
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int dd = 0; dd < D32; ++dd) acc[rr][dd] = 0.0f;
  }

  for (int64_t t0 = k0; t0 < k1; t0 += kKeys) {
    __syncthreads();  // the previous tile is consumed (and, the first time, sQ is written)
    if (G.packs) {
      auto at = [&](int j, int d) { return (t0 + j) * kv_stride + g * hd + d; };
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
          const int64_t off = key * kv_stride + g * hd + d;
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
      if (last[rr] < t0) continue;  // warp-uniform: the row sees none of this tile
      const float* q = sQ + (rr * kWarps + warp) * HD;
      const float* k = sK + lane * (HD + 1);
      // Four independent partial sums (columns d % 4), added pairwise: a chain of HD / 4 dependent
      // FMAs instead of HD. The order depends on neither n nor the row, so a row scores alike in a
      // one-token step and in a verify block.
      float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 8
      for (int d = 0; d < HD; d += 4)
#pragma unroll
        for (int u = 0; u < 4; ++u) s4[u] = fmaf(q[d + u], k[d + u], s4[u]);
      float s = (s4[0] + s4[1]) + (s4[2] + s4[3]);
      s = (key < k1 && key <= last[rr]) ? s * G.scale : -INFINITY;
      float mx = s;
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m[rr], mx);  // finite: key t0 <= last is visible
      const float corr = __expf(m[rr] - m_new);  // 0 while m is -inf
      const float p = s == -INFINITY ? 0.0f : __expf(s - m_new);
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

  // Partials: [slice][i][head] (max, sum) and [slice][i][head][hd] (unnormalised output).
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = rr * kWarps + warp;
    if (r >= nrows) continue;
    const int64_t row = row0 + r, i = row / G.group, h = head_of(G, g, row);
    const int64_t at = (slice * G.n + i) * G.nh + h;
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

// Pass 2: one CTA per (query i, head); slices with no visible key (max -inf) add nothing. Key 0
// is visible to every row, so the total sum is > 0.
__global__ void merge_kernel(CachedAttentionArgs a, Geometry G) {
  const int64_t ih = blockIdx.x;  // i * nh + head
  float M = -INFINITY;
  for (int64_t s = 0; s < G.slices; ++s) M = fmaxf(M, a.partial_ml[2 * (s * G.n * G.nh + ih)]);
  float L = 0.0f;
  for (int64_t s = 0; s < G.slices; ++s) {
    const float ms = a.partial_ml[2 * (s * G.n * G.nh + ih)];
    if (ms != -INFINITY) L += a.partial_ml[2 * (s * G.n * G.nh + ih) + 1] * __expf(ms - M);
  }
  const float inv = 1.0f / L;
  for (int64_t d = threadIdx.x; d < G.hd; d += blockDim.x) {
    float o = 0.0f;
    for (int64_t s = 0; s < G.slices; ++s) {
      const float ms = a.partial_ml[2 * (s * G.n * G.nh + ih)];
      if (ms != -INFINITY) o += a.partial_o[(s * G.n * G.nh + ih) * G.hd + d] * __expf(ms - M);
    }
    store(a.out, a.bf16, ih * G.hd + d, o * inv);
  }
}

template <int HD>
void launch(const CachedAttentionArgs& a, const Geometry& G, cudaStream_t s) {
  constexpr int smem = smem_bytes<HD>();
  static_assert(smem <= 227 * 1024, "cached attention: shared memory exceeds the sm_90 limit");
  auto kernel = slices_kernel<HD>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("cached_attention: cudaFuncSetAttribute failed: ") + cudaGetErrorString(e));
  kernel<<<unsigned(G.nkv * G.slices * G.chunks), kThreads, smem, s>>>(a, G);
  check_launch("cached_attention (slices)");
  merge_kernel<<<unsigned(G.n * G.nh), 64, 0, s>>>(a, G);
  check_launch("cached_attention (merge)");
}

}  // namespace

int cached_attention_splits(int64_t C) {
  const int64_t s = (C + kKeysPerSlice - 1) / kKeysPerSlice;
  return int(s < 1 ? 1 : (s > kMaxSlices ? kMaxSlices : s));
}

void cached_attention_forward(const CachedAttentionArgs& a, void* stream) {
  if (a.n == 0) return;
  if (a.hd % 8 != 0 || a.hd > kCachedAttentionMaxHeadDim || a.nh % a.nkv != 0)
    throw std::runtime_error("cached_attention: head dim must be a multiple of 8 up to 256 and nh a multiple of nkv");
  Geometry G;
  G.n = a.n, G.nh = a.nh, G.nkv = a.nkv, G.hd = a.hd, G.C = a.C, G.scale = a.scale;
  G.group = a.nh / a.nkv;
  G.rows_per_kv = a.n * G.group;
  G.chunks = (G.rows_per_kv + kRows - 1) / kRows;
  G.slices = cached_attention_splits(a.C);
  G.packs = a.bf16 && aligned16(a.q) && aligned16(a.k) && aligned16(a.v);  // hd % 8 == 0: every row stays aligned
  cudaStream_t s = as_stream(stream);
  if (a.hd <= 32) launch<32>(a, G, s);
  else if (a.hd <= 64) launch<64>(a, G, s);
  else if (a.hd <= 128) launch<128>(a, G, s);
  else launch<256>(a, G, s);
}

}  // namespace dflash::kernels::cuda
