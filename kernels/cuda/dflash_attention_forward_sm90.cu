// DFlash attention forward on Hopper tensor cores (wgmma, sm_90a only): the kernel and its
// launcher, sm90::forward. The design and what the kernels share: dflash_attention_sm90.cuh.
#include "kernels/cuda/dflash_attention_sm90.cuh"

namespace dflash::kernels::cuda::sm90 {
namespace {

// ---- Forward ----

// Q [2 warpgroups] of [64][HDP], then the K tiles and the V tiles of [KT][HDP] (KT = 128 keys,
// heuristics::kSm90ForwardKeys), 1024-aligned; the ring's barriers after them. The ring holds three
// tiles (230448 bytes at hd 128, within the 232448 a CTA may ask for): tile t-1's P V runs while
// tile t is computed and tile t+1 lands.
constexpr int kForwardKeys = heuristics::kSm90ForwardKeys, kForwardStages = 3;
static_assert(kForwardKeys == 2 * kRows, "a forward key tile is two 64-row tiles");
template <int HDP>
constexpr int forward_smem_bytes() {
  return 1024 + int(tile_bytes(kRows, HDP)) * 2 + int(tile_bytes(kForwardKeys, HDP)) * 2 * kForwardStages +
         16 * kForwardStages;
}
static_assert(forward_smem_bytes<128>() <= 232448, "the ring must fit a CTA's shared memory");

// Per warpgroup, FlashAttention-3's order, so that tensor cores and the online softmax overlap
// inside one warpgroup: iteration t issues S(t) = Q K(t)^T, rescales O by the correction of tile
// t-1 and issues O += P(t-1) V(t-1); once S(t) is done the softmax of tile t runs while P V(t-1)
// is still on the tensor cores; then P V(t-1) is waited for and P(t) is written into the A
// fragments it read. Each iteration ends with no wgmma in flight, and each of its three shapes
// (tile t and/or tile t-1 active) is straight-line code, so ptxas sees every accumulator settled
// before ordinary code reads or writes it and keeps the wgmmas pipelined. A producer warpgroup
// (dflash_attention_sm90.cuh, the warp-specialized query side) stages K(t) and V(t) into a ring of
// kForwardStages; iteration t (t = 0 .. ntiles; the last one only finishes P V) waits for tile t,
// issues in its turn and releases tile t-1 at its end (its P V done). Tiles of KT = 128 keys: each
// wgmma is m64n128 (S) or runs 8 k-steps (P V), and the softmax rescales once per 128 keys.
// Softmax in f32, log2 units, each row's max and sum over its quad of lanes; a row that has seen
// no key yet keeps max -inf and contributes nothing. Dropped blocks write output 0 and lse 0.
template <int HDP>
__global__ void __launch_bounds__(kWsThreads, 1) forward_kernel(const Params p, const __grid_constant__ KvMaps maps) {
  constexpr int KT = kForwardKeys, STAGES = kForwardStages;
  constexpr int KS = HDP / 16, NO = HDP / 2, NS = KT / 2, PK = KT / 16;
  constexpr uint32_t TQ = tile_bytes(kRows, HDP), TB = tile_bytes(KT, HDP);
  extern __shared__ unsigned char smem_raw[];
  const uint32_t sQ = (smem_u32(smem_raw) + 1023u) & ~1023u, sK = sQ + 2 * TQ, sV = sK + STAGES * TB,
                 bars = sV + STAGES * TB;
  const Geometry& G = p.G;
  const int tid = int(threadIdx.x), wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int tq = lane & 3, hd = int(G.hd);
  const QueryCta c = query_cta(p);
  const int ntiles = (c.L + KT - 1) / KT;
  if (tid == 0) init_ring(bars, STAGES);
  __syncthreads();
  if (tid >= kThreads) return produce_key_tiles<HDP, STAGES, KT>(p, c, ntiles, sK, sV, bars, tid - kThreads, maps);
  QueryWsRegisters::consumer();
  const WgView w = wg_view(p, c, wg);

#pragma unroll
  for (int h = 0; h < 2; ++h)
    stage_rows<HDP>(sQ + uint32_t(h) * TQ, p.q, 0, nullptr, tid, hd, [&](int r) -> int64_t {
      const int R = c.R0 + h * kRows + r;
      int64_t li;
      return R < p.NR ? query_offset(p, c.b, c.g, R, &li) : -1;
    });
  cp_commit();
  cp_wait<0>();  // Q
  fence_async_shared();
  consumers_sync();

  const int wrow = c.R0 + wg * kRows + warp * 16 + (lane >> 2);
  const QueryRow rows[2] = {query_row_info(p, c, wrow), query_row_info(p, c, wrow + 8)};
  uint32_t qa[KS][4];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) load_a_frag(qa[kk], sQ + uint32_t(wg) * TQ, warp * 16, kk, lane);

  const float sc = G.scale * kLog2e;
  float o[NO] = {}, s[NS] = {};  // (64, HDP) output, unnormalised; (64, KT) scores, then P
  uint32_t pf[PK][4] = {};       // P of the previous tile as A fragments (k-steps of 16 keys)
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // running max (log2 units), lane's sum
  float corr[2] = {1.0f, 1.0f};  // rescale of O that goes with the pending P V

  auto issue_s = [&](int t) {  // s = Q K(t)^T
    const uint64_t kd = kmajor_desc(sK + uint32_t(t % STAGES) * TB, KT, 0, 0);
    pin(s);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
      mma_rs<KT, 0>(s, qa[kk], desc_advance(kd, kmajor_step(KT, kk)), kk > 0 ? 1 : 0);
    wg_commit();
  };
  auto issue_pv = [&](int t) {  // o = o * corr + P(t) V(t)
#pragma unroll
    for (int j = 0; j < HDP / 8; ++j)
#pragma unroll
      for (int i = 0; i < 2; ++i) o[4 * j + 2 * i] *= corr[i], o[4 * j + 2 * i + 1] *= corr[i];
    const uint64_t vd = mnmajor_desc(sV + uint32_t(t % STAGES) * TB, KT, 0, 0);
    pin(o);
    pin(pf);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < PK; ++kk) mma_rs<HDP, 1>(o, pf[kk], desc_advance(vd, mnmajor_step(kk)), 1);
    wg_commit();
  };
  auto softmax = [&](int t) {  // s = P(t) (f32), corr = the rescale for tile t; m, l updated
    if (!tile_full(w, t, KT)) {
      const int v0 = t * KT + 2 * tq;
#pragma unroll
      for (int j = 0; j < KT / 8; ++j)
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int x = 4 * j + 2 * i + e;
            s[x] = sees(rows[i], v0 + 8 * j + e) ? s[x] : -INFINITY;
          }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < KT / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * i], s[4 * j + 2 * i + 1]));
      const float mnew = fmaxf(m[i], attn::quad_max(mx) * sc);  // sc > 0: max(s * sc) = max(s) * sc
      const float mb = mnew == -INFINITY ? 0.0f : mnew;         // no key seen yet: P = 0, corr = 0
      corr[i] = attn::exp2_ftz(m[i] - mb);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < KT / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int x = 4 * j + 2 * i + e;
          const float pr = attn::exp2_ftz(fmaf(s[x], sc, -mb));
          s[x] = pr;
          sum += pr;
        }
      l[i] = l[i] * corr[i] + sum;
      m[i] = mnew;
    }
  };
  auto to_fragments = [&] {
#pragma unroll
    for (int kk = 0; kk < PK; ++kk) a_frag(pf[kk], s, kk);
  };

  // The turns: pass after issuing (warpgroup 1 keeps its last one, t = ntiles).
  auto pass = [&](int t) {
    if (wg == 0 || t < ntiles) turn_pass(wg);
  };
  if (wg == 1) turn_pass(wg);
  bool prev = false;  // tile t-1 was active: P(t-1) V(t-1) is due
  for (int t = 0; t <= ntiles; ++t) {
    if (t < ntiles) wait_tile<STAGES>(bars, t);
    turn_wait(wg);
    const bool cur = t < ntiles && tile_active(w, t, KT);
    if (cur && prev) {
      issue_s(t);
      issue_pv(t - 1);  // with corr of tile t-1 (softmax(t) below replaces it)
      pass(t);
      wg_wait<1>();  // S(t) done; P V(t-1) may still run
      pin(s);
      softmax(t);
      wg_wait<0>();  // P V(t-1) done: its A fragments may be rewritten
      pin(o);
      pin(pf);
      to_fragments();
    } else if (cur) {
      issue_s(t);
      pass(t);
      wg_wait<0>();
      pin(s);
      softmax(t);
      to_fragments();
    } else if (prev) {
      issue_pv(t - 1);
      pass(t);
      wg_wait<0>();
      pin(o);
      pin(pf);
    } else {
      pass(t);
    }
    if (t >= 1) release_tile<STAGES>(bars, t - 1);  // K(t-1) and V(t-1) read (P V(t-1) waited for)
    prev = cur;
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float sum = attn::quad_sum(l[i]);  // >= 1 for a kept row: its max contributes exp2(0)
    const QueryRow& r = rows[i];
    if (!r.valid) continue;
    const bool ok = r.kept && sum > 0.0f;
    const float inv = ok ? 1.0f / sum : 0.0f;
    bf16_t* orow = p.out + r.off;
#pragma unroll
    for (int j = 0; j < HDP / 8; ++j) {
      const int col = 8 * j + 2 * tq;
      if (col >= hd) break;
      const float x = ok ? o[4 * j + 2 * i] * inv : 0.0f, y = ok ? o[4 * j + 2 * i + 1] * inv : 0.0f;
      *reinterpret_cast<__nv_bfloat162*>(orow + col) = __floats2bfloat162_rn(x, y);
    }
    if (tq == 0) p.lse[r.lse_index] = ok ? m[i] * kLn2 + logf(sum) : 0.0f;
  }
}

}  // namespace

bool forward(const DflashAttentionForward& a, void* stream) {
  const heuristics::AttentionForward choice = forward_choice(a.d, a.bf16);
  if (!choice.sm90) return false;
  Params p = base_params(a.q, a.k, a.v, a.anchors, a.keep, a.d);
  p.out = static_cast<bf16_t*>(a.out);
  p.lse = a.lse;
  const unsigned grid = unsigned(p.G.B * p.G.nkv * p.nct);
  cudaStream_t s = as_stream(stream);
  const char* what = "dflash_attention_forward (sm90)";
  KvMaps maps{};  // unused where every tile is staged by the producer's threads
  p.kv_tma = choice.tma_key_tiles && kv_tma_maps(p, kForwardKeys, &maps);
  const int regs = QueryWsRegisters::kTotal;
  if (p.G.hd <= 64) launch(forward_kernel<64>, grid, forward_smem_bytes<64>(), s, p, what, kWsThreads, regs, maps);
  else launch(forward_kernel<128>, grid, forward_smem_bytes<128>(), s, p, what, kWsThreads, regs, maps);
  return true;
}

}  // namespace dflash::kernels::cuda::sm90
