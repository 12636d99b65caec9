// DFlash block-sparse attention forward on the GPU (semantics as kernels/cpu/attention.cpp and
// docs/MODEL.md, the attention mask), flash-attention style on bf16 tensor cores, plus the
// visited-tile count, computed on the device so that it is part of a recorded program. These are
// kernel version 1, the portable one; version 2 (dflash_attention_*_sm90.cu, wgmma) runs instead
// where kernels/heuristics.h chooses it.
#include <cmath>

#include "kernels/cuda/dflash_attention.cuh"

namespace dflash::kernels::cuda {
using namespace attn;

namespace {

struct ForwardParams {
  const void *q, *k, *v;  // [B, T, nh, hd], [B, S+T, nkv, hd] x 2; one dtype
  bool bf16;
  const int32_t *anchors, *keep;  // [B, N]
  Geometry G;
  int chunks;      // CTAs per (b, a, g): the group*bs query rows of kv head g, 16*MT per warp
  void* out;       // [B, T, nh, hd], q's dtype
  float* lse;      // [B, nh, T]
};

// Q [NP][64][LD], then one K and one V tile [NP][KT][LD] each.
template <int HDP, int NP, int KT>
constexpr int forward_smem_bytes() {
  return int(sizeof(bf16_t)) * row_stride<HDP>() * NP * (kCtaRows + 2 * KT);
}

// out[i], out[i + 1] = x, y (i even: 4- or 8-byte aligned, as rows have hd % 8 == 0 elements).
__device__ __forceinline__ void store_pair(void* out, bool bf16, int64_t i, float x, float y) {
  if (bf16) *reinterpret_cast<__nv_bfloat162*>(static_cast<bf16_t*>(out) + i) = __floats2bfloat162_rn(x, y);
  else *reinterpret_cast<float2*>(static_cast<float*>(out) + i) = make_float2(x, y);
}

// One CTA per (sequence b, query block a, kv head g, chunk of the group*bs query rows that use
// g); warp w owns chunk rows 16*MT*w .. 16*MT*(w+1)-1 as MT m tiles of 16. Block a sees
// L = anchor + bs keys, visited as one virtual sequence v = 0..L-1 (key v for v < anchor, then
// the own draft key S + a*bs + v - anchor) in tiles of KT keys. FlashAttention-2's schedule with
// one K and one V buffer: V(t) loads while S = Q K(t)^T and the online softmax run, K(t+1) loads
// while O = O * correction + P V(t) runs. Softmax in f32, log2 units; each row's max and sum over
// its 4 lanes. Every tile holds at least one visible key, so every row max is finite after the
// first tile. Inner loops have compile-time trip counts (columns past hd are zero in shared
// memory), so they are straight-line code. A dropped block (keep = 0) writes output 0 and lse 0.
template <int HDP, int NP, int KT, int MT>
__global__ void __launch_bounds__(kMaxThreads / MT) attention_forward_kernel(ForwardParams p) {
  constexpr int LD = row_stride<HDP>(), QS = kCtaRows * LD, KS = KT * LD;  // plane strides
  constexpr int WR = 16 * MT;                                              // rows per warp
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16_t* sQ = reinterpret_cast<bf16_t*>(smem_raw);  // [NP][64][LD]
  bf16_t* sK = sQ + NP * QS;                          // [NP][KT][LD]
  bf16_t* sV = sK + NP * KS;                          // [NP][KT][LD]
  const Geometry& G = p.G;
  // Block indices fit in 32 bits (the grid is B*N*nkv*chunks < 2^31 CTAs).
  unsigned bid = blockIdx.x;
  const int chunk = int(bid % unsigned(p.chunks));
  bid /= unsigned(p.chunks);
  const int g = int(bid % unsigned(G.nkv));
  bid /= unsigned(G.nkv);
  const int a = int(G.N) - 1 - int(bid % unsigned(G.N)), b = int(bid / unsigned(G.N));  // heaviest first
  const int cta_rows = int(blockDim.x / 32) * WR;
  const int row0 = chunk * cta_rows;
  const int nrows = int(G.rows_per_kv) - row0 < cta_rows ? int(G.rows_per_kv) - row0 : cta_rows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;

  if (p.keep[b * G.N + a] == 0) {
    for (int64_t i = threadIdx.x; i < int64_t(nrows) * G.hd; i += blockDim.x) {
      const int64_t e = i % G.hd;
      int64_t li;
      const int64_t row = query_row(G, b, a, g, row0 + i / G.hd, &li);
      store(p.out, p.bf16, row * G.hd + e, 0.0f);
      if (e == 0) p.lse[li] = 0.0f;
    }
    return;
  }
  // Keys, positions and strides below are < 2^31: 32-bit, to keep registers for the accumulators.
  const int anchor = int(clamp_anchor(p.anchors[b * G.N + a], G.S)), L = anchor + int(G.bs);
  const int ntiles = (L + KT - 1) / KT;
  // Key rows of kv head g: element offset kv_base + key * kv_stride.
  const int64_t kv_base = (b * G.keys * G.nkv + g) * G.hd;
  const int draft0 = int(G.S) + a * int(G.bs), kv_stride = int(G.nkv * G.hd);

  auto q_offset = [&](int r) -> int64_t {
    int64_t li;
    return r < nrows ? query_row(G, b, a, g, row0 + r, &li) * G.hd : -1;
  };
  auto stage_kv = [&](bf16_t* dst, const void* src, int t) {
    const int v0 = t * KT;
    if (NP == 1 && v0 + KT <= anchor) {  // context keys v0..v0+KT-1 only: constant row stride
      stage_strided<HDP>(dst, KT, src, kv_base + int64_t(v0) * kv_stride, kv_stride, G.hd);
      return;
    }
    stage_rows<HDP, NP>(dst, KS, KT, src, p.bf16, G.hd, [&](int r) -> int64_t {
      const int v = v0 + r;
      if (v >= L) return int64_t(-1);
      return kv_base + int64_t(v < anchor ? v : draft0 + (v - anchor)) * kv_stride;
    });
  };
  stage_rows<HDP, NP>(sQ, QS, cta_rows, p.q, p.bf16, G.hd, q_offset);
  stage_kv(sK, p.k, 0);
  cp_async_commit();

  // Per lane and m tile: accumulator rows gq (index 0) and gq + 8 (index 1) of the tile's 16.
  float o[MT][HDP / 8][4] = {};  // (16*MT, HDP) output rows, unnormalised
  float m[MT][2], l[MT][2];      // running max (log2 units), the lane's partial sum
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
  const float c = G.scale * kLog2e;
  const bool active = warp * WR < nrows;
  const int wrow = warp * WR;
  // f32 at hd 256 keeps a run-time hd test per head-dim step: as straight-line code, ptxas would
  // hoist the fragment loads of both planes far enough to spill.
  constexpr bool kHdSteps = NP == 2 && HDP == 256;
  for (int t = 0; t < ntiles; ++t) {
    cp_async_wait<0>();
    __syncthreads();  // K(t) (and Q) visible; every warp is done with V(t-1)
    stage_kv(sV, p.v, t);
    cp_async_commit();
    // P of the tile as bf16 A fragments (NP planes): 16*MT rows x KT keys, k step 16.
    uint32_t pa[MT][KT / 16][NP][4];
    if (active) {
      float s[MT][KT / 8][4] = {};  // (16*MT, KT) scores of the tile, then P
#pragma unroll
      for (int kk = 0; kk < HDP / 16; ++kk) {
        if (kHdSteps && kk * 16 >= G.hd) break;
        uint32_t qa[MT][NP][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) load_a_planes<NP, LD>(qa[mt], sQ, QS, wrow + mt * 16, kk * 16, lane);
#pragma unroll
        for (int n2 = 0; n2 < KT / 16; ++n2) {
          uint32_t kb[NP][4];
          load_b_nk_planes<NP, LD>(kb, sK, KS, n2 * 16, kk * 16, lane);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_planes<NP>(s[mt][2 * n2], qa[mt], kb, 0);
            mma_planes<NP>(s[mt][2 * n2 + 1], qa[mt], kb, 1);
          }
        }
      }
      if ((t + 1) * KT > L) {  // the last tile: virtual keys >= L are masked
        const int vis = L - t * KT;
#pragma unroll
        for (int nb = 0; nb < KT / 8; ++nb)
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (nb * 8 + 2 * tq + (j & 1) >= vis)
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) s[mt][nb][j] = -INFINITY;
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float mx = -INFINITY;
#pragma unroll
          for (int nb = 0; nb < KT / 8; ++nb) mx = fmaxf(mx, fmaxf(s[mt][nb][2 * i], s[mt][nb][2 * i + 1]));
          const float mnew = fmaxf(m[mt][i], quad_max(mx) * c);  // c > 0: max(s * c) = max(s) * c
          const float corr = exp2_ftz(m[mt][i] - mnew);           // 0 before the first tile
          m[mt][i] = mnew;
          float sum = 0.0f;
#pragma unroll
          for (int nb = 0; nb < KT / 8; ++nb)
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
              const float e = exp2_ftz(fmaf(s[mt][nb][2 * i + jj], c, -mnew));
              s[mt][nb][2 * i + jj] = e;
              sum += e;
            }
          l[mt][i] = l[mt][i] * corr + sum;
#pragma unroll
          for (int nd = 0; nd < HDP / 8; ++nd) o[mt][nd][2 * i] *= corr, o[mt][nd][2 * i + 1] *= corr;
        }
#pragma unroll
        for (int kk = 0; kk < KT / 16; ++kk) a_from_acc<NP>(pa[mt][kk], s[mt][2 * kk], s[mt][2 * kk + 1]);
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // V(t) visible; every warp is done with K(t)
    if (t + 1 < ntiles) stage_kv(sK, p.k, t + 1);
    cp_async_commit();
    if (active) {
#pragma unroll
      for (int kk = 0; kk < KT / 16; ++kk) {
#pragma unroll
        for (int n2 = 0; n2 < HDP / 16; ++n2) {
          if (kHdSteps && n2 * 16 >= G.hd) break;
          uint32_t vb[NP][4];
          load_b_kn_planes<NP, LD>(vb, sV, KS, kk * 16, n2 * 16, lane);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_planes<NP>(o[mt][2 * n2], pa[mt][kk], vb, 0);
            mma_planes<NP>(o[mt][2 * n2 + 1], pa[mt][kk], vb, 1);
          }
        }
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float sum = quad_sum(l[mt][i]);  // >= 1: the row max contributes exp2(~0)
      const int r = wrow + mt * 16 + gq + 8 * i;
      if (r >= nrows) continue;
      int64_t li;
      const int64_t base = query_row(G, b, a, g, row0 + r, &li) * G.hd;
      const float inv = 1.0f / sum;
#pragma unroll
      for (int nd = 0; nd < HDP / 8; ++nd) {
        const int col = nd * 8 + 2 * tq;
        if (col >= G.hd) break;
        store_pair(p.out, p.bf16, base + col, o[mt][nd][2 * i] * inv, o[mt][nd][2 * i + 1] * inv);
      }
      if (tq == 0) p.lse[li] = m[mt][i] * kLn2 + logf(sum);
    }
}

// tiles[0] = sum over kept blocks of ceil(min(anchor, S) / key_tile) + 1 (the anchor clamped to
// [0, S]), as the CPU kernel counts. One block; integer sums are exact in any order.
constexpr int kTileThreads = 256;
__global__ void tiles_visited_kernel(const int32_t* anchors, const int32_t* keep, int64_t blocks, int64_t S,
                                     int64_t key_tile, int32_t* tiles) {
  __shared__ long long sh[kTileThreads / 32];
  long long n = 0;
  for (int64_t i = threadIdx.x; i < blocks; i += kTileThreads)
    if (keep[i] != 0) n += (clamp_anchor(anchors[i], S) + key_tile - 1) / key_tile + 1;
  n = block_sum<kTileThreads, long long>(n, sh);
  if (threadIdx.x == 0) tiles[0] = int32_t(n);
}

template <int HDP, int NP>
void launch_forward(const DflashAttentionForward& a, const Geometry& G, cudaStream_t s) {
  constexpr int KT = forward_key_tile<HDP>(), MT = forward_m_tiles<HDP, NP>();
  constexpr int smem = forward_smem_bytes<HDP, NP, KT>();
  static_assert(smem <= kMaxSmem, "dflash attention forward: shared memory exceeds the sm_90 limit");
  const int warps = query_warps(G.rows_per_kv, 16 * MT);
  const int chunks = int((G.rows_per_kv + 16 * MT * warps - 1) / (16 * MT * warps));
  const ForwardParams p{a.q, a.k, a.v, a.bf16, a.anchors, a.keep, G, chunks, a.out, a.lse};
  auto kernel = attention_forward_kernel<HDP, NP, KT, MT>;
  allow_smem(kernel, smem, "dflash_attention_forward");
  kernel<<<unsigned(G.B * G.N * G.nkv * chunks), 32 * warps, smem, s>>>(p);
}

}  // namespace

void dflash_attention_forward(const DflashAttentionForward& a, void* stream) {
  const Geometry G = geometry(a.d);
  cudaStream_t s = as_stream(stream);
  tiles_visited_kernel<<<1, kTileThreads, 0, s>>>(a.anchors, a.keep, G.B * G.N, G.S, a.d.key_tile, a.tiles);
  check_launch("dflash_attention_forward: tiles visited");
  if (G.B * G.N * G.nkv == 0) return;
  if (tries_sm90(a.version) && sm90::forward(a, stream)) return;
  const int64_t hdp = G.hd <= 64 ? 64 : (G.hd <= 128 ? 128 : 256);
  if (a.bf16) {
    if (hdp == 64) launch_forward<64, 1>(a, G, s);
    else if (hdp == 128) launch_forward<128, 1>(a, G, s);
    else launch_forward<256, 1>(a, G, s);
  } else {
    if (hdp == 64) launch_forward<64, 2>(a, G, s);
    else if (hdp == 128) launch_forward<128, 2>(a, G, s);
    else launch_forward<256, 2>(a, G, s);
  }
  check_launch("dflash_attention_forward");
}

}  // namespace dflash::kernels::cuda
