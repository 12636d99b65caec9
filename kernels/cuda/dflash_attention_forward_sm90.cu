// DFlash attention forward on Hopper tensor cores (wgmma, sm_90a only): the kernel and its
// launcher, sm90::forward. The design and what the kernels share: dflash_attention_sm90.cuh.
#include "kernels/cuda/dflash_attention_sm90.cuh"

namespace dflash::kernels::cuda::sm90 {
namespace {

// ---- Forward ----

// Q [2 warpgroups] of [64][HDP], then the K tiles and the V tiles of [KT][HDP] (KT keys: 64, or
// 128 in the ws mode's wide tiles), 1024-aligned; the ws mode's ring barriers after them. The wide
// ring holds three tiles (230448 bytes at hd 128, within the 232448 a CTA may ask for): tile t-1's
// P V runs while tile t is computed and tile t+1 lands.
constexpr int kWsForwardStages = 4, kWideForwardStages = 3;
template <bool WS, int KT>
constexpr int forward_stages() { return !WS ? kStages : KT == kRows ? kWsForwardStages : kWideForwardStages; }
template <int HDP, bool WS, int KT>
constexpr int forward_smem_bytes() {
  return 1024 + int(tile_bytes(kRows, HDP)) * 2 + int(tile_bytes(KT, HDP)) * 2 * forward_stages<WS, KT>() +
         16 * forward_stages<WS, KT>();
}
static_assert(forward_smem_bytes<128, true, 2 * kRows>() <= 232448, "the wide ring must fit a CTA's shared memory");

// Per warpgroup, FlashAttention-3's order, so that tensor cores and the online softmax overlap
// inside one warpgroup: iteration t issues S(t) = Q K(t)^T, rescales O by the correction of tile
// t-1 and issues O += P(t-1) V(t-1); once S(t) is done the softmax of tile t runs while P V(t-1)
// is still on the tensor cores; then P V(t-1) is waited for and P(t) is written into the A
// fragments it read. Each iteration ends with no wgmma in flight, and each of its three shapes
// (tile t and/or tile t-1 active) is straight-line code, so ptxas sees every accumulator settled
// before ordinary code reads or writes it and keeps the wgmmas pipelined. Loads run two tiles
// ahead: the barrier that opens iteration t (t = 0 .. ntiles; the last one only finishes P V)
// is followed by the copies of K(t+2) and V(t+1) into the buffers of K(t-1) and V(t-2), which
// every warpgroup finished with in iteration t-1. Softmax in f32, log2 units, each row's max and
// sum over its quad of lanes; a row that has seen no key yet keeps max -inf and contributes
// nothing. Dropped blocks write output 0 and lse 0.
// WS (the ws mode, dflash_attention_sm90.cuh): a producer warpgroup stages K(t) and V(t) into a ring of
// kWsForwardStages; iteration t waits for tile t, issues in its turn and releases tile t-1 at its
// end (its P V done). The products, their order and the softmax are the lockstep mode's.
// KT = 128 (the ws mode's wide tiles, DFLASH_ATTENTION_FORWARD_KEYS): the same schedule over tiles
// of 128 keys, so each wgmma is m64n128 (S) or runs 8 k-steps (P V) and the softmax rescales once
// per 128 keys: other roundings than 64-key tiles (the max and sum run per tile), the same math.
template <int HDP, bool WS, int KT = kRows>
__global__ void __launch_bounds__(WS ? kWsThreads : kThreads, 1)
    forward_kernel(const Params p, const __grid_constant__ KvMaps maps) {
  static_assert(KT == kRows || (WS && KT == 2 * kRows), "128-key tiles run in the ws mode only");
  constexpr int KS = HDP / 16, NO = HDP / 2, STAGES = forward_stages<WS, KT>(), NS = KT / 2, PK = KT / 16;
  constexpr uint32_t TQ = tile_bytes(kRows, HDP), TB = tile_bytes(KT, HDP);
  extern __shared__ unsigned char smem_raw[];
  const uint32_t sQ = (smem_u32(smem_raw) + 1023u) & ~1023u, sK = sQ + 2 * TQ, sV = sK + STAGES * TB,
                 bars = sV + STAGES * TB;
  const Geometry& G = p.G;
  const int tid = int(threadIdx.x), wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int tq = lane & 3, hd = int(G.hd);
  const QueryCta c = query_cta(p);
  const int ntiles = KT == kRows ? c.ntiles : (c.L + KT - 1) / KT;
  if constexpr (WS) {
    if (tid == 0) init_ring(bars, STAGES);
    __syncthreads();
    if (tid >= kThreads) return produce_key_tiles<HDP, STAGES, KT>(p, c, ntiles, sK, sV, bars, tid - kThreads, maps);
    QueryWsRegisters::consumer();
  }
  const WgView w = wg_view(p, c, wg);

  auto stage_k = [&](int t) {
    if (t < c.ntiles) stage_key_tile<HDP>(sK + uint32_t(t % STAGES) * TB, p.k, 0, nullptr, c, t, tid, hd);
  };
  auto stage_v = [&](int t) {
    if (t < c.ntiles) stage_key_tile<HDP>(sV + uint32_t(t % STAGES) * TB, p.v, 0, nullptr, c, t, tid, hd);
  };
#pragma unroll
  for (int h = 0; h < 2; ++h)
    stage_rows<HDP>(sQ + uint32_t(h) * TQ, p.q, 0, nullptr, tid, hd, [&](int r) -> int64_t {
      const int R = c.R0 + h * kRows + r;
      int64_t li;
      return R < p.NR ? query_offset(p, c.b, c.g, R, &li) : -1;
    });
  if constexpr (WS) {
    cp_commit();
    cp_wait<0>();  // Q
    fence_async_shared();
    consumers_sync();
  } else {
    stage_k(0);
    cp_commit();
    stage_k(1);
    stage_v(0);
    cp_commit();
    cp_wait<1>();  // Q and K(0)
    fence_async_shared();
    __syncthreads();
  }

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

  // The ws mode's turns: pass after issuing (warpgroup 1 keeps its last one, t = ntiles).
  auto pass = [&](int t) {
    if constexpr (WS) {
      if (wg == 0 || t < ntiles) turn_pass(wg);
    }
  };
  if constexpr (WS) {
    if (wg == 1) turn_pass(wg);
  }
  bool prev = false;  // tile t-1 was active: P(t-1) V(t-1) is due
  for (int t = 0; t <= ntiles; ++t) {
    if constexpr (WS) {
      if (t < ntiles) wait_tile<STAGES>(bars, t);
      turn_wait(wg);
    } else {
      cp_wait<1>();  // K(t), V(t-1) landed (this thread's copies)
      fence_async_shared();
      __syncthreads();  // everyone's copies landed; every warpgroup is done with K(t-1), V(t-2)
      stage_k(t + 2);
      stage_v(t + 1);
      cp_commit();
    }
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
    if constexpr (WS) {
      if (t >= 1) release_tile<STAGES>(bars, t - 1);  // K(t-1) and V(t-1) read (P V(t-1) waited for)
    }
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

bool applies(bool bf16, int64_t hd) { return bf16 && hd <= 128 && device_info().sm90; }

bool forward(const DflashAttentionForward& a, void* stream) {
  if (!applies(a.bf16, a.d.hd)) return false;
  Params p = base_params(a.q, a.k, a.v, a.anchors, a.keep, a.d);
  p.out = static_cast<bf16_t*>(a.out);
  p.lse = a.lse;
  const unsigned grid = unsigned(p.G.B * p.G.nkv * p.nct);
  cudaStream_t s = as_stream(stream);
  const char* what = "dflash_attention_forward (sm90)";
  auto run = [&](auto ws, auto keys) {
    constexpr bool WS = decltype(ws)::value;
    constexpr int KT = decltype(keys)::value;
    const int threads = WS ? kWsThreads : kThreads, regs = WS ? QueryWsRegisters::kTotal : 0;
    KvMaps maps{};  // unused by the lockstep mode and where every tile is staged by the threads
    p.kv_tma = WS && kv_tma_maps(p, KT, &maps);
    if (p.G.hd <= 64)
      launch(forward_kernel<64, WS, KT>, grid, forward_smem_bytes<64, WS, KT>(), s, p, what, threads, regs, maps);
    else
      launch(forward_kernel<128, WS, KT>, grid, forward_smem_bytes<128, WS, KT>(), s, p, what, threads, regs, maps);
  };
  using Narrow = std::integral_constant<int, kRows>;
  using Wide = std::integral_constant<int, 2 * kRows>;
  if (!query_side_ws(true)) run(std::false_type{}, Narrow{});
  else if (forward_key_tile(kForwardKeyTileDefault) == 2 * kRows) run(std::true_type{}, Wide{});
  else run(std::true_type{}, Narrow{});
  return true;
}

int forward_key_tile(int fallback) {
  const char* e = std::getenv("DFLASH_ATTENTION_FORWARD_KEYS");
  const std::string keys = e ? e : "";
  if (keys.empty()) return fallback;
  if (keys == "64") return kRows;
  if (keys == "128") return 2 * kRows;
  throw std::runtime_error("DFLASH_ATTENTION_FORWARD_KEYS=" + keys +
                           ": use 64 or 128 (the keys per tile of the forward's ws mode)");
}

bool query_side_ws(bool fallback) {
  const char* e = std::getenv("DFLASH_ATTENTION_QUERY");
  const std::string mode = e ? e : "";
  if (mode.empty()) return fallback;
  if (mode == "ws") return true;
  if (mode == "lockstep") return false;
  throw std::runtime_error("DFLASH_ATTENTION_QUERY=" + mode +
                           ": use lockstep (all threads load and compute) or ws (a producer warpgroup and ping-pong turns)");
}

}  // namespace dflash::kernels::cuda::sm90
