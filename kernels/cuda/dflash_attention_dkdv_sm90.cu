// DFlash attention dk/dv on Hopper tensor cores (wgmma, sm_90a only): the kernel in its ws, split
// and fused modes, and launch_dkdv, which sm90::backward
// (dflash_attention_backward_sm90.cu) calls. The design and what the kernels share:
// dflash_attention_sm90.cuh; the fused mode's dq: dflash_attention_fused_dq_sm90.cuh.
#include <type_traits>

#include "kernels/cuda/dflash_attention_fused_dq_sm90.cuh"
#include "kernels/cuda/dflash_attention_sm90.cuh"

namespace dflash::kernels::cuda::sm90 {
namespace {

// ---- Backward: dk, dv ----

// Three modes, chosen by kernels/heuristics.h. Ws: a CTA owns 128 keys, 64 per warpgroup, and
// both consumer warpgroups use each chunk of 64 query rows (Q, dO and the rows' lse, D, anchor and
// keep), staged once by a producer warpgroup (dflash_attention_sm90.cuh, "The warp-specialized
// query side"; no turns here) into a ring 4 deep; a chunk's arrival and release are mbarriers
// (full: its copies landed; empty: every consumer thread is done with it), so either warpgroup may
// run up to a chunk ahead of the other. Split (for grids too small to fill the GPU, where the keys
// seen by every block dominate): a CTA owns 64 keys, shared by both warpgroups, and warpgroup w
// takes chunks w, w+2, ... through its own cp.async pipeline (2 stages, its own barrier); at the end
// the two partial sums are added in a fixed order (warpgroup 0's, then warpgroup 1's) through
// shared memory. Both compute each product in the same order, so they give the same bits but for
// split's final sum. Fused: ws's products for dk and dv, over 64-row-aligned chunks walked last to
// first (other sums, so other bits than ws), and dq besides, summed in a fixed order across CTAs
// (dflash_attention_fused_dq_sm90.cuh); the producer's last warp writes dq, its other three stage.
enum class Dkdv { split, ws, fused };
template <Dkdv MODE>
struct DkdvMode {
  static constexpr bool kSplit = MODE == Dkdv::split, kFused = MODE == Dkdv::fused;
  static constexpr bool kWs = MODE == Dkdv::ws || kFused;  // a producer warpgroup stages the chunks
  static constexpr int kCtaThreads = kWs ? kWsThreads : kThreads;
  static constexpr int kKeys = kSplit ? kRows : kCtaRows;  // keys per CTA
  static constexpr int kKeyTiles = kKeys / kRows;
  static constexpr int kPipes = kSplit ? 2 : 1;  // chunk pipelines
  static constexpr int kPipeThreads = kThreads / kPipes;
  static constexpr int kDepth = kSplit ? 2 : kFused ? 3 : 4;  // stages per pipeline
  static constexpr int kAhead = kDepth - 1;  // chunks staged ahead of the one computed
};

// ws: the producer threads that stage the chunks (fused: all but the dq writer warp).
template <Dkdv MODE>
constexpr int kStagers = MODE == Dkdv::fused ? kProducerThreads - 32 : kProducerThreads;

// K, V [key tiles], then per pipeline kDepth pairs of Q and dO chunks, of [64][HDP]; then per
// pipeline and stage the chunk rows' lse, D, anchor and keep (4 x 64 words); fused: then dS^T and
// the two dq partials.
template <int HDP, Dkdv MODE>
constexpr int dkdv_smem_bytes() {
  using M = DkdvMode<MODE>;
  return 1024 + int(tile_bytes(kRows, HDP)) * (2 * M::kKeyTiles + 2 * M::kPipes * M::kDepth) +
         M::kPipes * M::kDepth * 4 * kRows * 4 + (M::kFused ? int(kDsTileBytes + kDqChunkBytes) : 0);
}

// Grid: B * nkv * nctx context CTAs (key range 0 first: nearly every block sees it), then
// B * nkv * ndraft draft CTAs, of kKeys keys each (fused: the draft CTAs first). The CTA walks the rows [first * rpk,
// (last + 1) * rpk) of the first and last kept blocks that see any of its keys (context key k:
// anchor > k; draft key: its own block), in chunks of 64 rows. Per chunk and warpgroup: S^T =
// K Q^T and dP^T = V dO^T (wgmma, K and V as shared A operands), P^T = exp2(S^T * scale * log2e -
// lse * log2e) where the row sees the key, else 0; dS^T = P^T (dP^T - D); dV += P^T dO and dK +=
// dS^T Q (P^T, dS^T as register fragments, dO and Q read MN-major). A chunk none of whose rows
// sees the warpgroup's keys is skipped, one that sees them all is not masked. At the end dv += dV
// and dk += scale * dK, each element by one thread.
template <int HDP, Dkdv MODE>
__global__ void __launch_bounds__(DkdvMode<MODE>::kCtaThreads, 1)
    dkdv_kernel(const Params p, const __grid_constant__ DkdvMaps maps) {
  using M = DkdvMode<MODE>;
  constexpr bool SPLIT = M::kSplit, WS = M::kWs, FUSED = M::kFused;
  static_assert(M::kAhead >= 1 && M::kAhead < M::kDepth, "chunks are staged ahead within the pipeline's stages");
  static_assert(!FUSED || HDP == 128, "the fused dq splits a head dim of 128 between the warpgroups");
  constexpr int NO = HDP / 2, KS = HDP / 16;
  constexpr uint32_t TB = tile_bytes(kRows, HDP);
  extern __shared__ unsigned char smem_raw[];
  __shared__ int s_first, s_last;
  // Ring: full[stage], empty[stage]; fused: then dS^T empty, dq full and dq empty.
  __shared__ alignas(8) uint64_t s_bars[2 * M::kDepth + 3];
  __shared__ int s_part;                                      // fused: the chunk handed to the writer has a partial
  const uint32_t raw = smem_u32(smem_raw), sK = (raw + 1023u) & ~1023u, sV = sK + M::kKeyTiles * TB,
                 sPipes = sV + M::kKeyTiles * TB, sMeta = sPipes + M::kPipes * M::kDepth * 2 * TB,
                 sDS = sMeta + M::kPipes * M::kDepth * 4 * kRows * 4, sDQ = sDS + kDsTileBytes;  // fused
  static_assert(!FUSED || (M::kDepth * 4 * kRows * 4) % 1024 == 0, "the dS^T tile starts 1024-byte aligned");
  const Geometry& G = p.G;
  const int tid = int(threadIdx.x), wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int gq = lane >> 2, tq = lane & 3, hd = int(G.hd), S = int(G.S), bs = int(G.bs), N = int(G.N);
  // This thread's pipeline and its index there; the pipeline's Q and dO chunk tiles (stage i at
  // + 2i TB and + (2i + 1) TB) and its meta words (stage i, field f, row r: 4 (4 (i) + f) 64 + 4r).
  const int pipe = SPLIT ? wg : 0, ptid = SPLIT ? tid & 127 : tid;
  const uint32_t sChunks = sPipes + uint32_t(pipe * M::kDepth * 2) * TB;
  const uint32_t sPipeMeta = sMeta + uint32_t(pipe * M::kDepth * 4 * kRows * 4);
  const unsigned char* meta = smem_raw + (sPipeMeta - raw);  // the same bytes through a generic pointer

  const int per = int(G.B * G.nkv);
  int bid = int(blockIdx.x);  // the grid is < 2^31 CTAs
  // Context CTAs first, but fused: draft CTAs first (their dq contributions come first).
  const bool ctx = FUSED ? bid >= per * p.ndraft : bid < per * p.nctx;
  if (FUSED && ctx) bid -= per * p.ndraft;
  if (!FUSED && !ctx) bid -= per * p.nctx;
  const int range = bid / per, b = (bid % per) / int(G.nkv), g = (bid % per) % int(G.nkv);
  const int key0 = ctx ? range * M::kKeys : S + range * M::kKeys, kend = ctx ? S : S + int(G.T);
  const int32_t *anchors = p.anchors + int64_t(b) * N, *keep = p.keep + int64_t(b) * N;

  // The first and last kept blocks that see a key of [key0, key0 + kKeys): integer min and max,
  // so the answer does not depend on the order of the atomics.
  const uint32_t full0 = smem_u32(s_bars), empty0 = full0 + 8u * M::kDepth, ds_empty = empty0 + 8u * M::kDepth,
                 dq_full = ds_empty + 8u, dq_empty = dq_full + 8u;
  if (tid == 0) {
    s_first = N, s_last = -1;
    if constexpr (WS)
      for (int i = 0; i < M::kDepth; ++i)
        mbar_init(full0 + 8u * i, p.dkdv_tma ? 32 : kStagers<MODE>),
            mbar_init(empty0 + 8u * i, kThreads);
    if constexpr (FUSED) mbar_init(ds_empty, kThreads), mbar_init(dq_full, kThreads), mbar_init(dq_empty, 32);
  }
  __syncthreads();
  if (ctx) {
    for (int a = tid; a < N; a += M::kCtaThreads)
      if (keep[a] != 0 && clamp_anchor(anchors[a], S) > key0) atomicMin(&s_first, a), atomicMax(&s_last, a);
  } else {
    const int a_lo = (key0 - S) / bs, a_hi = min(N - 1, (key0 - S + M::kKeys - 1) / bs);
    for (int a = a_lo + tid; a <= a_hi; a += M::kCtaThreads)
      if (keep[a] != 0) atomicMin(&s_first, a), atomicMax(&s_last, a);
  }
  __syncthreads();
  const int first = s_first, last = s_last;
  // No row sees these keys: their gradients get nothing, so the CTA stops, unless one is fresh:
  // then it walks no chunks and writes its zero sums as usual.
  const bool unseen = first > last;
  if (unseen && !((p.dv != nullptr && p.dv_fresh) || (p.dk != nullptr && p.dk_fresh))) return;
  // Fused: chunks aligned to 64 rows (every CTA's chunk C is rows 64C ..), walked last to first.
  const int Rb = unseen ? 0 : FUSED ? (first * p.rpk) & ~(kRows - 1) : first * p.rpk;
  const int Re = unseen ? 0 : (last + 1) * p.rpk;
  const int nch = (Re - Rb + kRows - 1) / kRows;
  // This pipeline's chunks: i = 0 .. nloc-1 is chunk ch(i).
  const int nloc = SPLIT ? (nch - pipe + 1) / 2 : nch;
  auto chunk_of = [&](int i) { return SPLIT ? 2 * i + pipe : FUSED ? nch - 1 - i : i; };

  if constexpr (WS) {
    if (tid >= kThreads) {  // the producer warpgroup: stage_chunk's copies, lean enough for 32 registers
      DkdvWsRegisters::producer();
      const int ptid = tid - kThreads;
      if constexpr (FUSED) {
        if (ptid >= kStagers<MODE>) {  // the last warp writes dq
          const int64_t bg = int64_t(b) * G.nkv + g;
          write_dq(nloc, chunk_of, Rb / kRows, (ctx ? range + 1 : 0) + p.dq_turn_skew, sDQ, &s_part, dq_full,
                   dq_empty, p.dq_acc + bg * p.nchunk * (2 * kDqHalfFloats), p.dq_sem + bg * p.nchunk, lane,
                   p.dq_wait_ns);
          return;
        }
      }
      if (p.dkdv_tma) {  // one warp stages every chunk by TMA: chunk ch is block Rb / 64 + ch's rows
        if (ptid >= 32) return;
        for (int i = 0; i < nloc; ++i) {
          const int stg = i % M::kDepth, a = Rb / kRows + chunk_of(i);
          if (i >= M::kDepth) mbar_wait(empty0 + 8u * uint32_t(stg), uint32_t(i / M::kDepth - 1) & 1u);
          const uint32_t full = full0 + 8u * uint32_t(stg), qt = sChunks + uint32_t(2 * stg) * TB, ot = qt + TB;
          // The block's anchor and keep, the same for every row (generic stores, released by the arrival).
          const int anc = anchors[a], kp = keep[a];
          int* mrow = reinterpret_cast<int*>(smem_raw + (sPipeMeta - raw)) + (stg * 4 + 2) * kRows;
          mrow[lane] = anc, mrow[lane + 32] = anc, mrow[kRows + lane] = kp, mrow[kRows + lane + 32] = kp;
          if (lane == 0) {
            mbar_arrive_expect_tx(full, 2 * TB + 2 * kRows * 4);
            const int head = g * int(G.group);
            tma_load_chunk<HDP, kRows>(maps, qt, ot, sPipeMeta + uint32_t(stg * 4) * kRows * 4u,
                                       sPipeMeta + uint32_t(stg * 4 + 1) * kRows * 4u, b * int(G.T) + a * bs, head,
                                       b * int(G.nh) + head, a * bs, full);
          } else {
            mbar_arrive(full);
          }
        }
        return;
      }
      constexpr int kPieces = HDP / 8, kStep = kStagers<MODE> / kPieces;
      static_assert(kStagers<MODE> % kPieces == 0, "every staging thread keeps one piece");
      const int r0 = ptid / kPieces, piece = ptid % kPieces;
      const bool piece_ok = piece * 8 < hd;
      for (int i = 0; i < nloc; ++i) {
        const int stg = i % M::kDepth, R0 = Rb + chunk_of(i) * kRows;
        if (i >= M::kDepth) mbar_wait(empty0 + 8u * uint32_t(stg), uint32_t(i / M::kDepth - 1) & 1u);
        const uint32_t qt = sChunks + uint32_t(2 * stg) * TB, ot = qt + TB;
#pragma unroll 1
        for (int r = r0; r < kRows; r += kStep) {
          int64_t li;
          const bool ok = piece_ok && R0 + r < Re;
          const int64_t at = ok ? query_offset(p, b, g, R0 + r, &li) + piece * 8 : 0;
          const uint32_t d = piece_offset(kRows, r, piece);
          cp16(qt + d, p.q + at, ok);
          cp16(ot + d, p.dout + at, ok);
        }
        // Row mr's field mf (lse or D) and field 2 + mf (anchor or keep), for x = mf * 64 + mr.
#pragma unroll 1
        for (int x = ptid; x < 2 * kRows; x += kStagers<MODE>) {
          const int mr = x & (kRows - 1), mf = x >> 6, R = R0 + mr;
          const void *lse_or_d = keep, *anchor_or_keep = keep;
          if (R < Re) {
            const int a = block_of(p, R);
            int64_t li;
            query_offset(p, b, g, R, &li);
            lse_or_d = mf == 0 ? static_cast<const void*>(p.lse_in + li) : p.delta + li;
            anchor_or_keep = mf == 0 ? anchors + a : keep + a;
          }
          cp4(sPipeMeta + uint32_t((stg * 4 + mf) * kRows + mr) * 4u, lse_or_d, R < Re);
          cp4(sPipeMeta + uint32_t((stg * 4 + 2 + mf) * kRows + mr) * 4u, anchor_or_keep, R < Re);
        }
        mbar_arrive_on_copies(full0 + 8u * uint32_t(stg));
      }
      cp_commit();
      cp_wait<0>();  // no copy outlives its warp
      return;
    }
    DkdvWsRegisters::consumer();
  }

  const int64_t kv_base = (int64_t(b) * G.keys * G.nkv + g) * G.hd;
  const int kv_stride = int(G.nkv * G.hd);
#pragma unroll
  for (int h = 0; h < M::kKeyTiles; ++h)
    stage_rows<HDP>(sK + uint32_t(h) * TB, p.k, sV + uint32_t(h) * TB, p.v, tid, hd, [&](int r) -> int64_t {
      const int key = key0 + h * kRows + r;
      return key < kend ? kv_base + int64_t(key) * kv_stride : -1;
    });
  auto stage_chunk = [&](int i) {  // chunk ch(i) into stage i % kDepth, by the pipeline's threads
    if (i >= nloc) return;
    const int stg = i % M::kDepth, R0 = Rb + chunk_of(i) * kRows;
    stage_rows<HDP, M::kPipeThreads>(sChunks + uint32_t(2 * stg) * TB, p.q, sChunks + uint32_t(2 * stg + 1) * TB,
                                     p.dout, ptid, hd, [&](int r) -> int64_t {
                                       int64_t li;
                                       return R0 + r < Re ? query_offset(p, b, g, R0 + r, &li) : -1;
                                     });
    // Row r's lse, D, anchor and keep: 4 * 64 words, kThreads / M::kPipeThreads per thread.
#pragma unroll
    for (int x = ptid; x < 4 * kRows; x += M::kPipeThreads) {
      const int r = x & (kRows - 1), field = x >> 6, R = R0 + r;
      const void* src = keep;
      if (R < Re) {
        const int a = block_of(p, R);
        int64_t li;
        query_offset(p, b, g, R, &li);
        const void* lse_or_d = field == 0 ? static_cast<const void*>(p.lse_in + li) : p.delta + li;
        const void* anchor_or_keep = field == 2 ? anchors + a : keep + a;
        src = field < 2 ? lse_or_d : anchor_or_keep;
      }
      cp4(sPipeMeta + uint32_t((stg * 4 + field) * kRows + r) * 4u, src, R < Re);
    }
  };
  if constexpr (WS) {
    cp_commit();
    cp_wait<0>();  // K and V
    fence_async_shared();
    consumers_sync();
  } else {  // split: each warpgroup's pipeline
    stage_chunk(0);
    cp_commit();  // with K and V
#pragma unroll
    for (int i = 1; i < M::kAhead; ++i) {
      stage_chunk(i);
      cp_commit();
    }
    cp_wait<M::kAhead - 1>();  // K, V and chunk 0 of every pipeline
  }
  if constexpr (!WS) {
    fence_async_shared();
    __syncthreads();
  }

  const float sc = G.scale * kLog2e;
  const int wk0 = key0 + (SPLIT ? 0 : wg * kRows);                    // the warpgroup's first key
  const int kidx[2] = {wk0 + warp * 16 + gq, wk0 + warp * 16 + gq + 8};  // the thread's two keys
  const uint64_t ktd = kmajor_desc(sK + uint32_t(SPLIT ? 0 : wg) * TB, kRows, 0, 0),
                 vtd = kmajor_desc(sV + uint32_t(SPLIT ? 0 : wg) * TB, kRows, 0, 0);  // K, V as A operands
  float dv[NO] = {}, dk[NO] = {};       // (64 keys, HDP): sum of P^T dO, sum of dS^T Q
  float st[32] = {}, dpt[32] = {};      // (64 keys, 64 rows): S^T then P^T; dP^T then dS^T
  float dqp[FUSED ? 32 : 1] = {};       // fused: (64 rows, the warpgroup's 64 columns) of dS K
  int computed = 0;                     // fused: chunks computed so far (dS^T tile uses)
  for (int i = 0; i < nloc; ++i) {
    const int stg = i % M::kDepth, ch = chunk_of(i);
    if constexpr (WS) {
      mbar_wait(full0 + 8u * stg, uint32_t(i / M::kDepth) & 1u);  // everyone's copies of chunk i landed
      fence_async_shared();
    } else {
      cp_wait<M::kAhead - 1>();  // split: chunk i landed (this thread's copies)
      fence_async_shared();
      wg_barrier(wg);  // the pipeline's copies landed; it is done with chunk i-1
      stage_chunk(i + M::kAhead);
      cp_commit();
    }
    const float* mlse = reinterpret_cast<const float*>(meta) + (stg * 4 + 0) * kRows;
    const float* mD = reinterpret_cast<const float*>(meta) + (stg * 4 + 1) * kRows;
    const int* manc = reinterpret_cast<const int*>(meta) + (stg * 4 + 2) * kRows;
    const int* mkeep = reinterpret_cast<const int*>(meta) + (stg * 4 + 3) * kRows;
    // Chunk row r sees the keys [lo, hi) (empty past the rows or when its block is dropped).
    auto seen_keys = [&](int r, int* lo, int* hi) {
      const int R = Rb + ch * kRows + r;
      const bool kp = R < Re && mkeep[r] != 0;
      if (ctx) {
        *lo = 0;
        *hi = kp ? clamp_anchor(manc[r], S) : 0;
      } else {
        *lo = kp ? S + block_of(p, R) * bs : 0;
        *hi = kp ? *lo + bs : 0;
      }
    };
    int lo0, hi0, lo1, hi1;  // rows lane and lane + 32; every warp of the warpgroup reads all 64
    seen_keys(lane, &lo0, &hi0);
    seen_keys(lane + 32, &lo1, &hi1);
    const int wk1 = wk0 + kRows;
    // Compute the chunk if a row sees one of the warpgroup's keys (fused: of the CTA's keys, which
    // both warpgroups then compute, as dq's product needs both halves of dS^T).
    const int ak0 = FUSED ? key0 : wk0, ak1 = FUSED ? key0 + kCtaRows : wk1;
    const bool act = __any_sync(kFull, (hi0 > ak0 && lo0 < ak1) || (hi1 > ak0 && lo1 < ak1));
    if (act) {
      const bool full = __all_sync(kFull, lo0 <= wk0 && hi0 >= wk1 && lo1 <= wk0 && hi1 >= wk1);
      const uint32_t qt = sChunks + uint32_t(2 * stg) * TB, ot = sChunks + uint32_t(2 * stg + 1) * TB;
      const uint64_t qtd = kmajor_desc(qt, kRows, 0, 0), otd = kmajor_desc(ot, kRows, 0, 0);  // B of S^T, dP^T
      const uint64_t qtm = mnmajor_desc(qt, kRows, 0, 0), otm = mnmajor_desc(ot, kRows, 0, 0);  // B of dK, dV
      pin(st);
      pin(dpt);
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < KS; ++kk)
        mma_ss<64, 0, 0>(st, desc_advance(ktd, kmajor_step(kRows, kk)), desc_advance(qtd, kmajor_step(kRows, kk)),
                         kk > 0 ? 1 : 0);
#pragma unroll
      for (int kk = 0; kk < KS; ++kk)
        mma_ss<64, 0, 0>(dpt, desc_advance(vtd, kmajor_step(kRows, kk)), desc_advance(otd, kmajor_step(kRows, kk)),
                         kk > 0 ? 1 : 0);
      wg_commit();
      wg_wait<0>();
      pin(st);
      pin(dpt);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 l2 = *reinterpret_cast<const float2*>(mlse + 8 * j + 2 * tq);
        const float2 d2 = *reinterpret_cast<const float2*>(mD + 8 * j + 2 * tq);
        int lo[2] = {0, 0}, hi[2] = {0, 0};
        if (!full) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int src = (8 * j + 2 * tq + e) & 31;  // column 8j + 2tq + e: lane src, row slot j / 4
            lo[e] = __shfl_sync(kFull, j < 4 ? lo0 : lo1, src);
            hi[e] = __shfl_sync(kFull, j < 4 ? hi0 : hi1, src);
          }
        }
#pragma unroll
        for (int i2 = 0; i2 < 2; ++i2)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int x = 4 * j + 2 * i2 + e;
            const float lse2 = (e ? l2.y : l2.x) * kLog2e, d = e ? d2.y : d2.x;
            const float pr = attn::exp2_ftz(fmaf(st[x], sc, -lse2));
            const bool vis = full | ((kidx[i2] >= lo[e]) & (kidx[i2] < hi[e]));
            st[x] = vis ? pr : 0.0f;
            dpt[x] = vis ? pr * (dpt[x] - d) : 0.0f;
          }
      }
      uint32_t pa[4][4], da[4][4];  // P^T and dS^T as A fragments, k-steps of 16 chunk rows
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        a_frag(pa[kk], st, kk);
        a_frag(da[kk], dpt, kk);
      }
      if constexpr (FUSED) {  // dS^T into the shared tile, once both warpgroups are done with the last one
        if (computed > 0) mbar_wait(ds_empty, uint32_t(computed - 1) & 1u);
        store_ds(sDS, da, wg, warp, gq, tq);
        fence_async_shared();
      }
      pin(dv);
      pin(dk);
      pin(pa);
      pin(da);
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) mma_rs<HDP, 1>(dv, pa[kk], desc_advance(otm, mnmajor_step(kk)), 1);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) mma_rs<HDP, 1>(dk, da[kk], desc_advance(qtm, mnmajor_step(kk)), 1);
      wg_commit();
      if constexpr (FUSED) {
        consumers_sync();  // both halves of dS^T are in the tile
        pin(dqp);
        wg_fence();
        issue_dq(dqp, sDS, sK, wg);
        wg_commit();
      }
      wg_wait<0>();  // chunk i's buffers may be refilled after the next barrier (ws: the empty one)
      pin(dv);
      pin(dk);
      if constexpr (FUSED) {
        pin(dqp);
        mbar_arrive(ds_empty);  // this warpgroup is done reading the dS^T tile
        ++computed;
      }
    }
    if constexpr (WS) {
      mbar_arrive(empty0 + 8u * stg);  // done with chunk i (its products waited for)
      if constexpr (FUSED) hand_dq(sDQ, dqp, act, i, wg, tid & 127, &s_part, dq_full, dq_empty);
    }
  }
  if constexpr (SPLIT) {
    // Warpgroup 1 hands its sums to warpgroup 0 through its own (idle) pipeline buffers, element
    // e of thread t at float e * 128 + t; warpgroup 0 adds them to its own in that fixed order.
    float* xchg = reinterpret_cast<float*>(smem_raw + (sPipes + uint32_t(M::kDepth * 2) * TB - raw));
    static_assert(2 * NO * 128 * 4 <= int(2 * M::kDepth * TB), "the exchange fits a pipeline's buffers");
    if (wg == 1) {
#pragma unroll
      for (int e = 0; e < NO; ++e) xchg[e * 128 + ptid] = dv[e], xchg[(NO + e) * 128 + ptid] = dk[e];
    }
    __syncthreads();
    if (wg == 1) return;
#pragma unroll
    for (int e = 0; e < NO; ++e) dv[e] += xchg[e * 128 + ptid], dk[e] += xchg[(NO + e) * 128 + ptid];
  }
#pragma unroll
  for (int i2 = 0; i2 < 2; ++i2) {
    const int key = kidx[i2];
    if (key >= kend) continue;
    const int64_t base = kv_base + int64_t(key) * kv_stride;
#pragma unroll
    for (int j = 0; j < HDP / 8; ++j) {
      const int col = 8 * j + 2 * tq;
      if (col >= hd) break;
      if (p.dv != nullptr)
        put_pair(p.dv, p.dv_bf16, p.dv_fresh, base + col, dv[4 * j + 2 * i2], dv[4 * j + 2 * i2 + 1]);
      if (p.dk != nullptr)
        put_pair(p.dk, p.dk_bf16, p.dk_fresh, base + col, G.scale * dk[4 * j + 2 * i2],
                 G.scale * dk[4 * j + 2 * i2 + 1]);
    }
  }
}

}  // namespace

void launch_dkdv(Params p, cudaStream_t s, const heuristics::AttentionBackward& c, bool fused) {
  const Geometry& G = p.G;
  const bool split = c.dkdv == heuristics::Dkdv::split;
  DkdvMaps maps{};  // unused by the split mode and where the chunks come by cp.async
  p.dkdv_tma = c.tma_chunks && dkdv_tma_maps(p, &maps);
  const int keys = split ? DkdvMode<Dkdv::split>::kKeys : DkdvMode<Dkdv::ws>::kKeys;
  p.nctx = int((G.S + keys - 1) / keys);
  p.ndraft = int((G.T + keys - 1) / keys);
  const unsigned grid = unsigned(G.B * G.nkv * (p.nctx + p.ndraft));
  const char* what = "dflash_attention_backward (sm90): dk/dv";
  auto run = [&](auto mode) {
    constexpr Dkdv M = decltype(mode)::value;
    const int threads = DkdvMode<M>::kCtaThreads, regs = DkdvMode<M>::kWs ? DkdvWsRegisters::kTotal : 0;
    if constexpr (M == Dkdv::fused)
      launch(dkdv_kernel<128, M>, grid, dkdv_smem_bytes<128, M>(), s, p, what, threads, regs, maps);
    else if (G.hd <= 64) launch(dkdv_kernel<64, M>, grid, dkdv_smem_bytes<64, M>(), s, p, what, threads, regs, maps);
    else launch(dkdv_kernel<128, M>, grid, dkdv_smem_bytes<128, M>(), s, p, what, threads, regs, maps);
  };
  if (fused) run(std::integral_constant<Dkdv, Dkdv::fused>{});
  else if (split) run(std::integral_constant<Dkdv, Dkdv::split>{});
  else run(std::integral_constant<Dkdv, Dkdv::ws>{});
}

}  // namespace dflash::kernels::cuda::sm90
