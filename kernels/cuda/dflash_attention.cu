// DFlash block-sparse attention forward on the GPU (semantics as kernels/cpu/attention.cpp and
// DFLASH.md "The attention mask"), flash-attention style on bf16 tensor cores, plus the
// visited-tile count, computed on the device so that it is part of a recorded program.
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
  int chunks;      // CTAs per (b, a, g): the group*bs query rows of kv head g, 16 per warp
  void* out;       // [B, T, nh, hd], q's dtype
  float* lse;      // [B, nh, T]
};

template <int HDP, int NP, int KT>
constexpr int forward_smem_bytes() {
  return int(sizeof(bf16_t)) * row_stride<HDP>() * (NP * kCtaRows + 2 * 2 * NP * KT);
}

// One CTA per (sequence b, query block a, kv head g, chunk of the group*bs query rows that use
// g); warp w owns chunk rows 16w..16w+15. Block a sees L = anchor + bs keys, visited as one
// virtual sequence v = 0..L-1 (key v for v < anchor, then the own draft key S + a*bs + v - anchor)
// in tiles of KT keys, double buffered. Per tile: S = Q K^T (tensor cores), the online softmax
// in f32 (log2 units; each row's max and sum over its 4 lanes), O = O * correction + P V. Every
// tile holds at least one visible key, so every row max is finite after the first tile.
// A dropped block (keep = 0) writes output 0 and lse 0 and reads no key.
template <int HDP, int NP, int KT>
__global__ void __launch_bounds__(kMaxThreads) attention_forward_kernel(ForwardParams p) {
  constexpr int LD = row_stride<HDP>(), QS = kCtaRows * LD, KS = KT * LD;  // plane strides
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16_t* sQ = reinterpret_cast<bf16_t*>(smem_raw);  // [NP][64][LD]
  bf16_t* sK = sQ + NP * QS;                          // [2][NP][KT][LD]
  bf16_t* sV = sK + 2 * NP * KS;                      // [2][NP][KT][LD]
  const Geometry& G = p.G;
  int64_t bid = blockIdx.x;
  const int chunk = int(bid % p.chunks);
  bid /= p.chunks;
  const int64_t g = bid % G.nkv;
  bid /= G.nkv;
  const int64_t a = G.N - 1 - bid % G.N, b = bid / G.N;  // later blocks (more keys) start first
  const int cta_rows = int(blockDim.x / 32) * 16;
  const int64_t row0 = int64_t(chunk) * cta_rows;
  const int nrows = int(G.rows_per_kv - row0 < cta_rows ? G.rows_per_kv - row0 : cta_rows);
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
  const int64_t anchor = clamp_anchor(p.anchors[b * G.N + a], G.S), L = anchor + G.bs;
  const int ntiles = int((L + KT - 1) / KT);

  auto q_offset = [&](int r) -> int64_t {
    int64_t li;
    return r < nrows ? query_row(G, b, a, g, row0 + r, &li) * G.hd : -1;
  };
  auto stage_kv = [&](int t) {
    auto kv_offset = [&](int r) -> int64_t {
      const int64_t v = int64_t(t) * KT + r;
      if (v >= L) return -1;
      const int64_t key = v < anchor ? v : G.S + a * G.bs + (v - anchor);
      return ((b * G.keys + key) * G.nkv + g) * G.hd;
    };
    stage_rows<HDP, NP>(sK + (t & 1) * NP * KS, KS, KT, p.k, p.bf16, G.hd, kv_offset);
    stage_rows<HDP, NP>(sV + (t & 1) * NP * KS, KS, KT, p.v, p.bf16, G.hd, kv_offset);
  };
  stage_rows<HDP, NP>(sQ, QS, cta_rows, p.q, p.bf16, G.hd, q_offset);
  stage_kv(0);
  cp_async_commit();

  // Per lane: accumulator rows gq (index 0) and gq + 8 (index 1) of the warp's 16 rows.
  float o[HDP / 8][4] = {};  // (16, HDP) output rows, unnormalised
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // running max (log2 units), lane's partial sum
  const float c = G.scale * kLog2e;
  const bool active = warp * 16 < nrows;
  for (int t = 0; t < ntiles; ++t) {
    if (t + 1 < ntiles) stage_kv(t + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (active) {
      const bf16_t* kt = sK + (t & 1) * NP * KS;
      const bf16_t* vt = sV + (t & 1) * NP * KS;
      float s[KT / 8][4] = {};  // (16, KT) scores of the tile
#pragma unroll
      for (int kk = 0; kk < HDP / 16; ++kk) {
        if (kk * 16 >= G.hd) break;
        uint32_t qa[NP][4];
        load_a_planes<NP, LD>(qa, sQ, QS, warp * 16, kk * 16, lane);
#pragma unroll
        for (int n2 = 0; n2 < KT / 16; ++n2) {
          uint32_t kb[NP][4];
          load_b_nk_planes<NP, LD>(kb, kt, KS, n2 * 16, kk * 16, lane);
          mma_planes<NP>(s[2 * n2], qa, kb, 0);
          mma_planes<NP>(s[2 * n2 + 1], qa, kb, 1);
        }
      }
      float mx[2] = {m[0], m[1]};
#pragma unroll
      for (int nb = 0; nb < KT / 8; ++nb)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t v = int64_t(t) * KT + nb * 8 + 2 * tq + (j & 1);
          s[nb][j] = v < L ? s[nb][j] * c : -INFINITY;
          mx[j >> 1] = fmaxf(mx[j >> 1], s[nb][j]);
        }
      float corr[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        mx[i] = quad_max(mx[i]);
        corr[i] = exp2f(m[i] - mx[i]);  // 0 before the first tile
        m[i] = mx[i];
        l[i] *= corr[i];
      }
#pragma unroll
      for (int nb = 0; nb < KT / 8; ++nb)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          s[nb][j] = exp2f(s[nb][j] - m[j >> 1]);
          l[j >> 1] += s[nb][j];
        }
#pragma unroll
      for (int nd = 0; nd < HDP / 8; ++nd)
#pragma unroll
        for (int j = 0; j < 4; ++j) o[nd][j] *= corr[j >> 1];
#pragma unroll
      for (int kk = 0; kk < KT / 16; ++kk) {
        uint32_t pa[NP][4];
        a_from_acc<NP>(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int n2 = 0; n2 < HDP / 16; ++n2) {
          if (n2 * 16 >= G.hd) break;
          uint32_t vb[NP][4];
          load_b_kn_planes<NP, LD>(vb, vt, KS, kk * 16, n2 * 16, lane);
          mma_planes<NP>(o[2 * n2], pa, vb, 0);
          mma_planes<NP>(o[2 * n2 + 1], pa, vb, 1);
        }
      }
    }
    __syncthreads();  // the next iteration stages into the buffer just read
  }
  if (!active) return;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] = quad_sum(l[i]);  // >= 1: the row max contributes exp2(0)
    const int r = warp * 16 + gq + 8 * i;
    if (r >= nrows) continue;
    int64_t li;
    const int64_t base = query_row(G, b, a, g, row0 + r, &li) * G.hd;
    const float inv = 1.0f / l[i];
#pragma unroll
    for (int nd = 0; nd < HDP / 8; ++nd) {
      const int col = nd * 8 + 2 * tq;
      if (col >= G.hd) break;
      store(p.out, p.bf16, base + col, o[nd][2 * i] * inv);
      store(p.out, p.bf16, base + col + 1, o[nd][2 * i + 1] * inv);
    }
    if (tq == 0) p.lse[li] = m[i] * kLn2 + logf(l[i]);
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
void launch_forward(const ForwardParams& p, unsigned grid, int threads, cudaStream_t s) {
  constexpr int KT = forward_key_tile<HDP>();
  constexpr int smem = forward_smem_bytes<HDP, NP, KT>();
  static_assert(smem <= kMaxSmem, "dflash attention forward: shared memory exceeds the sm_90 limit");
  auto kernel = attention_forward_kernel<HDP, NP, KT>;
  allow_smem(kernel, smem, "dflash_attention_forward");
  kernel<<<grid, threads, smem, s>>>(p);
}

}  // namespace

void dflash_attention_forward(const DflashAttentionForward& a, void* stream) {
  const Geometry G = geometry(a.d);
  cudaStream_t s = as_stream(stream);
  tiles_visited_kernel<<<1, kTileThreads, 0, s>>>(a.anchors, a.keep, G.B * G.N, G.S, a.d.key_tile, a.tiles);
  check_launch("dflash_attention_forward: tiles visited");
  if (G.B * G.N * G.nkv == 0) return;
  const int warps = query_warps(G.rows_per_kv);
  const int chunks = int((G.rows_per_kv + 16 * warps - 1) / (16 * warps));
  const ForwardParams p{a.q, a.k, a.v, a.bf16, a.anchors, a.keep, G, chunks, a.out, a.lse};
  const unsigned grid = unsigned(G.B * G.N * G.nkv * chunks);
  const int threads = 32 * warps;
  const int64_t hdp = G.hd <= 64 ? 64 : (G.hd <= 128 ? 128 : 256);
  if (a.bf16) {
    if (hdp == 64) launch_forward<64, 1>(p, grid, threads, s);
    else if (hdp == 128) launch_forward<128, 1>(p, grid, threads, s);
    else launch_forward<256, 1>(p, grid, threads, s);
  } else {
    if (hdp == 64) launch_forward<64, 2>(p, grid, threads, s);
    else if (hdp == 128) launch_forward<128, 2>(p, grid, threads, s);
    else launch_forward<256, 2>(p, grid, threads, s);
  }
  check_launch("dflash_attention_forward");
}

}  // namespace dflash::kernels::cuda
