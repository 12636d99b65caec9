// DFlash attention backward on Hopper tensor cores (wgmma, sm_90a only): D = dO . O, the dq kernel,
// the fused backward's last pass and where it runs, and the launcher, sm90::backward, which also
// runs the dk/dv kernels (dflash_attention_dkdv_sm90.cu). The design and what the kernels share:
// dflash_attention_sm90.cuh; the fused backward: dflash_attention_fused_dq_sm90.cuh.
#include "kernels/cuda/dflash_attention_fused_dq_sm90.cuh"
#include "kernels/cuda/dflash_attention_sm90.cuh"

namespace dflash::kernels::cuda::sm90 {
namespace {

// ---- Backward: D = dO . O ----

// delta [B, nh, T]: one row of [B*T*nh, hd] per 16 lanes, 8 elements (16 bytes) per lane, summed
// in a fixed order (each lane's 8 in order, then a butterfly over the 16 lanes). hd <= 128.
constexpr int kDeltaThreads = 256;
__global__ void delta_kernel(const bf16_t* out, const bf16_t* dout, float* delta, int64_t rows, int64_t T, int64_t nh,
                             int hd) {
  const int l16 = int(threadIdx.x) & 15;
  const int64_t pairs = (rows + 1) / 2, stride = int64_t(gridDim.x) * (kDeltaThreads / 32);
  for (int64_t pr = blockIdx.x * int64_t(kDeltaThreads / 32) + threadIdx.x / 32; pr < pairs; pr += stride) {
    const int64_t r = 2 * pr + ((threadIdx.x >> 4) & 1);  // warp-uniform loop: both halves take part
    float acc = 0.0f;
    if (r < rows && l16 * 8 < hd) {
      const uint4 ov = *reinterpret_cast<const uint4*>(out + r * hd + l16 * 8);
      const uint4 dv = *reinterpret_cast<const uint4*>(dout + r * hd + l16 * 8);
      const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(&ov);
      const __nv_bfloat162* d2 = reinterpret_cast<const __nv_bfloat162*>(&dv);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 of = __bfloat1622float2(o2[i]), df = __bfloat1622float2(d2[i]);
        acc = fmaf(df.x, of.x, acc);
        acc = fmaf(df.y, of.y, acc);
      }
    }
#pragma unroll
    for (int x = 8; x > 0; x >>= 1) acc += __shfl_xor_sync(kFull, acc, x);
    if (r < rows && l16 == 0) {
      const int64_t h = r % nh, t = (r / nh) % T, b = r / (nh * T);
      delta[(b * nh + h) * T + t] = acc;
    }
  }
}

// ---- Backward: dq ----

// Q, dO [2 warpgroups], then kDqStages pairs of K and V tiles, of [64][HDP]; the ring's barriers
// after them.
constexpr int kDqStages = 4;
template <int HDP>
constexpr int dq_smem_bytes() {
  return 1024 + int(tile_bytes(kRows, HDP)) * (4 + 2 * kDqStages) + 16 * kDqStages;
}

// The query side as in the forward. Per warpgroup, the key tiles it sees in halves of 32 keys (to
// keep the accumulators in registers), in FlashAttention-3's order: half u issues S = Q K^T and
// dP = dO V^T (wgmma, Q and dO as register fragments) and then dq_acc += dS(u-1) K(u-1) for the
// previous half, waits for S and dP only, computes P = exp2(S * scale * log2e - lse * log2e) and
// dS = P (dP - D) while dS(u-1) K(u-1) runs, then waits for it and writes dS(u) into the A
// fragments it read. Each half's two shapes (a product pending or not) are straight-line code.
// A producer warpgroup (dflash_attention_sm90.cuh, the warp-specialized query side) stages the K/V
// tile pairs into a ring of kDqStages = 4, so the previous tile's K is still there for its pending
// product; each half takes one turn (a skipped tile its two turns, issuing at most the pending
// product); tiles before t are released once the pending product of tile t-1 is done (half 0 of
// tile t, or a skipped tile t), and a pending product is finished at the end. dq += scale *
// dq_acc, each element by one thread.
template <int HDP>
__global__ void __launch_bounds__(kWsThreads, 1) dq_kernel(const Params p, const __grid_constant__ KvMaps maps) {
  constexpr int KS = HDP / 16, NO = HDP / 2;
  constexpr uint32_t TB = tile_bytes(kRows, HDP);
  extern __shared__ unsigned char smem_raw[];
  const uint32_t sQ = (smem_u32(smem_raw) + 1023u) & ~1023u, sO = sQ + 2 * TB, sK = sO + 2 * TB,
                 sV = sK + kDqStages * TB, bars = sV + kDqStages * TB;
  const Geometry& G = p.G;
  const int tid = int(threadIdx.x), wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int gq = lane >> 2, tq = lane & 3, hd = int(G.hd);
  const QueryCta c = query_cta(p);
  if (tid == 0) init_ring(bars, kDqStages);
  __syncthreads();
  if (tid >= kThreads) return produce_key_tiles<HDP, kDqStages>(p, c, c.ntiles, sK, sV, bars, tid - kThreads, maps);
  QueryWsRegisters::consumer();
  const WgView w = wg_view(p, c, wg);

#pragma unroll
  for (int h = 0; h < 2; ++h)
    stage_rows<HDP>(sQ + uint32_t(h) * TB, p.q, sO + uint32_t(h) * TB, p.dout, tid, hd, [&](int r) -> int64_t {
      const int R = c.R0 + h * kRows + r;
      int64_t li;
      return R < p.NR ? query_offset(p, c.b, c.g, R, &li) : -1;
    });
  cp_commit();
  cp_wait<0>();  // Q and dO
  fence_async_shared();
  consumers_sync();

  const int wrow = c.R0 + wg * kRows + warp * 16 + gq;
  const QueryRow rows[2] = {query_row_info(p, c, wrow), query_row_info(p, c, wrow + 8)};
  float lse2[2], D[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    lse2[i] = rows[i].kept ? p.lse_in[rows[i].lse_index] * kLog2e : 0.0f;
    D[i] = rows[i].kept ? p.delta[rows[i].lse_index] : 0.0f;
  }
  uint32_t qa[KS][4], oa[KS][4];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    load_a_frag(qa[kk], sQ + uint32_t(wg) * TB, warp * 16, kk, lane);
    load_a_frag(oa[kk], sO + uint32_t(wg) * TB, warp * 16, kk, lane);
  }

  const float sc = G.scale * kLog2e;
  float dq[NO] = {}, s[16] = {}, dp[16] = {};  // (64, HDP) sum of dS K; (64, 32) S then dS; dO V^T
  uint32_t da[2][4] = {};                      // dS of the pending half as A fragments (16 keys each)
  bool pending = false;                        // dq_acc += dS K of the half at K tile pk, rows prow0
  uint32_t pk = 0;
  int prow0 = 0;
  auto issue_sdp = [&](uint32_t kt, uint32_t vt, int row0) {  // s = Q K^T, dp = dO V^T (32 keys)
    const uint64_t kd = kmajor_desc(kt, kRows, row0, 0), vd = kmajor_desc(vt, kRows, row0, 0);
    pin(s);
    pin(dp);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
      mma_rs<32, 0>(s, qa[kk], desc_advance(kd, kmajor_step(kRows, kk)), kk > 0 ? 1 : 0);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
      mma_rs<32, 0>(dp, oa[kk], desc_advance(vd, kmajor_step(kRows, kk)), kk > 0 ? 1 : 0);
    wg_commit();
  };
  auto issue_dq = [&] {  // dq_acc += dS K for the pending half
    const uint64_t pd = mnmajor_desc(pk, kRows, prow0, 0);
    pin(dq);
    pin(da);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) mma_rs<HDP, 1>(dq, da[kk], desc_advance(pd, mnmajor_step(kk)), 1);
    wg_commit();
  };
  auto elementwise = [&](int v0, bool full) {  // s = dS of the 32 keys from virtual key v0
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int x = 4 * j + 2 * i + e;
          const float pr = attn::exp2_ftz(fmaf(s[x], sc, -lse2[i]));
          const bool vis = full | sees(rows[i], v0 + 8 * j + 2 * tq + e);
          s[x] = vis ? pr * (dp[x] - D[i]) : 0.0f;
        }
  };
  // The turns (two per tile; warpgroup 1 keeps its last one) and releases.
  auto take_turn = [&] { turn_wait(wg); };
  auto pass = [&](int t, int h) {
    if (wg == 0 || t + 1 < c.ntiles || h == 0) turn_pass(wg);
  };
  int released = 0;  // tiles 0 .. released-1 are released
  auto release_before = [&](int t) {
    for (; released < t; ++released) release_tile<kDqStages>(bars, released);
  };
  if (wg == 1) turn_pass(wg);
  for (int t = 0; t < c.ntiles; ++t) {
    wait_tile<kDqStages>(bars, t);
    if (!tile_active(w, t)) {
      take_turn();
      if (pending) {  // its K tile may be refilled once released
        issue_dq();
        pass(t, 0);
        wg_wait<0>();
        pin(dq);
        pin(da);
        pending = false;
      } else {
        pass(t, 0);
      }
      take_turn();
      pass(t, 1);
      release_before(t + 1);
      continue;
    }
    const uint32_t kt = sK + uint32_t(t % kDqStages) * TB, vt = sV + uint32_t(t % kDqStages) * TB;
    const bool full = tile_full(w, t);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      take_turn();
      if (pending) {
        issue_sdp(kt, vt, 32 * h);
        issue_dq();
        pass(t, h);
        wg_wait<1>();  // S and dP done; dS(u-1) K(u-1) may still run
        pin(s);
        pin(dp);
        elementwise(t * kRows + 32 * h, full);
        wg_wait<0>();  // dS(u-1) K(u-1) done: its fragments may be rewritten
        pin(dq);
        pin(da);
      } else {
        issue_sdp(kt, vt, 32 * h);
        pass(t, h);
        wg_wait<0>();
        pin(s);
        pin(dp);
        elementwise(t * kRows + 32 * h, full);
      }
      if (h == 0) release_before(t);  // the pending product of tile t-1 is done
      a_frag(da[0], s, 0);
      a_frag(da[1], s, 1);
      pending = true;
      pk = kt;
      prow0 = 32 * h;
    }
  }
  if (pending) {
    issue_dq();
    wg_wait<0>();
    pin(dq);
  }
  if (p.dq == nullptr) return;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const QueryRow& r = rows[i];
    if (!r.valid || (!r.kept && !p.dq_fresh)) continue;  // a dropped block's fresh rows get 0
#pragma unroll
    for (int j = 0; j < HDP / 8; ++j) {
      const int col = 8 * j + 2 * tq;
      if (col >= hd) break;
      const float x = r.kept ? G.scale * dq[4 * j + 2 * i] : 0.0f, y = r.kept ? G.scale * dq[4 * j + 2 * i + 1] : 0.0f;
      put_pair(p.dq, p.dq_bf16, p.dq_fresh, r.off + col, x, y);
    }
  }
}

// ---- Backward: the fused dq's last pass ----

// dq (+)= scale * the chunk's sum, one CTA of 128 threads per (b, g, chunk, half of the head dim):
// the sum from hand_dq's fragment order into [64 rows][64 columns] of shared memory, then out by
// rows (a warp writes one row's 64 columns). Rows of dropped blocks get what the dq kernel gives
// them: 0 when fresh, else nothing added. A chunk no CTA contributed to has no kept row.
__global__ void __launch_bounds__(128) dq_finish_kernel(const Params p) {
  __shared__ float sum[kRows][kRows + 1];
  const int blk = int(blockIdx.x), half = blk & 1, bgc = blk >> 1, C = bgc % p.nchunk, bg = bgc / p.nchunk;
  const int g = bg % int(p.G.nkv), b = bg / int(p.G.nkv);
  const int t = int(threadIdx.x), w = t >> 5, gq = (t & 31) >> 2, tq = t & 3;
  const bool any = p.dq_sem[bgc] > 0;
  const float* acc = p.dq_acc + int64_t(blk) * kDqHalfFloats;
#pragma unroll
  for (int e = 0; e < 32; ++e)  // element e = 4j + 2i + f: row 16w + gq + 8i, column 8j + 2tq + f
    sum[16 * w + gq + 8 * ((e >> 1) & 1)][8 * (e >> 2) + 2 * tq + (e & 1)] = any ? acc[e * 128 + t] : 0.0f;
  __syncthreads();
  const int hd = int(p.G.hd);
  const int32_t* keep = p.keep + int64_t(b) * p.G.N;
#pragma unroll 4
  for (int k = 0; k < 16; ++k) {
    const int idx = k * 128 + t, row = idx >> 5, pr = idx & 31, col = half * kRows + 2 * pr, R = C * kRows + row;
    if (R >= p.NR || col >= hd) continue;
    const bool kept = keep[block_of(p, R)] != 0;
    if (!kept && !p.dq_fresh) continue;
    int64_t li;
    const int64_t off = query_offset(p, b, g, R, &li) + col;
    const float x = kept ? p.G.scale * sum[row][2 * pr] : 0.0f, y = kept ? p.G.scale * sum[row][2 * pr + 1] : 0.0f;
    put_pair(p.dq, p.dq_bf16, p.dq_fresh, off, x, y);
  }
}

Params backward_params(const DflashAttentionBackward& a) {
  Params p = base_params(a.q, a.k, a.v, a.anchors, a.keep, a.d);
  p.dout = static_cast<const bf16_t*>(a.dout);
  p.lse_in = a.lse;
  p.delta = a.delta;
  p.dq = a.dq, p.dk = a.dk, p.dv = a.dv;
  p.dq_bf16 = a.dq_bf16, p.dk_bf16 = a.dk_bf16, p.dv_bf16 = a.dv_bf16;
  p.dq_fresh = a.dq_fresh, p.dk_fresh = a.dk_fresh, p.dv_fresh = a.dv_fresh;
  return p;
}

}  // namespace

// How long a fused dq turn may take before the kernel stops with an error: a step takes
// milliseconds, so a turn this late means the turns' order broke (a hang otherwise).
constexpr double kDqWaitSeconds = 30;

int64_t backward_scratch_bytes(const DflashAttentionDims& d, bool bf16) {
  const heuristics::AttentionBackward choice = backward_choice(d, bf16, true);
  if (!choice.sm90 || choice.dq != heuristics::Dq::fused) return 0;
  const Params p = base_params(nullptr, nullptr, nullptr, nullptr, nullptr, d);
  return fused_chunks(p) * (int64_t(2 * kDqHalfFloats) * 4 + 4);
}

bool backward(const DflashAttentionBackward& a, void* stream) {
  const heuristics::AttentionBackward choice = backward_choice(a.d, a.bf16 && a.dout_bf16, a.dq != nullptr);
  if (!choice.sm90) return false;
  Params p = backward_params(a);
  const Geometry& G = p.G;
  // Fused where the rules choose it and its scratch was given (asked for with backward_scratch_bytes).
  const bool fused = p.dq != nullptr && a.scratch != nullptr && choice.dq == heuristics::Dq::fused;
  cudaStream_t s = as_stream(stream);
  const int64_t rows = G.B * G.T * G.nh;
  delta_kernel<<<blocks_for((rows + 1) / 2, kDeltaThreads / 32), kDeltaThreads, 0, s>>>(
      static_cast<const bf16_t*>(a.out), p.dout, a.delta, rows, G.T, G.nh, int(G.hd));
  check_launch("dflash_attention_backward (sm90): delta");
  if (fused) {
    const TestSeams& seams = test_seams();  // a test's shorter wait, and its stall
    p.dq_wait_ns = uint64_t((seams.dq_wait_s > 0 ? seams.dq_wait_s : kDqWaitSeconds) * 1e9);
    p.dq_turn_skew = seams.dq_stall ? 1 : 0;
    p.dq_acc = static_cast<float*>(a.scratch);
    p.dq_sem = reinterpret_cast<int*>(p.dq_acc + fused_chunks(p) * (2 * kDqHalfFloats));
    if (cudaMemsetAsync(p.dq_sem, 0, size_t(fused_chunks(p)) * sizeof(int), s) != cudaSuccess)
      check_launch("dflash_attention_backward (sm90): zeroing the fused dq's counters");
    launch_dkdv(p, s, choice, true);
    dq_finish_kernel<<<unsigned(fused_chunks(p) * 2), 128, 0, s>>>(p);
    check_launch("dflash_attention_backward (sm90): fused dq, last pass");
    return true;
  }
  if (p.dq != nullptr) {
    const unsigned grid = unsigned(G.B * G.nkv * p.nct);
    const char* what = "dflash_attention_backward (sm90): dq";
    const int regs = QueryWsRegisters::kTotal;
    KvMaps maps{};  // unused where every tile is staged by the producer's threads
    p.kv_tma = choice.tma_key_tiles && kv_tma_maps(p, kRows, &maps);
    if (G.hd <= 64) launch(dq_kernel<64>, grid, dq_smem_bytes<64>(), s, p, what, kWsThreads, regs, maps);
    else launch(dq_kernel<128>, grid, dq_smem_bytes<128>(), s, p, what, kWsThreads, regs, maps);
  }
  if (p.dk != nullptr || p.dv != nullptr) launch_dkdv(p, s, choice, false);
  return true;
}

}  // namespace dflash::kernels::cuda::sm90
