// DFlash block-sparse attention on Hopper tensor cores (wgmma, sm_90a only): what the forward
// (dflash_attention_forward_sm90.cu), dq (dflash_attention_backward_sm90.cu) and dk/dv
// (dflash_attention_dkdv_sm90.cu) kernels share: constants, arguments, staging, the query-side
// geometry and the launch helpers. dflash_attention.cu and dflash_attention_backward.cu run them
// for bf16 tensors with head dim <= 128 on a compute capability 9.0 device, as kernels/heuristics.h
// chooses (which also picks their modes and loads). Same semantics as the v1 kernels
// (kernels/cpu/attention.cpp; docs/MODEL.md, the attention mask) and the same determinism: every
// output element is written by one thread of one CTA, each sum runs in a fixed order, no float
// atomics (the fused backward's dq sums across CTAs take turns, so their order is fixed too:
// dflash_attention_fused_dq_sm90.cuh).
//
// Rows. The query rows that kv head g serves are numbered R = a * rpk + rr (block a; rr = hq * bs
// + slot as in the v1 kernels; rpk = group * bs, the drafter's 4 * 16 = 64).
// Forward and dq: a CTA of two warpgroups takes 128 consecutive rows (the drafter's two blocks),
// 64 per warpgroup (wgmma's M). Both warpgroups walk one virtual key sequence: context keys
// 0 .. Amax-1 (Amax: the largest anchor among the CTA's kept blocks), then the draft keys of the
// CTA's blocks, in tiles of 64 keys (128 in the forward) staged once for both by a producer
// warpgroup. A row sees virtual key v when v is below its anchor or is one of its own block's
// draft keys; a warpgroup skips tiles none of its rows sees. Sorted anchors (the data pipeline's) keep a
// CTA's blocks close, so little is masked or skipped; unsorted anchors stay correct, only slower.
// dk/dv: a CTA takes 128 keys, 64 per warpgroup (context keys, or draft keys), and walks the rows
// of the blocks between the first and the last that see them, in chunks of 64 rows staged once
// for both warpgroups by a producer warpgroup (the ws mode); rows that do not see a key are masked
// (P = 0). The chunks' arrival and release are mbarriers, so a warpgroup may run up to a chunk
// ahead of the other. For grids too small to fill the GPU, the split mode: 64 keys per CTA, the
// chunks dealt to the two warpgroups, their partial sums added in a fixed order at the end.
//
// Operands sit in 128-byte-swizzled shared tiles (dflash_attention_sm90.h), filled by cp.async or
// TMA (two to four stages deep); each thread waits for its own copies, fences them for the async
// proxy (fence.proxy.async) and meets the others at a barrier before any warpgroup reads the tile.
// A buffer is refilled only after a barrier that every reader reaches after waiting for its wgmma
// reads of it. Q and dO of the query-side kernels are held as register A fragments; P and dS go
// from the f32 accumulators to register A fragments. Every group of wgmmas is issued, committed
// and waited for in straight-line code, with the registers it uses pinned around it (see pin), so
// that ptxas keeps the wgmmas pipelined; ptxas -v reports no C751x serialization and no spills in
// the main loops.
#pragma once
#include <climits>
#include <cmath>
#include <string>

#include "kernels/cuda/device_traits.h"
#include "kernels/cuda/dflash_attention.cuh"
#include "kernels/cuda/dflash_attention_sm90.h"
#include "kernels/cuda/dflash_attention_sm90_ptx.cuh"
#include "kernels/cuda/dflash_attention_tma_sm90.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "kernels/cuda/*_sm90.cu must be built for sm_90a only (-gencode=arch=compute_90a,code=sm_90a)"
#endif

namespace dflash::kernels::cuda::sm90 {

using attn::Geometry;

constexpr int kThreads = 256;              // two warpgroups
constexpr int kRows = 64;                  // rows of every tile: a warpgroup's M, a key tile, a row chunk
constexpr int kCtaRows = 2 * kRows;        // query rows (forward, dq) or keys (dk/dv) of a CTA
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
constexpr unsigned kFull = 0xffffffffu;

// ---- Kernel arguments ----

struct Params {
  const bf16_t *q, *k, *v, *dout;  // [B, T, nh, hd], [B, S+T, nkv, hd] x 2, [B, T, nh, hd]
  const int32_t *anchors, *keep;   // [B, N]
  Geometry G;
  int rpk, NR, nct;     // rows per block and kv head (group * bs), N * rpk, query-side CTAs per (b, g)
  uint64_t rpk_magic;   // div_magic(rpk): R / rpk in one multiply-high
  int nctx, ndraft;     // dk/dv CTAs per (b, g): context and draft key ranges (128 or 64 keys)
  bf16_t* out;          // forward: [B, T, nh, hd]
  float* lse;           // forward: [B, nh, T]
  const float *lse_in, *delta;  // backward: [B, nh, T] each
  void *dq, *dk, *dv;           // backward: += (any may be null for dk/dv; dq kernel runs only with dq)
  bool dq_bf16, dk_bf16, dv_bf16;
  bool dq_fresh, dk_fresh, dv_fresh;  // written, not added to (every element, as if added to 0)
  // The fused backward (dk/dv's kernel also sums dq; dflash_attention_dkdv_sm90.cu): per (b, g) and
  // chunk of 64 rows, two 64 x 64 f32 partial sums of dS K (one per half of the head dim, 4096
  // floats each in the consumer threads' fragment order), and the number of contributions added so
  // far (zeroed before every launch). nchunk = ceil(NR / 64).
  float* dq_acc;
  int* dq_sem;
  int nchunk;
  uint64_t dq_wait_ns;  // a turn not come after this long is an error (a trap), never a hang
  int dq_turn_skew;     // every turn asked for is this much later (0; the test seam's stall: 1, none comes)
  bool dkdv_tma;        // dk/dv's producer loads each chunk by TMA (DkdvMaps), not by cp.async per row
  bool kv_tma;          // forward and dq: the producer loads context-only key tiles by TMA (KvMaps)
};


// ---- Staging ----

// The A fragment of rows m0..m0+15, k-step kk of a [64][HDP] tile (ldmatrix of the swizzled pieces).
__device__ __forceinline__ void load_a_frag(uint32_t (&r)[4], uint32_t tile, int m0, int kk, int lane) {
  const int row = m0 + (lane & 7) + ((lane >> 3) & 1) * 8, piece = 2 * kk + (lane >> 4);
  ldsm4(r, tile + piece_offset(kRows, row, piece));
}

// Rows 0..63 of the [64][HDP] tiles t0 (from s0) and t1 (from s1, if not null): row r from element
// offset off(r) (-1: a zero row); columns >= hd are zero. Thread tix of NT; complete after
// cp_wait, fence_async_shared and a barrier over the NT threads.
template <int HDP, int NT = kThreads, class Off>
__device__ __forceinline__ void stage_rows(uint32_t t0, const bf16_t* s0, uint32_t t1, const bf16_t* s1, int tix,
                                           int hd, Off off) {
  constexpr int kPieces = HDP / 8, kPer = kRows * kPieces / NT;
  static_assert(kRows * kPieces % NT == 0, "tile pieces must split evenly over the threads");
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int id = tix + j * NT, row = id / kPieces, piece = id % kPieces;
    const int64_t o = off(row);
    const bool ok = o >= 0 && piece * 8 < hd;
    const int64_t at = ok ? o + piece * 8 : 0;
    const uint32_t dst = piece_offset(kRows, row, piece);
    cp16(t0 + dst, s0 + at, ok);
    if (s1 != nullptr) cp16(t1 + dst, s1 + at, ok);
  }
}

// Barrier over the 128 threads of warpgroup wg (ids 1 and 2; __syncthreads is id 0).
__device__ __forceinline__ void wg_barrier(int wg) {
  if (wg == 0) asm volatile("bar.sync 1, 128;\n" ::: "memory");
  else asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

__device__ __forceinline__ int clamp_anchor(int32_t raw, int S) { return raw < 0 ? 0 : (raw > S ? S : int(raw)); }

// Element offset of query row R (< NR) of kv head g in batch b in q / dout; sets its lse index.
__device__ __forceinline__ int block_of(const Params& p, int R) {
  return int(div_by_magic(uint32_t(R), p.rpk_magic));
}
__device__ __forceinline__ int64_t query_offset(const Params& p, int b, int g, int R, int64_t* lse_index) {
  const int a = block_of(p, R), rr = R - a * p.rpk;
  return attn::query_row(p.G, b, a, g, rr, lse_index) * p.G.hd;
}

// ---- The query side (forward, dq) ----

// The CTA's rows R0 .. R0+127 of kv head g in batch b and its virtual key sequence of length L:
// keys 0..Amax-1 are context keys, Amax + i is draft key draft0 + i.
struct QueryCta {
  int b, g, R0, a_first, Amax, L, ntiles, draft0, kv_stride;
  int64_t kv_base;  // element offset of key 0 of (b, g)
};
// Grid: B * nkv * nct CTAs, the last rows (largest anchors when sorted) first.
__device__ __forceinline__ QueryCta query_cta(const Params& p) {
  const Geometry& G = p.G;
  QueryCta c;
  unsigned bid = blockIdx.x;
  c.g = int(bid % unsigned(G.nkv));
  bid /= unsigned(G.nkv);
  c.b = int(bid % unsigned(G.B));
  c.R0 = (p.nct - 1 - int(bid / unsigned(G.B))) * kCtaRows;
  const int S = int(G.S), bs = int(G.bs), Rend = min(c.R0 + kCtaRows, p.NR);
  c.a_first = c.R0 / p.rpk;
  const int a_last = (Rend - 1) / p.rpk;
  const int32_t *anchors = p.anchors + int64_t(c.b) * G.N, *keep = p.keep + int64_t(c.b) * G.N;
  int amax = 0;
  for (int a = c.a_first; a <= a_last; ++a)
    if (keep[a] != 0) amax = max(amax, clamp_anchor(anchors[a], S));
  c.Amax = amax;
  c.L = amax + (a_last - c.a_first + 1) * bs;
  c.ntiles = (c.L + kRows - 1) / kRows;
  c.draft0 = S + c.a_first * bs;
  c.kv_base = (int64_t(c.b) * G.keys * G.nkv + c.g) * G.hd;
  c.kv_stride = int(G.nkv * G.hd);
  return c;
}
// Element offset in k / v of virtual key v, or -1 past the sequence.
__device__ __forceinline__ int64_t key_offset(const QueryCta& c, int v) {
  if (v >= c.L) return -1;
  return c.kv_base + int64_t(v < c.Amax ? v : c.draft0 + (v - c.Amax)) * c.kv_stride;
}

// ---- The warp-specialized query side (forward and dq) ----
//
// kWsThreads = the two consumer warpgroups (threads 0..255, which compute, with 240 registers
// each) and a producer warpgroup (256..383, 24 registers each; see WsRegisters) that stages every
// key tile (K and V) of the CTA's virtual sequence into a ring of `stages` buffers: tile t waits
// for buffer t % stages to be released (empty[t % stages], one arrival per consumer thread), then
// lands by cp.async or TMA and completes full[t % stages] (one arrival per producer thread when its
// copies have landed). A consumer thread waits for full(t) before it releases tile t, so no
// arrival can run ahead into a later phase of a barrier. The consumers take turns to issue their
// wgmmas (FlashAttention-3's ping-pong): warpgroup wg waits at named barrier 4 + wg, issues, and passes the turn with an
// arrival at the other's barrier, so one warpgroup's softmax runs under the other's products.
// Both warpgroups take the same number of turns; warpgroup 0 takes the first (warpgroup 1 passes
// once before its loop) and warpgroup 1 does not pass its last one, so every named-barrier phase
// completes. The turns and the buffers change when a product runs, never what it computes.
constexpr int kWsThreads = kThreads + 128;
constexpr int kProducerThreads = kWsThreads - kThreads;
// Registers per thread of the producer and of the consumer warpgroups after setmaxnreg (every warp
// of a warpgroup executes it). setmaxnreg only moves registers within the CTA's launch allocation:
// ptxas gives a kernel of kWsThreads threads and 1 CTA per SM 168 registers per thread (65536 /
// 384, rounded down to a multiple of 8), so the two counts must fit 168 * 384, or the consumers'
// setmaxnreg.inc waits forever (dk/dv's first ws run, 32 + 2 x 240, hung: docs/ATTENTION.md).
constexpr int kWsLaunchRegisters = 168;
template <int PRODUCER, int CONSUMER>
struct WsRegisters {
  static constexpr int kTotal = PRODUCER * kProducerThreads + CONSUMER * kThreads;
  static_assert(kTotal <= kWsLaunchRegisters * kWsThreads,
                "the warpgroups' registers after setmaxnreg must fit the CTA's launch allocation");
  static_assert(PRODUCER % 8 == 0 && CONSUMER % 8 == 0 && PRODUCER >= 24 && CONSUMER <= 256,
                "setmaxnreg takes multiples of 8 in [24, 256]");
  __device__ static void producer() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER)); }
  __device__ static void consumer() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER)); }
};
using QueryWsRegisters = WsRegisters<24, 240>;  // forward and dq: a lean producer (produce_key_tiles)
using DkdvWsRegisters = WsRegisters<32, 232>;   // dk/dv: its producer computes row offsets too
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 3, 256;\n" ::: "memory"); }
__device__ __forceinline__ void turn_wait(int wg) { asm volatile("bar.sync %0, 256;\n" ::"r"(4 + wg) : "memory"); }
__device__ __forceinline__ void turn_pass(int wg) { asm volatile("bar.arrive %0, 256;\n" ::"r"(5 - wg) : "memory"); }

// The ring's barriers: full[i] at bars + 8i, empty[i] at bars + 8(stages + i). One thread, then a
// __syncthreads before any use.
__device__ __forceinline__ void init_ring(uint32_t bars, int stages) {
  for (int i = 0; i < stages; ++i)
    mbar_init(bars + 8u * uint32_t(i), kProducerThreads), mbar_init(bars + 8u * uint32_t(stages + i), kThreads);
}
// The producer warpgroup's whole job (thread tix 0..127): K(t) into sK, V(t) into sV, t = 0 ..
// ntiles-1, tiles of ROWS keys (the forward's: 128; dq's: 64).
// With p.kv_tma, a tile of context keys alone comes by TMA: thread 0 adds its bytes to the full
// barrier's transactions, the others just arrive (the barrier counts kProducerThreads either way).
template <int HDP, int STAGES, int ROWS = kRows>
__device__ __forceinline__ void produce_key_tiles(const Params& p, const QueryCta& c, int ntiles, uint32_t sK,
                                                  uint32_t sV, uint32_t bars, int tix, const KvMaps& maps) {
  constexpr uint32_t TB = tile_bytes(ROWS, HDP);
  QueryWsRegisters::producer();
  for (int t = 0; t < ntiles; ++t) {
    const uint32_t st = uint32_t(t % STAGES);
    if (t >= STAGES) mbar_wait(bars + 8u * (STAGES + st), uint32_t(t / STAGES - 1) & 1u);
    if (p.kv_tma && (t + 1) * ROWS <= c.Amax) {
      if (tix == 0) {
        mbar_arrive_expect_tx(bars + 8u * st, 2 * TB);
        tma_load_key_tile<HDP, ROWS>(maps, sK + st * TB, sV + st * TB, c.b * int(p.G.keys) + t * ROWS, c.g,
                                     bars + 8u * st);
      } else {
        mbar_arrive(bars + 8u * st);
      }
      continue;
    }
    // stage_rows's pieces, lean enough for 24 registers: the thread keeps one piece and walks the
    // rows r0, r0 + kStep, ..., whose swizzled places are kStep * 128 bytes apart.
    constexpr int kPieces = HDP / 8, kStep = kProducerThreads / kPieces;
    const int r0 = tix / kPieces, piece = tix % kPieces;
    const bool piece_ok = piece * 8 < int(p.G.hd);
    const uint32_t dst = st * TB + piece_offset(ROWS, r0, piece);
#pragma unroll 1
    for (int r = r0; r < ROWS; r += kStep) {
      const int64_t o = key_offset(c, t * ROWS + r);
      const bool ok = piece_ok && o >= 0;
      const int64_t at = ok ? o + piece * 8 : 0;
      const uint32_t d = dst + uint32_t(r - r0) * 128u;
      cp16(sK + d, p.k + at, ok);
      cp16(sV + d, p.v + at, ok);
    }
    mbar_arrive_on_copies(bars + 8u * st);
  }
  cp_commit();
  cp_wait<0>();  // no copy outlives its warp
}
// Consumer side: tile t has landed (and is visible to the async proxy); tile t is released.
template <int STAGES>
__device__ __forceinline__ void wait_tile(uint32_t bars, int t) {
  mbar_wait(bars + 8u * uint32_t(t % STAGES), uint32_t(t / STAGES) & 1u);
  fence_async_shared();
}
template <int STAGES>
__device__ __forceinline__ void release_tile(uint32_t bars, int t) {
  mbar_arrive(bars + 8u * uint32_t(STAGES + t % STAGES));
}

// What the kept rows of one warpgroup see: context keys below ctx_max (all of them below ctx_min)
// and draft keys in [dlo, dhi). any = false: no kept row (nothing to compute).
struct WgView {
  bool any;
  int ctx_max, ctx_min, dlo, dhi;
};
__device__ __forceinline__ WgView wg_view(const Params& p, const QueryCta& c, int wg) {
  WgView w{false, 0, INT_MAX, INT_MAX, 0};
  const int r0 = c.R0 + wg * kRows, r1 = min(r0 + kRows, p.NR);
  if (r0 >= r1) return w;
  const int S = int(p.G.S), bs = int(p.G.bs);
  const int32_t *anchors = p.anchors + int64_t(c.b) * p.G.N, *keep = p.keep + int64_t(c.b) * p.G.N;
  for (int a = r0 / p.rpk; a <= (r1 - 1) / p.rpk; ++a) {
    if (keep[a] == 0) continue;
    const int ctx = clamp_anchor(anchors[a], S), dlo = c.Amax + (a - c.a_first) * bs;
    w.any = true;
    w.ctx_max = max(w.ctx_max, ctx);
    w.ctx_min = min(w.ctx_min, ctx);
    w.dlo = min(w.dlo, dlo);
    w.dhi = max(w.dhi, dlo + bs);
  }
  return w;
}
// Tile t (of `width` keys) holds a key some kept row of the warpgroup sees.
__device__ __forceinline__ bool tile_active(const WgView& w, int t, int width = kRows) {
  const int v0 = t * width;
  return w.any && (v0 < w.ctx_max || (v0 + width > w.dlo && v0 < w.dhi));
}
// Every kept row of the warpgroup sees every key of tile t (context keys only): no mask.
__device__ __forceinline__ bool tile_full(const WgView& w, int t, int width = kRows) {
  return (t + 1) * width <= w.ctx_min;
}

// One of a thread's two rows: what it sees (nothing when dropped or past the rows) and where it is.
struct QueryRow {
  bool valid, kept;
  int ctx, dlo, dhi;  // sees virtual keys v < ctx and dlo <= v < dhi
  int64_t off, lse_index;
};
__device__ __forceinline__ QueryRow query_row_info(const Params& p, const QueryCta& c, int R) {
  QueryRow r{false, false, 0, 0, 0, -1, 0};
  if (R >= p.NR) return r;
  const int a = block_of(p, R);
  r.valid = true;
  r.kept = p.keep[int64_t(c.b) * p.G.N + a] != 0;
  if (r.kept) {
    r.ctx = clamp_anchor(p.anchors[int64_t(c.b) * p.G.N + a], int(p.G.S));
    r.dlo = c.Amax + (a - c.a_first) * int(p.G.bs);
    r.dhi = r.dlo + int(p.G.bs);
  }
  r.off = query_offset(p, c.b, c.g, R, &r.lse_index);
  return r;
}
__device__ __forceinline__ bool sees(const QueryRow& r, int v) {
  return (v < r.ctx) | ((v >= r.dlo) & (v < r.dhi));  // no short circuit: selects, not branches
}

// ---- Gradient output (dq, dk/dv) ----

// f32 pair p[i], p[i+1] += x, y in p's dtype (i even; rows hold hd % 8 == 0 elements).
__device__ __forceinline__ void add_pair(void* p, bool bf16, int64_t i, float x, float y) {
  if (bf16) {
    __nv_bfloat162* q = reinterpret_cast<__nv_bfloat162*>(static_cast<bf16_t*>(p) + i);
    const float2 old = __bfloat1622float2(*q);
    *q = __floats2bfloat162_rn(old.x + x, old.y + y);
  } else {
    float2* q = reinterpret_cast<float2*>(static_cast<float*>(p) + i);
    const float2 old = *q;
    *q = make_float2(old.x + x, old.y + y);
  }
}

// p[i], p[i+1] = 0 + x, 0 + y when fresh (the bits of adding to a zero-filled buffer; the old
// bytes are never read), else += as add_pair.
__device__ __forceinline__ void put_pair(void* p, bool bf16, bool fresh, int64_t i, float x, float y) {
  if (bf16) {
    __nv_bfloat162* q = reinterpret_cast<__nv_bfloat162*>(static_cast<bf16_t*>(p) + i);
    const float2 old = fresh ? make_float2(0.0f, 0.0f) : __bfloat1622float2(*q);
    *q = __floats2bfloat162_rn(__fadd_rn(old.x, x), __fadd_rn(old.y, y));
  } else {
    float2* q = reinterpret_cast<float2*>(static_cast<float*>(p) + i);
    const float2 old = fresh ? make_float2(0.0f, 0.0f) : *q;
    *q = make_float2(__fadd_rn(old.x, x), __fadd_rn(old.y, y));
  }
}

// ---- Launch helpers (host) ----

// The rules' view of the call: kernels/heuristics.h with the test seams' forcing, except the
// portable kernels' (a call that reaches these launchers chose the sm_90a kernels).
inline heuristics::AttentionForcing forcing() {
  heuristics::AttentionForcing f = test_seams().attention;
  f.portable = false;
  return f;
}
inline heuristics::AttentionForward forward_choice(const DflashAttentionDims& d, bool bf16) {
  return heuristics::attention_forward(device_traits(), attn::attention_shape(d), bf16, forcing());
}
inline heuristics::AttentionBackward backward_choice(const DflashAttentionDims& d, bool bf16, bool wants_dq) {
  return heuristics::attention_backward(device_traits(), attn::attention_shape(d), bf16, wants_dq, forcing());
}

inline Params base_params(const void* q, const void* k, const void* v, const int32_t* anchors,
                          const int32_t* keep, const DflashAttentionDims& d) {
  Params p{};
  p.q = static_cast<const bf16_t*>(q);
  p.k = static_cast<const bf16_t*>(k);
  p.v = static_cast<const bf16_t*>(v);
  p.anchors = anchors;
  p.keep = keep;
  p.G = attn::geometry(d);
  p.rpk = int(p.G.rows_per_kv);
  p.rpk_magic = div_magic(uint32_t(p.rpk));
  p.NR = int(p.G.N) * p.rpk;
  p.nct = (p.NR + kCtaRows - 1) / kCtaRows;
  p.nchunk = (p.NR + kRows - 1) / kRows;
  return p;
}

// ws_registers (warp-specialized kernels: their WsRegisters::kTotal): the kernel's launch allocation
// must hold what setmaxnreg hands out, else its consumers would wait forever; checked, not hung.
template <class Kernel, class... Extra>
void launch(Kernel kernel, unsigned grid, int smem, cudaStream_t s, const Params& p, const char* what,
            int threads = kThreads, int ws_registers = 0, const Extra&... extra) {
  attn::allow_smem(kernel, smem, what);
  if (ws_registers > 0) {
    cudaFuncAttributes fa{};
    if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess)
      throw std::runtime_error(std::string(what) + ": cannot read the kernel's attributes");
    if (fa.numRegs * threads < ws_registers)
      throw std::runtime_error(std::string(what) + ": compiled with " + std::to_string(fa.numRegs) +
                               " registers per thread, but its warpgroups' setmaxnreg counts need " +
                               std::to_string(ws_registers) + " in all (" + std::to_string(kWsLaunchRegisters) +
                               " per thread expected); it would hang: report the CUDA version");
  }
  kernel<<<grid, threads, smem, s>>>(p, extra...);
  check_launch(what);
}

// The dk/dv kernels (dflash_attention_dkdv_sm90.cu) in the mode c chooses; sm90::backward calls it
// with its filled-in p, fused (dk/dv's kernel also sums dq into p.dq_acc) where c says so and the
// scratch was given.
void launch_dkdv(Params p, cudaStream_t s, const heuristics::AttentionBackward& c, bool fused);
// Fills maps and returns true where k and v suit TMA for key tiles of `rows` (16-byte aligned; the
// shape's rule is kernels/heuristics.h's), else false (dflash_attention_tma_sm90.cu).
bool kv_tma_maps(const Params& p, int rows, KvMaps* maps);
// The same for dk/dv's chunks: q, dout, lse and delta 16-byte aligned.
bool dkdv_tma_maps(const Params& p, DkdvMaps* maps);

}  // namespace dflash::kernels::cuda::sm90
