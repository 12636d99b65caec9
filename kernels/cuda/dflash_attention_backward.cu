// DFlash block-sparse attention backward on the GPU (semantics as kernels/cpu/attention.cpp),
// deterministic without atomics: D = dO . O per query row; dq by one CTA per query block (like
// the forward); dk and dv by one CTA per key tile, which visits the query blocks that see it in
// ascending order. P is recomputed per tile from the saved lse. Gradients accumulate (+=). Kernel
// version 1, the portable one; version 2 (dflash_attention_*_sm90.cu) runs instead where
// kernels/heuristics.h chooses it.
#include <cmath>

#include "kernels/cuda/device_traits.h"
#include "kernels/cuda/dflash_attention.cuh"

namespace dflash::kernels::cuda {
using namespace attn;

namespace {

struct BackwardParams {
  const void *q, *k, *v;  // [B, T, nh, hd], [B, S+T, nkv, hd] x 2; one dtype
  bool bf16;
  const int32_t *anchors, *keep;  // [B, N]
  Geometry G;
  int chunks;           // dq CTAs per (b, a, g), as in the forward
  const void* dout;     // [B, T, nh, hd]
  bool dout_bf16;
  const float *lse, *delta;  // [B, nh, T]
  void* dq;                  // [B, T, nh, hd] +=, or null
  bool dq_bf16;
  void* dk;                  // [B, S+T, nkv, hd] +=, or null
  bool dk_bf16;
  void* dv;                  // [B, S+T, nkv, hd] +=, or null
  bool dv_bf16;
};

// delta [B, nh, T]: D = dO . O of each query row. One warp per row of [B*T*nh, hd]: lanes over
// hd in order, then the warp's butterfly.
constexpr int kDeltaThreads = 256;
__global__ void delta_kernel(const void* out, bool out_bf16, const void* dout, bool dout_bf16, float* delta,
                             int64_t rows, int64_t T, int64_t nh, int64_t hd) {
  const int lane = threadIdx.x & 31;
  const int64_t stride = int64_t(gridDim.x) * (kDeltaThreads / 32);
  for (int64_t r = blockIdx.x * int64_t(kDeltaThreads / 32) + threadIdx.x / 32; r < rows; r += stride) {
    float acc = 0.0f;
    for (int64_t e = lane; e < hd; e += 32) acc += load(dout, dout_bf16, r * hd + e) * load(out, out_bf16, r * hd + e);
    acc = warp_sum(acc);
    const int64_t h = r % nh, t = (r / nh) % T, b = r / (nh * T);
    if (lane == 0) delta[(b * nh + h) * T + t] = acc;
  }
}

template <int HDP, int NP, int KT>
constexpr int dq_smem_bytes() {
  return int(sizeof(bf16_t)) * row_stride<HDP>() * (2 * NP * kCtaRows + 2 * 2 * NP * KT);
}

// dq: one CTA per (b, a, kv head g, chunk of query rows), 16 rows per warp, heaviest first; the
// virtual key sequence of block a as in the forward, in tiles of KT, K and V double buffered
// (tile t+1 loads during tile t). Per tile: P = exp(scale Q K^T - lse), dS = P (dO V^T - D),
// dq_acc += dS K; at the end dq += scale dq_acc, each element by one thread. Inner loops have
// compile-time trip counts (columns past hd are zero in shared memory). Dropped blocks add nothing.
template <int HDP, int NP, int KT>
__global__ void __launch_bounds__(kMaxThreads) attention_dq_kernel(BackwardParams p) {
  constexpr int LD = row_stride<HDP>(), QS = kCtaRows * LD, KS = KT * LD;  // plane strides
  // f32 at hd 256 keeps a run-time hd test per head-dim step (straight-line code would spill).
  constexpr bool kHdSteps = NP == 2 && HDP == 256;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16_t* sQ = reinterpret_cast<bf16_t*>(smem_raw);  // [NP][64][LD]
  bf16_t* sO = sQ + NP * QS;                          // [NP][64][LD] dO
  bf16_t* sK = sO + NP * QS;                          // [2][NP][KT][LD]
  bf16_t* sV = sK + 2 * NP * KS;                      // [2][NP][KT][LD]
  const Geometry& G = p.G;
  unsigned bid = blockIdx.x;  // the grid is < 2^31 CTAs
  const int chunk = int(bid % unsigned(p.chunks));
  bid /= unsigned(p.chunks);
  const int g = int(bid % unsigned(G.nkv));
  bid /= unsigned(G.nkv);
  const int a = int(G.N) - 1 - int(bid % unsigned(G.N)), b = int(bid / unsigned(G.N));  // heaviest first
  if (p.keep[b * G.N + a] == 0) return;
  const int cta_rows = int(blockDim.x / 32) * 16;
  const int row0 = chunk * cta_rows;
  const int nrows = int(G.rows_per_kv) - row0 < cta_rows ? int(G.rows_per_kv) - row0 : cta_rows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
  // Keys, positions and strides are < 2^31.
  const int anchor = int(clamp_anchor(p.anchors[b * G.N + a], G.S)), L = anchor + int(G.bs);
  const int ntiles = (L + KT - 1) / KT;
  const int64_t kv_base = (b * G.keys * G.nkv + g) * G.hd;
  const int draft0 = int(G.S) + a * int(G.bs), kv_stride = int(G.nkv * G.hd);

  auto q_offset = [&](int r) -> int64_t {
    int64_t li;
    return r < nrows ? query_row(G, b, a, g, row0 + r, &li) * G.hd : -1;
  };
  auto stage_kv = [&](int t) {
    bf16_t *dk = sK + (t & 1) * NP * KS, *dv = sV + (t & 1) * NP * KS;
    const int v0 = t * KT;
    if (NP == 1 && v0 + KT <= anchor) {  // context keys only: constant row stride
      stage_strided2<HDP>(dk, dv, KT, p.k, p.v, kv_base + int64_t(v0) * kv_stride, kv_stride, G.hd);
      return;
    }
    stage_rows2<HDP, NP>(dk, dv, KS, KT, p.k, p.bf16, p.v, p.bf16, G.hd, [&](int r) -> int64_t {
      const int v = v0 + r;
      if (v >= L) return int64_t(-1);
      return kv_base + int64_t(v < anchor ? v : draft0 + (v - anchor)) * kv_stride;
    });
  };
  stage_rows<HDP, NP>(sQ, QS, cta_rows, p.q, p.bf16, G.hd, q_offset);
  stage_rows<HDP, NP>(sO, QS, cta_rows, p.dout, p.dout_bf16, G.hd, q_offset);
  stage_kv(0);
  cp_async_commit();

  // Per lane: rows gq (index 0) and gq + 8 (index 1) of the warp's 16 rows.
  float lse2[2], D[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp * 16 + gq + 8 * i;
    int64_t li = 0;
    if (r < nrows) query_row(G, b, a, g, row0 + r, &li);
    lse2[i] = r < nrows ? p.lse[li] * kLog2e : 0.0f;
    D[i] = r < nrows ? p.delta[li] : 0.0f;
  }
  float dq[HDP / 8][4] = {};  // (16, HDP): sum of dS K
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
      float s[KT / 8][4] = {}, dp[KT / 8][4] = {};  // (16, KT): scores then P; dO V^T then dS
#pragma unroll
      for (int kk = 0; kk < HDP / 16; ++kk) {
        if (kHdSteps && kk * 16 >= G.hd) break;
        uint32_t qa[NP][4], oa[NP][4];
        load_a_planes<NP, LD>(qa, sQ, QS, warp * 16, kk * 16, lane);
        load_a_planes<NP, LD>(oa, sO, QS, warp * 16, kk * 16, lane);
#pragma unroll
        for (int n2 = 0; n2 < KT / 16; ++n2) {
          uint32_t kb[NP][4], vb[NP][4];
          load_b_nk_planes<NP, LD>(kb, kt, KS, n2 * 16, kk * 16, lane);
          load_b_nk_planes<NP, LD>(vb, vt, KS, n2 * 16, kk * 16, lane);
          mma_planes<NP>(s[2 * n2], qa, kb, 0);
          mma_planes<NP>(s[2 * n2 + 1], qa, kb, 1);
          mma_planes<NP>(dp[2 * n2], oa, vb, 0);
          mma_planes<NP>(dp[2 * n2 + 1], oa, vb, 1);
        }
      }
      const int vis = L - t * KT;  // virtual keys of the tile below vis are visible (>= KT but the last)
#pragma unroll
      for (int nb = 0; nb < KT / 8; ++nb)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float prob = exp2_ftz(fmaf(s[nb][j], c, -lse2[j >> 1]));
          dp[nb][j] = nb * 8 + 2 * tq + (j & 1) < vis ? prob * (dp[nb][j] - D[j >> 1]) : 0.0f;
        }
#pragma unroll
      for (int kk = 0; kk < KT / 16; ++kk) {
        uint32_t da[NP][4];
        a_from_acc<NP>(da, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
        for (int n2 = 0; n2 < HDP / 16; ++n2) {
          if (kHdSteps && n2 * 16 >= G.hd) break;
          uint32_t kb[NP][4];
          load_b_kn_planes<NP, LD>(kb, kt, KS, kk * 16, n2 * 16, lane);
          mma_planes<NP>(dq[2 * n2], da, kb, 0);
          mma_planes<NP>(dq[2 * n2 + 1], da, kb, 1);
        }
      }
    }
    __syncthreads();  // the next iteration stages into the buffer just read
  }
  if (!active) return;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp * 16 + gq + 8 * i;
    if (r >= nrows) continue;
    int64_t li;
    const int64_t base = query_row(G, b, a, g, row0 + r, &li) * G.hd;
#pragma unroll
    for (int nd = 0; nd < HDP / 8; ++nd) {
      const int col = nd * 8 + 2 * tq;
      if (col >= G.hd) break;
      accumulate_at(p.dq, p.dq_bf16, base + col, G.scale * dq[nd][2 * i]);
      accumulate_at(p.dq, p.dq_bf16, base + col + 1, G.scale * dq[nd][2 * i + 1]);
    }
  }
}

constexpr int kKeyTile = kCtaRows;  // keys per dk/dv CTA: 16 per warp
constexpr int kWantDv = 1, kWantDk = 2;

template <int HDP, int NP, int RC>
constexpr int dkdv_smem_bytes() {
  return int(sizeof(bf16_t)) * row_stride<HDP>() * (2 * NP * kKeyTile + 2 * 2 * NP * RC) + 2 * 2 * RC * 4;
}

// dk/dv: one CTA per (b, context key tile of 64 keys, kv head g), tile 0 first (the heaviest:
// it is seen by nearly every block), then one per (b, block a, draft tile, g); warp w owns keys
// 16w..16w+15 of the tile. The CTA visits, in ascending order, the kept blocks that see its keys
// (context: anchor > tile start; draft: its own block only) and each block's group*bs query
// rows (all GQA heads of g) in chunks of RC, double buffered. Key k contributes to a block's
// rows only when k < anchor (context). Per chunk: P^T = exp(scale K Q^T - lse), dV += P^T dO;
// dS^T = P^T (V dO^T - D), dK += dS^T Q. At the end dv += dV and dk += scale dK, each element by
// one thread: a fixed order, no atomics. WANT selects dv, dk or both (hd 256 runs one each, to
// keep the accumulators in registers). Inner loops have compile-time trip counts.
template <int HDP, int NP, int RC, int WANT>
__global__ void __launch_bounds__(kMaxThreads) attention_dkdv_kernel(BackwardParams p) {
  constexpr int LD = row_stride<HDP>(), KS = kKeyTile * LD, RS = RC * LD;  // plane strides
  constexpr bool kHdSteps = NP == 2 && HDP >= 128;  // f32: run-time hd steps, else spills
  // The K Q^T / V dO^T loop over hd indexes only shared memory: unrolled by 2, which keeps ptxas
  // from hoisting fragment loads of many steps at once (that spilled the dk and dv accumulators).
  constexpr int kUnrollKK = 2;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16_t* sK = reinterpret_cast<bf16_t*>(smem_raw);  // [NP][64][LD]
  bf16_t* sV = sK + NP * KS;                          // [NP][64][LD]
  bf16_t* sQ = sV + NP * KS;                          // [2][NP][RC][LD]
  bf16_t* sO = sQ + 2 * NP * RS;                      // [2][NP][RC][LD] dO
  float* sL = reinterpret_cast<float*>(sO + 2 * NP * RS);  // [2][RC] lse in log2 units
  float* sD = sL + 2 * RC;                                 // [2][RC] D
  __shared__ int s_first[kMaxWarps];                       // first_seeing's per-warp answers
  const Geometry& G = p.G;
  const int N = int(G.N);
  const int ctx_tiles = int((G.S + kKeyTile - 1) / kKeyTile), ctx_ctas = int(G.B) * ctx_tiles * int(G.nkv);
  int bid = int(blockIdx.x), b, g, own = -1;  // the grid is < 2^31 CTAs
  int key0, nkeys;  // keys and positions are < 2^31
  if (bid < ctx_ctas) {  // heaviest first: tile 0 is seen by nearly every block
    g = bid % int(G.nkv);
    bid /= int(G.nkv);
    b = bid % int(G.B);
    key0 = (bid / int(G.B)) * kKeyTile;
    nkeys = int(G.S) - key0 < kKeyTile ? int(G.S) - key0 : kKeyTile;
  } else {
    bid -= ctx_ctas;
    const int draft_tiles = int((G.bs + kKeyTile - 1) / kKeyTile), dt = bid % draft_tiles;
    bid /= draft_tiles;
    g = bid % int(G.nkv);
    bid /= int(G.nkv);
    own = bid % N;
    b = bid / N;
    key0 = int(G.S) + own * int(G.bs) + dt * kKeyTile;
    nkeys = int(G.bs - dt * kKeyTile < kKeyTile ? G.bs - dt * kKeyTile : kKeyTile);
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
  const int32_t *anchors = p.anchors + int64_t(b) * N, *keep = p.keep + int64_t(b) * N;
  auto sees = [&](int a) {
    if (keep[a] == 0) return false;
    return own >= 0 ? a == own : int(clamp_anchor(anchors[a], G.S)) > key0;
  };
  // The first block >= from that sees the tile, or N: the whole CTA tests blockDim.x blocks at a
  // time. Every thread must call it (it synchronises); the answer is the same in every thread.
  auto first_seeing = [&](int from) -> int {
    const int nwarps = int(blockDim.x) >> 5;
    for (int base = from; base < N; base += int(blockDim.x)) {
      const int cand = base + int(threadIdx.x);
      const unsigned ballot = __ballot_sync(0xffffffffu, cand < N && sees(cand));
      if (lane == 0) s_first[warp] = ballot != 0 ? base + warp * 32 + __ffs(int(ballot)) - 1 : N;
      __syncthreads();
      int best = N;
      for (int w = 0; w < nwarps; ++w) best = s_first[w] < best ? s_first[w] : best;
      __syncthreads();  // s_first is rewritten by the next round or call
      if (best < N) return best;
    }
    return N;
  };
  // The first block after a that sees the tile, or N. Sorted anchors: the next block (one probe).
  auto next_block = [&](int a) -> int {
    if (own >= 0) return a < own && sees(own) ? own : N;
    if (a + 1 < N && sees(a + 1)) return a + 1;
    return first_seeing(a + 2);
  };
  int a = own >= 0 ? next_block(-1) : first_seeing(0);
  if (a >= N) return;  // no block sees these keys: their gradients get nothing
  const int chunks = int((G.rows_per_kv + RC - 1) / RC), rows_per_kv = int(G.rows_per_kv);

  const int64_t kv_base = (b * G.keys * G.nkv + g) * G.hd;
  const int kv_stride = int(G.nkv * G.hd);
  stage_rows2<HDP, NP>(sK, sV, KS, kKeyTile, p.k, p.bf16, p.v, p.bf16, G.hd, [&](int r) -> int64_t {
    return r < nkeys ? kv_base + int64_t(key0 + r) * kv_stride : int64_t(-1);
  });
  // Query row rr of block blk for kv head g: q row (b*T + blk*bs)*nh + g*group + slot*nh + hq
  // with hq = rr / bs, slot = rr % bs; its lse row (b*nh + g*group + hq)*T + blk*bs + slot.
  const int nh = int(G.nh), bs = int(G.bs);
  auto split_row = [&](int rr, int* hq, int* slot) {
    *hq = int((uint64_t(rr) * G.bs_magic) >> 32);  // rr < 2^26
    *slot = rr - *hq * bs;
  };
  auto stage_chunk = [&](int blk, int ch, int buf) {
    const int64_t qbase = (int64_t(b) * G.T + int64_t(blk) * bs) * nh + int64_t(g) * G.group;
    stage_rows2<HDP, NP>(sQ + buf * NP * RS, sO + buf * NP * RS, RS, RC, p.q, p.bf16, p.dout, p.dout_bf16, G.hd,
                         [&](int r) -> int64_t {
                           const int rr = ch * RC + r;
                           if (rr >= rows_per_kv) return int64_t(-1);
                           int hq, slot;
                           split_row(rr, &hq, &slot);
                           return (qbase + slot * nh + hq) * G.hd;
                         });
    const int64_t lbase = (int64_t(b) * nh + int64_t(g) * G.group) * G.T + int64_t(blk) * bs;
    for (int r = threadIdx.x; r < RC; r += blockDim.x) {
      const int rr = ch * RC + r;
      int hq = 0, slot = 0;
      if (rr < rows_per_kv) split_row(rr, &hq, &slot);
      const int64_t li = lbase + int64_t(hq) * G.T + slot;
      sL[buf * RC + r] = rr < rows_per_kv ? p.lse[li] * kLog2e : 0.0f;
      sD[buf * RC + r] = rr < rows_per_kv ? p.delta[li] : 0.0f;
    }
  };
  stage_chunk(a, 0, 0);
  cp_async_commit();

  const bool active = warp * 16 < nkeys;
  const float c = G.scale * kLog2e;
  // Per lane: keys gq (index 0) and gq + 8 (index 1) of the warp's 16 keys.
  float dv[HDP / 8][4] = {}, dk[HDP / 8][4] = {};  // (16, HDP): sum of P^T dO, sum of dS^T Q
  int ch = 0, buf = 0;
  while (a < N) {
    int next_a = a, next_ch = ch + 1;
    if (next_ch == chunks) next_a = next_block(a), next_ch = 0;
    if (next_a < N) stage_chunk(next_a, next_ch, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (active) {
      // Keys of the tile below `limit` are visible to block a; chunk columns below `cols` are rows.
      const int vis = own >= 0 ? nkeys : int(clamp_anchor(anchors[a], G.S)) - key0;
      const int limit = vis < nkeys ? vis : nkeys;
      const int cols = rows_per_kv - ch * RC < RC ? rows_per_kv - ch * RC : RC;
      const bool partial = limit < kKeyTile || cols < RC;  // CTA-uniform
      const bf16_t* qt = sQ + buf * NP * RS;
      const bf16_t* ot = sO + buf * NP * RS;
      const float* lt = sL + buf * RC;
      const float* dt = sD + buf * RC;
      float s[RC / 8][4] = {}, dp[RC / 8][4] = {};  // (16 keys, RC rows): S^T then P^T; V dO^T then dS^T
#pragma unroll(kUnrollKK)
      for (int kk = 0; kk < HDP / 16; ++kk) {
        if (kHdSteps && kk * 16 >= G.hd) break;
        uint32_t ka[NP][4], va[NP][4];
        load_a_planes<NP, LD>(ka, sK, KS, warp * 16, kk * 16, lane);
        if constexpr ((WANT & kWantDk) != 0) load_a_planes<NP, LD>(va, sV, KS, warp * 16, kk * 16, lane);
#pragma unroll
        for (int n2 = 0; n2 < RC / 16; ++n2) {
          uint32_t qb[NP][4];
          load_b_nk_planes<NP, LD>(qb, qt, RS, n2 * 16, kk * 16, lane);
          mma_planes<NP>(s[2 * n2], ka, qb, 0);
          mma_planes<NP>(s[2 * n2 + 1], ka, qb, 1);
          if constexpr ((WANT & kWantDk) != 0) {
            uint32_t ob[NP][4];
            load_b_nk_planes<NP, LD>(ob, ot, RS, n2 * 16, kk * 16, lane);
            mma_planes<NP>(dp[2 * n2], va, ob, 0);
            mma_planes<NP>(dp[2 * n2 + 1], va, ob, 1);
          }
        }
      }
#pragma unroll
      for (int nb = 0; nb < RC / 8; ++nb)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int key = warp * 16 + gq + 8 * (j >> 1), col = nb * 8 + 2 * tq + (j & 1);
          float prob = exp2_ftz(fmaf(s[nb][j], c, -lt[col]));
          if (partial && !(key < limit && col < cols)) prob = 0.0f;
          s[nb][j] = prob;
          if constexpr ((WANT & kWantDk) != 0) dp[nb][j] = prob * (dp[nb][j] - dt[col]);
        }
#pragma unroll
      for (int kk = 0; kk < RC / 16; ++kk) {
        uint32_t pa[NP][4], da[NP][4];
        if constexpr ((WANT & kWantDv) != 0) a_from_acc<NP>(pa, s[2 * kk], s[2 * kk + 1]);
        if constexpr ((WANT & kWantDk) != 0) a_from_acc<NP>(da, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
        for (int n2 = 0; n2 < HDP / 16; ++n2) {
          if (kHdSteps && n2 * 16 >= G.hd) break;
          if constexpr ((WANT & kWantDv) != 0) {
            uint32_t ob[NP][4];
            load_b_kn_planes<NP, LD>(ob, ot, RS, kk * 16, n2 * 16, lane);
            mma_planes<NP>(dv[2 * n2], pa, ob, 0);
            mma_planes<NP>(dv[2 * n2 + 1], pa, ob, 1);
          }
          if constexpr ((WANT & kWantDk) != 0) {
            uint32_t qb[NP][4];
            load_b_kn_planes<NP, LD>(qb, qt, RS, kk * 16, n2 * 16, lane);
            mma_planes<NP>(dk[2 * n2], da, qb, 0);
            mma_planes<NP>(dk[2 * n2 + 1], da, qb, 1);
          }
        }
      }
    }
    __syncthreads();  // the next iteration stages into the buffer just read
    a = next_a;
    ch = next_ch;
    buf ^= 1;
  }
  if (!active) return;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int key = warp * 16 + gq + 8 * i;
    if (key >= nkeys) continue;
    const int64_t base = kv_base + int64_t(key0 + key) * kv_stride;
#pragma unroll
    for (int nd = 0; nd < HDP / 8; ++nd) {
      const int col = nd * 8 + 2 * tq;
      if (col >= G.hd) break;
      if ((WANT & kWantDv) != 0 && p.dv) {
        accumulate_at(p.dv, p.dv_bf16, base + col, dv[nd][2 * i]);
        accumulate_at(p.dv, p.dv_bf16, base + col + 1, dv[nd][2 * i + 1]);
      }
      if ((WANT & kWantDk) != 0 && p.dk) {
        accumulate_at(p.dk, p.dk_bf16, base + col, G.scale * dk[nd][2 * i]);
        accumulate_at(p.dk, p.dk_bf16, base + col + 1, G.scale * dk[nd][2 * i + 1]);
      }
    }
  }
}

template <int HDP, int NP, int KT>
void launch_dq_tiles(const BackwardParams& p, unsigned grid, int threads, cudaStream_t s) {
  constexpr int smem = dq_smem_bytes<HDP, NP, KT>();
  static_assert(smem <= kMaxSmem, "dflash attention dq: shared memory exceeds the sm_90 limit");
  static_assert(size_t(smem) == heuristics::portable_dq_smem(HDP, NP == 1, KT), "the rules' dq bytes are these");
  auto kernel = attention_dq_kernel<HDP, NP, KT>;
  allow_smem(kernel, smem, "dflash_attention_backward: dq");
  kernel<<<grid, threads, smem, s>>>(p);
  check_launch("dflash_attention_backward: dq");
}

// The key tile kernels/heuristics.h's portable_dq_keys chose for this device: the widest, or half.
template <int HDP, int NP>
void launch_dq(const BackwardParams& p, unsigned grid, int threads, int keys, cudaStream_t s) {
  constexpr int KT = dq_key_tile<HDP, NP>();
  if (keys == KT) return launch_dq_tiles<HDP, NP, KT>(p, grid, threads, s);
  if constexpr (KT >= 32)
    if (keys == KT / 2) return launch_dq_tiles<HDP, NP, KT / 2>(p, grid, threads, s);
  constexpr int narrowest = dq_smem_bytes<HDP, NP, KT >= 32 ? KT / 2 : KT>();
  throw std::runtime_error("dflash_attention_backward: dq at head_dim " + std::to_string(p.G.hd) + " in " +
                           (NP == 1 ? "bf16" : "f32") + " needs " + std::to_string(narrowest) +
                           " bytes of shared memory a CTA or more, beyond what this GPU allows (kernels/heuristics.h, "
                           "smem_per_block): run it in bf16, or on a GPU of compute capability 9.0 or 10.x");
}

template <int HDP, int NP, int WANT>
void launch_dkdv_pass(const BackwardParams& p, unsigned grid, cudaStream_t s) {
  constexpr int RC = dkdv_row_chunk<HDP, NP>();
  constexpr int smem = dkdv_smem_bytes<HDP, NP, RC>();
  static_assert(smem <= kMaxSmem, "dflash attention dk/dv: shared memory exceeds the sm_90 limit");
  auto kernel = attention_dkdv_kernel<HDP, NP, RC, WANT>;
  allow_smem(kernel, smem, "dflash_attention_backward: dk/dv");
  kernel<<<grid, kMaxThreads, smem, s>>>(p);
  check_launch("dflash_attention_backward: dk/dv");
}

// Up to hd 128 one pass computes dk and dv together; at hd 256 the two accumulators would not
// fit in registers, so dv and dk take a pass each.
template <int HDP, int NP>
void launch_dkdv(const BackwardParams& p, unsigned grid, cudaStream_t s) {
  if constexpr (HDP <= 128) {
    launch_dkdv_pass<HDP, NP, kWantDv | kWantDk>(p, grid, s);
  } else {
    if (p.dv) launch_dkdv_pass<HDP, NP, kWantDv>(p, grid, s);
    if (p.dk) launch_dkdv_pass<HDP, NP, kWantDk>(p, grid, s);
  }
}

template <int HDP, int NP>
void launch_backward(const BackwardParams& p, unsigned dq_grid, int dq_threads, int dq_keys, unsigned dkdv_grid,
                     cudaStream_t s) {
  if (p.dq) launch_dq<HDP, NP>(p, dq_grid, dq_threads, dq_keys, s);
  if (p.dk || p.dv) launch_dkdv<HDP, NP>(p, dkdv_grid, s);
}

}  // namespace

int64_t dflash_attention_backward_scratch_bytes(const DflashAttentionDims& d, bool bf16, bool wants_dq,
                                                int version) {
  const Geometry G = geometry(d);
  if (!wants_dq || G.B * G.N * G.nkv == 0 || !tries_sm90(version)) return 0;
  return sm90::backward_scratch_bytes(d, bf16);
}

heuristics::AttentionForward dflash_attention_forward_choice(const DflashAttentionDims& d, bool bf16) {
  return heuristics::attention_forward(device_traits(), attention_shape(d), bf16, test_seams().attention);
}
heuristics::AttentionBackward dflash_attention_backward_choice(const DflashAttentionDims& d, bool bf16,
                                                               bool wants_dq) {
  return heuristics::attention_backward(device_traits(), attention_shape(d), bf16, wants_dq, test_seams().attention);
}

void dflash_attention_backward(const DflashAttentionBackward& a, void* stream) {
  const Geometry G = geometry(a.d);
  if ((!a.dq && !a.dk && !a.dv) || G.B * G.N * G.nkv == 0) return;
  if (tries_sm90(a.version) && sm90::backward(a, stream)) return;
  // Version 1 only adds: a fresh gradient is zero-filled first.
  if (a.dq && a.dq_fresh) fill(a.dq, a.dq_bf16, G.B * G.T * G.nh * G.hd, 0.0f, stream);
  if (a.dk && a.dk_fresh) fill(a.dk, a.dk_bf16, G.B * G.keys * G.nkv * G.hd, 0.0f, stream);
  if (a.dv && a.dv_fresh) fill(a.dv, a.dv_bf16, G.B * G.keys * G.nkv * G.hd, 0.0f, stream);
  cudaStream_t s = as_stream(stream);
  const int64_t rows = G.B * G.T * G.nh;
  delta_kernel<<<blocks_for(rows, kDeltaThreads / 32), kDeltaThreads, 0, s>>>(a.out, a.bf16, a.dout, a.dout_bf16,
                                                                               a.delta, rows, G.T, G.nh, G.hd);
  check_launch("dflash_attention_backward: delta");
  const int warps = query_warps(G.rows_per_kv, 16);
  const int chunks = int((G.rows_per_kv + 16 * warps - 1) / (16 * warps));
  const BackwardParams p{a.q,   a.k,       a.v,        a.bf16, a.anchors, a.keep,    G,  chunks,    a.dout,
                         a.dout_bf16, a.lse, a.delta, a.dq,   a.dq_bf16, a.dk, a.dk_bf16, a.dv, a.dv_bf16};
  const unsigned dq_grid = unsigned(G.B * G.N * G.nkv * chunks);
  const unsigned dkdv_grid = unsigned(G.B * G.nkv * ((G.S + kKeyTile - 1) / kKeyTile) +
                                      G.B * G.N * G.nkv * ((G.bs + kKeyTile - 1) / kKeyTile));
  const int dq_keys = heuristics::portable_dq_keys(device_traits(), G.hd, a.bf16);
  const int64_t hdp = G.hd <= 64 ? 64 : (G.hd <= 128 ? 128 : 256);
  if (a.bf16) {
    if (hdp == 64) launch_backward<64, 1>(p, dq_grid, 32 * warps, dq_keys, dkdv_grid, s);
    else if (hdp == 128) launch_backward<128, 1>(p, dq_grid, 32 * warps, dq_keys, dkdv_grid, s);
    else launch_backward<256, 1>(p, dq_grid, 32 * warps, dq_keys, dkdv_grid, s);
  } else {
    if (hdp == 64) launch_backward<64, 2>(p, dq_grid, 32 * warps, dq_keys, dkdv_grid, s);
    else if (hdp == 128) launch_backward<128, 2>(p, dq_grid, 32 * warps, dq_keys, dkdv_grid, s);
    else launch_backward<256, 2>(p, dq_grid, 32 * warps, dq_keys, dkdv_grid, s);
  }
}

}  // namespace dflash::kernels::cuda
