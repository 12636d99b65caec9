// DFlash block-sparse attention on Hopper tensor cores (wgmma, sm_90a only): the forward, dq and
// dk/dv kernels that dflash_attention.cu and dflash_attention_backward.cu launch for bf16 tensors
// with head dim <= 128 when the kernel version is 2 (cuda_kernels.h). Same semantics as the v1
// kernels (kernels/cpu/attention.cpp, DFLASH.md "The attention mask") and the same determinism:
// every output element is written by one thread of one CTA, each sum runs in a fixed order, no
// float atomics.
//
// Rows. The query rows that kv head g serves are numbered R = a * rpk + rr (block a; rr = hq * bs
// + slot as in the v1 kernels; rpk = group * bs, the drafter's 4 * 16 = 64).
// Forward and dq: a CTA of two warpgroups takes 128 consecutive rows (the drafter's two blocks),
// 64 per warpgroup (wgmma's M). Both warpgroups walk one virtual key sequence: context keys
// 0 .. Amax-1 (Amax: the largest anchor among the CTA's kept blocks), then the draft keys of the
// CTA's blocks, in tiles of 64 keys staged once for both. A row sees virtual key v when v is below
// its anchor or is one of its own block's draft keys; a warpgroup skips tiles none of its rows
// sees. Sorted anchors (the data pipeline's) keep a CTA's blocks close, so little is masked or
// skipped; unsorted anchors stay correct, only slower.
// dk/dv: a CTA takes 128 keys, 64 per warpgroup (context keys, or draft keys), and walks the rows
// of the blocks between the first and the last that see them, in chunks of 64 rows staged once
// for both warpgroups; rows that do not see a key are masked (P = 0). For grids too small to fill
// the GPU, a split mode: 64 keys per CTA, the chunks dealt to the two warpgroups, their partial
// sums added in a fixed order at the end.
//
// Operands sit in 128-byte-swizzled shared tiles (dflash_attention_sm90.h), filled by cp.async
// (two or three stages deep); each thread waits for its own copies, fences them for the async
// proxy (fence.proxy.async) and meets the others at a barrier before any warpgroup reads the tile.
// A buffer is refilled only after a barrier that every reader reaches after waiting for its wgmma
// reads of it. Q and dO of the query-side kernels are held as register A fragments; P and dS go
// from the f32 accumulators to register A fragments. Every group of wgmmas is issued, committed
// and waited for in straight-line code, with the registers it uses pinned around it (see pin), so
// that ptxas keeps the wgmmas pipelined; ptxas -v reports no C751x serialization and no spills in
// the main loops.
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <string>

#include "kernels/cuda/dflash_attention.cuh"
#include "kernels/cuda/dflash_attention_sm90.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "dflash_attention_sm90.cu must be built for sm_90a only (-gencode=arch=compute_90a,code=sm_90a)"
#endif

namespace dflash::kernels::cuda::sm90 {
namespace {

using attn::Geometry;

constexpr int kThreads = 256;              // two warpgroups
constexpr int kRows = 64;                  // rows of every tile: a warpgroup's M, a key tile, a row chunk
constexpr int kCtaRows = 2 * kRows;        // query rows (forward, dq) or keys (dk/dv) of a CTA
constexpr int kStages = 3;                 // forward: K and V tiles; dq: K/V tile pairs; dk/dv: row chunks
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
};

// ---- PTX primitives ----

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// 16 bytes global -> shared, or 16 zero bytes when !ok (src must still be a valid address).
__device__ __forceinline__ void cp16(uint32_t dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp4(uint32_t dst, const void* src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's completed shared-memory writes visible to the async proxy (wgmma operands).
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins registers at this point of the program for the compiler (an empty volatile asm is never
// moved across another): after a wgmma wait, reads of the accumulators stay below it; before
// wgmma.fence, every write of an accumulator or an A fragment (and any copy the compiler needs to
// tie an asm operand) lands above the fence, as wgmma requires (CUTLASS's
// warpgroup_fence_operand). Without that, ptxas serializes every wgmma of the kernel (C7515).
template <int N>
__device__ __forceinline__ void pin(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void pin(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// wgmma m64nNk16, f32 += bf16 x bf16. Accumulator d[4j + 2i + e] of a thread (warp w of the
// warpgroup, lane = 4 gq + tq) is row 16w + gq + 8i, column 8j + 2tq + e, as for mma.sync m16n8.
// RS: A from registers (4 x bf16x2, the mma.sync m16n8k16 A layout), B from a descriptor; SS: both
// from descriptors. TA / TB: 0 = K-major, 1 = MN-major. scale_d = 0 ignores (overwrites) d.
template <int TB>
__device__ __forceinline__ void wgmma_rs_n32(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
}
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_n32(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, %16, %17, p, 1, 1, %19, %20;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
}
template <int TB>
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
}
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
}
template <int TB>
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
}
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
}

template <int N, int TB>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  if constexpr (N == 32) wgmma_rs_n32<TB>(d, a, desc_b, scale_d);
  else if constexpr (N == 64) wgmma_rs_n64<TB>(d, a, desc_b, scale_d);
  else wgmma_rs_n128<TB>(d, a, desc_b, scale_d);
}
template <int N, int TA, int TB>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  if constexpr (N == 32) wgmma_ss_n32<TA, TB>(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 64) wgmma_ss_n64<TA, TB>(d, desc_a, desc_b, scale_d);
  else wgmma_ss_n128<TA, TB>(d, desc_a, desc_b, scale_d);
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lower 16 bits) = lo
  return *reinterpret_cast<uint32_t*>(&v);
}
// The A fragment of k-step kk (columns 16kk..16kk+15) of an accumulator array (n8 blocks 2kk and
// 2kk+1): the accumulator layout of columns 2tq, 2tq+1 is the A layout of k 2tq, 2tq+1.
template <int NA>
__device__ __forceinline__ void a_frag(uint32_t (&r)[4], const float (&c)[NA], int kk) {
  r[0] = pack_bf16x2(c[8 * kk + 0], c[8 * kk + 1]);
  r[1] = pack_bf16x2(c[8 * kk + 2], c[8 * kk + 3]);
  r[2] = pack_bf16x2(c[8 * kk + 4], c[8 * kk + 5]);
  r[3] = pack_bf16x2(c[8 * kk + 6], c[8 * kk + 7]);
}
// The A fragment of rows m0..m0+15, k-step kk of a [64][HDP] tile (ldmatrix of the swizzled pieces).
__device__ __forceinline__ void load_a_frag(uint32_t (&r)[4], uint32_t tile, int m0, int kk, int lane) {
  const int row = m0 + (lane & 7) + ((lane >> 3) & 1) * 8, piece = 2 * kk + (lane >> 4);
  ldsm4(r, tile + piece_offset(kRows, row, piece));
}

// ---- Staging ----

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
// Tile t holds a key some kept row of the warpgroup sees.
__device__ __forceinline__ bool tile_active(const WgView& w, int t) {
  const int v0 = t * kRows;
  return w.any && (v0 < w.ctx_max || (v0 + kRows > w.dlo && v0 < w.dhi));
}
// Every kept row of the warpgroup sees every key of tile t (context keys only): no mask.
__device__ __forceinline__ bool tile_full(const WgView& w, int t) { return (t + 1) * kRows <= w.ctx_min; }

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

// ---- Forward ----

// Q [2 warpgroups], then kStages K tiles and kStages V tiles of [64][HDP], 1024-aligned.
template <int HDP>
constexpr int forward_smem_bytes() {
  return 1024 + int(tile_bytes(kRows, HDP)) * (2 + 2 * kStages);
}

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
template <int HDP>
__global__ void __launch_bounds__(kThreads, 1) forward_kernel(const Params p) {
  constexpr int KS = HDP / 16, NO = HDP / 2;
  constexpr uint32_t TB = tile_bytes(kRows, HDP);
  extern __shared__ unsigned char smem_raw[];
  const uint32_t sQ = (smem_u32(smem_raw) + 1023u) & ~1023u, sK = sQ + 2 * TB, sV = sK + kStages * TB;
  const Geometry& G = p.G;
  const int tid = int(threadIdx.x), wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int tq = lane & 3, hd = int(G.hd);
  const QueryCta c = query_cta(p);
  const WgView w = wg_view(p, c, wg);

  auto stage_k = [&](int t) {
    if (t < c.ntiles)
      stage_rows<HDP>(sK + uint32_t(t % kStages) * TB, p.k, 0, nullptr, tid, hd,
                      [&](int r) { return key_offset(c, t * kRows + r); });
  };
  auto stage_v = [&](int t) {
    if (t < c.ntiles)
      stage_rows<HDP>(sV + uint32_t(t % kStages) * TB, p.v, 0, nullptr, tid, hd,
                      [&](int r) { return key_offset(c, t * kRows + r); });
  };
#pragma unroll
  for (int h = 0; h < 2; ++h)
    stage_rows<HDP>(sQ + uint32_t(h) * TB, p.q, 0, nullptr, tid, hd, [&](int r) -> int64_t {
      const int R = c.R0 + h * kRows + r;
      int64_t li;
      return R < p.NR ? query_offset(p, c.b, c.g, R, &li) : -1;
    });
  stage_k(0);
  cp_commit();
  stage_k(1);
  stage_v(0);
  cp_commit();
  cp_wait<1>();  // Q and K(0)
  fence_async_shared();
  __syncthreads();

  const int wrow = c.R0 + wg * kRows + warp * 16 + (lane >> 2);
  const QueryRow rows[2] = {query_row_info(p, c, wrow), query_row_info(p, c, wrow + 8)};
  uint32_t qa[KS][4];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) load_a_frag(qa[kk], sQ + uint32_t(wg) * TB, warp * 16, kk, lane);

  const float sc = G.scale * kLog2e;
  float o[NO] = {}, s[32] = {};  // (64, HDP) output, unnormalised; (64, 64) scores, then P
  uint32_t pf[4][4] = {};        // P of the previous tile as A fragments (k-steps of 16 keys)
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // running max (log2 units), lane's sum
  float corr[2] = {1.0f, 1.0f};  // rescale of O that goes with the pending P V

  auto issue_s = [&](int t) {  // s = Q K(t)^T
    const uint32_t kt = sK + uint32_t(t % kStages) * TB;
    pin(s);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) mma_rs<64, 0>(s, qa[kk], kmajor_desc(kt, kRows, 0, kk), kk > 0 ? 1 : 0);
    wg_commit();
  };
  auto issue_pv = [&](int t) {  // o = o * corr + P(t) V(t)
#pragma unroll
    for (int j = 0; j < HDP / 8; ++j)
#pragma unroll
      for (int i = 0; i < 2; ++i) o[4 * j + 2 * i] *= corr[i], o[4 * j + 2 * i + 1] *= corr[i];
    const uint32_t vt = sV + uint32_t(t % kStages) * TB;
    pin(o);
    pin(pf);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) mma_rs<HDP, 1>(o, pf[kk], mnmajor_desc(vt, kRows, 0, kk), 1);
    wg_commit();
  };
  auto softmax = [&](int t) {  // s = P(t) (f32), corr = the rescale for tile t; m, l updated
    if (!tile_full(w, t)) {
      const int v0 = t * kRows + 2 * tq;
#pragma unroll
      for (int j = 0; j < 8; ++j)
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
      for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * i], s[4 * j + 2 * i + 1]));
      const float mnew = fmaxf(m[i], attn::quad_max(mx) * sc);  // sc > 0: max(s * sc) = max(s) * sc
      const float mb = mnew == -INFINITY ? 0.0f : mnew;         // no key seen yet: P = 0, corr = 0
      corr[i] = attn::exp2_ftz(m[i] - mb);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j)
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
    for (int kk = 0; kk < 4; ++kk) a_frag(pf[kk], s, kk);
  };

  bool prev = false;  // tile t-1 was active: P(t-1) V(t-1) is due
  for (int t = 0; t <= c.ntiles; ++t) {
    cp_wait<1>();  // K(t), V(t-1) landed (this thread's copies)
    fence_async_shared();
    __syncthreads();  // everyone's copies landed; every warpgroup is done with K(t-1), V(t-2)
    stage_k(t + 2);
    stage_v(t + 1);
    cp_commit();
    const bool cur = t < c.ntiles && tile_active(w, t);
    if (cur && prev) {
      issue_s(t);
      issue_pv(t - 1);  // with corr of tile t-1 (softmax(t) below replaces it)
      wg_wait<1>();  // S(t) done; P V(t-1) may still run
      pin(s);
      softmax(t);
      wg_wait<0>();  // P V(t-1) done: its A fragments may be rewritten
      pin(o);
      pin(pf);
      to_fragments();
    } else if (cur) {
      issue_s(t);
      wg_wait<0>();
      pin(s);
      softmax(t);
      to_fragments();
    } else if (prev) {
      issue_pv(t - 1);
      wg_wait<0>();
      pin(o);
      pin(pf);
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

// ---- Backward: dq ----

// Q, dO [2 warpgroups], then kDqStages pairs of K and V tiles, of [64][HDP].
constexpr int kDqStages = 4;
template <int HDP>
constexpr int dq_smem_bytes() {
  return 1024 + int(tile_bytes(kRows, HDP)) * (4 + 2 * kDqStages);
}

// The query side as in the forward. Per warpgroup, the key tiles it sees in halves of 32 keys (to
// keep the accumulators in registers), in FlashAttention-3's order: half u issues S = Q K^T and
// dP = dO V^T (wgmma, Q and dO as register fragments) and then dq_acc += dS(u-1) K(u-1) for the
// previous half, waits for S and dP only, computes P = exp2(S * scale * log2e - lse * log2e) and
// dS = P (dP - D) while dS(u-1) K(u-1) runs, then waits for it and writes dS(u) into the A
// fragments it read. Each half's two shapes (a product pending or not) are straight-line code.
// Loads run two tiles ahead into kDqStages = 4 buffers, so the previous tile's K is still there
// for its pending product; a pending product is finished before a tile the warpgroup skips (whose
// barrier may reuse older buffers) and at the end. dq += scale * dq_acc, each element by one
// thread.
template <int HDP>
__global__ void __launch_bounds__(kThreads, 1) dq_kernel(const Params p) {
  constexpr int KS = HDP / 16, NO = HDP / 2;
  constexpr uint32_t TB = tile_bytes(kRows, HDP);
  extern __shared__ unsigned char smem_raw[];
  const uint32_t sQ = (smem_u32(smem_raw) + 1023u) & ~1023u, sO = sQ + 2 * TB, sK = sO + 2 * TB,
                 sV = sK + kDqStages * TB;
  const Geometry& G = p.G;
  const int tid = int(threadIdx.x), wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int gq = lane >> 2, tq = lane & 3, hd = int(G.hd);
  const QueryCta c = query_cta(p);
  const WgView w = wg_view(p, c, wg);

  auto stage_kv = [&](int t) {
    if (t < c.ntiles) {
      const uint32_t at = uint32_t(t % kDqStages) * TB;
      stage_rows<HDP>(sK + at, p.k, sV + at, p.v, tid, hd, [&](int r) { return key_offset(c, t * kRows + r); });
    }
  };
#pragma unroll
  for (int h = 0; h < 2; ++h)
    stage_rows<HDP>(sQ + uint32_t(h) * TB, p.q, sO + uint32_t(h) * TB, p.dout, tid, hd, [&](int r) -> int64_t {
      const int R = c.R0 + h * kRows + r;
      int64_t li;
      return R < p.NR ? query_offset(p, c.b, c.g, R, &li) : -1;
    });
  stage_kv(0);
  cp_commit();
  stage_kv(1);
  cp_commit();
  cp_wait<1>();
  fence_async_shared();
  __syncthreads();

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
    pin(s);
    pin(dp);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) mma_rs<32, 0>(s, qa[kk], kmajor_desc(kt, kRows, row0, kk), kk > 0 ? 1 : 0);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) mma_rs<32, 0>(dp, oa[kk], kmajor_desc(vt, kRows, row0, kk), kk > 0 ? 1 : 0);
    wg_commit();
  };
  auto issue_dq = [&] {  // dq_acc += dS K for the pending half
    pin(dq);
    pin(da);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) mma_rs<HDP, 1>(dq, da[kk], mnmajor_desc(pk, kRows, prow0, kk), 1);
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
  for (int t = 0; t < c.ntiles; ++t) {
    cp_wait<1>();  // tile t landed (this thread's copies)
    fence_async_shared();
    __syncthreads();  // everyone's copies landed; every warpgroup is done with tile t-2
    stage_kv(t + 2);  // into tile t-2's buffer
    cp_commit();
    if (!tile_active(w, t)) {
      if (pending) {  // its K tile may be refilled two barriers on
        issue_dq();
        wg_wait<0>();
        pin(dq);
        pin(da);
        pending = false;
      }
      continue;
    }
    const uint32_t kt = sK + uint32_t(t % kDqStages) * TB, vt = sV + uint32_t(t % kDqStages) * TB;
    const bool full = tile_full(w, t);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (pending) {
        issue_sdp(kt, vt, 32 * h);
        issue_dq();
        wg_wait<1>();  // S and dP done; dS(u-1) K(u-1) may still run
        pin(s);
        pin(dp);
        elementwise(t * kRows + 32 * h, full);
        wg_wait<0>();  // dS(u-1) K(u-1) done: its fragments may be rewritten
        pin(dq);
        pin(da);
      } else {
        issue_sdp(kt, vt, 32 * h);
        wg_wait<0>();
        pin(s);
        pin(dp);
        elementwise(t * kRows + 32 * h, full);
      }
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
    if (!r.kept) continue;
#pragma unroll
    for (int j = 0; j < HDP / 8; ++j) {
      const int col = 8 * j + 2 * tq;
      if (col >= hd) break;
      add_pair(p.dq, p.dq_bf16, r.off + col, G.scale * dq[4 * j + 2 * i], G.scale * dq[4 * j + 2 * i + 1]);
    }
  }
}

// ---- Backward: dk, dv ----

// Two modes. Shared (SPLIT = false): a CTA owns 128 keys, 64 per warpgroup, and both warpgroups
// use each chunk of 64 query rows, staged once (one pipeline, kStages deep). Split (SPLIT = true,
// for grids too small to fill the GPU, where the keys seen by every block dominate): a CTA owns 64
// keys, shared by both warpgroups, and warpgroup w takes chunks w, w+2, ... through its own
// pipeline (2 stages, its own barrier); at the end the two partial sums are added in a fixed order
// (warpgroup 0's, then warpgroup 1's) through shared memory.
template <bool SPLIT>
struct DkdvMode {
  static constexpr int kKeys = SPLIT ? kRows : kCtaRows;  // keys per CTA
  static constexpr int kKeyTiles = kKeys / kRows;
  static constexpr int kPipes = SPLIT ? 2 : 1;       // chunk pipelines
  static constexpr int kPipeThreads = kThreads / kPipes;
  static constexpr int kDepth = SPLIT ? 2 : kStages;  // stages per pipeline
  static constexpr int kAhead = kDepth - 1;           // chunks in flight ahead of the one computed
};

// K, V [key tiles], then per pipeline kDepth pairs of Q and dO chunks, of [64][HDP]; then per
// pipeline and stage the chunk rows' lse, D, anchor and keep (4 x 64 words).
template <int HDP, bool SPLIT>
constexpr int dkdv_smem_bytes() {
  using M = DkdvMode<SPLIT>;
  return 1024 + int(tile_bytes(kRows, HDP)) * (2 * M::kKeyTiles + 2 * M::kPipes * M::kDepth) +
         M::kPipes * M::kDepth * 4 * kRows * 4;
}

// Grid: B * nkv * nctx context CTAs (key range 0 first: nearly every block sees it), then
// B * nkv * ndraft draft CTAs, of kKeys keys each. The CTA walks the rows [first * rpk,
// (last + 1) * rpk) of the first and last kept blocks that see any of its keys (context key k:
// anchor > k; draft key: its own block), in chunks of 64 rows. Per chunk and warpgroup: S^T =
// K Q^T and dP^T = V dO^T (wgmma, K and V as shared A operands), P^T = exp2(S^T * scale * log2e -
// lse * log2e) where the row sees the key, else 0; dS^T = P^T (dP^T - D); dV += P^T dO and dK +=
// dS^T Q (P^T, dS^T as register fragments, dO and Q read MN-major). A chunk none of whose rows
// sees the warpgroup's keys is skipped, one that sees them all is not masked. At the end dv += dV
// and dk += scale * dK, each element by one thread.
template <int HDP, bool SPLIT>
__global__ void __launch_bounds__(kThreads, 1) dkdv_kernel(const Params p) {
  using M = DkdvMode<SPLIT>;
  constexpr int NO = HDP / 2, KS = HDP / 16;
  constexpr uint32_t TB = tile_bytes(kRows, HDP);
  extern __shared__ unsigned char smem_raw[];
  __shared__ int s_first, s_last;
  const uint32_t raw = smem_u32(smem_raw), sK = (raw + 1023u) & ~1023u, sV = sK + M::kKeyTiles * TB,
                 sPipes = sV + M::kKeyTiles * TB, sMeta = sPipes + M::kPipes * M::kDepth * 2 * TB;
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
  const bool ctx = bid < per * p.nctx;
  if (!ctx) bid -= per * p.nctx;
  const int range = bid / per, b = (bid % per) / int(G.nkv), g = (bid % per) % int(G.nkv);
  const int key0 = ctx ? range * M::kKeys : S + range * M::kKeys, kend = ctx ? S : S + int(G.T);
  const int32_t *anchors = p.anchors + int64_t(b) * N, *keep = p.keep + int64_t(b) * N;

  // The first and last kept blocks that see a key of [key0, key0 + kKeys): integer min and max,
  // so the answer does not depend on the order of the atomics.
  if (tid == 0) s_first = N, s_last = -1;
  __syncthreads();
  if (ctx) {
    for (int a = tid; a < N; a += kThreads)
      if (keep[a] != 0 && clamp_anchor(anchors[a], S) > key0) atomicMin(&s_first, a), atomicMax(&s_last, a);
  } else {
    const int a_lo = (key0 - S) / bs, a_hi = min(N - 1, (key0 - S + M::kKeys - 1) / bs);
    for (int a = a_lo + tid; a <= a_hi; a += kThreads)
      if (keep[a] != 0) atomicMin(&s_first, a), atomicMax(&s_last, a);
  }
  __syncthreads();
  const int first = s_first, last = s_last;
  if (first > last) return;  // no row sees these keys: their gradients get nothing
  const int Rb = first * p.rpk, Re = (last + 1) * p.rpk, nch = (Re - Rb + kRows - 1) / kRows;
  // This pipeline's chunks: i = 0 .. nloc-1 is chunk ch(i).
  const int nloc = SPLIT ? (nch - pipe + 1) / 2 : nch;
  auto chunk_of = [&](int i) { return SPLIT ? 2 * i + pipe : i; };

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
  stage_chunk(0);
  cp_commit();  // with K and V
#pragma unroll
  for (int i = 1; i < M::kAhead; ++i) {
    stage_chunk(i);
    cp_commit();
  }
  cp_wait<M::kAhead - 1>();  // K, V and chunk 0 of every pipeline
  fence_async_shared();
  __syncthreads();

  const float sc = G.scale * kLog2e;
  const int wk0 = key0 + (SPLIT ? 0 : wg * kRows);                    // the warpgroup's first key
  const int kidx[2] = {wk0 + warp * 16 + gq, wk0 + warp * 16 + gq + 8};  // the thread's two keys
  const uint32_t kt = sK + uint32_t(SPLIT ? 0 : wg) * TB, vt = sV + uint32_t(SPLIT ? 0 : wg) * TB;
  float dv[NO] = {}, dk[NO] = {};       // (64 keys, HDP): sum of P^T dO, sum of dS^T Q
  float st[32] = {}, dpt[32] = {};      // (64 keys, 64 rows): S^T then P^T; dP^T then dS^T
  for (int i = 0; i < nloc; ++i) {
    cp_wait<M::kAhead - 1>();  // chunk i landed (this thread's copies)
    fence_async_shared();
    if (SPLIT) wg_barrier(wg);  // the pipeline's copies landed; it is done with chunk i-1
    else __syncthreads();
    stage_chunk(i + M::kAhead);
    cp_commit();
    const int stg = i % M::kDepth, ch = chunk_of(i);
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
    if (!__any_sync(kFull, (hi0 > wk0 && lo0 < wk1) || (hi1 > wk0 && lo1 < wk1))) continue;
    const bool full = __all_sync(kFull, lo0 <= wk0 && hi0 >= wk1 && lo1 <= wk0 && hi1 >= wk1);
    const uint32_t qt = sChunks + uint32_t(2 * stg) * TB, ot = sChunks + uint32_t(2 * stg + 1) * TB;
    pin(st);
    pin(dpt);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
      mma_ss<64, 0, 0>(st, kmajor_desc(kt, kRows, 0, kk), kmajor_desc(qt, kRows, 0, kk), kk > 0 ? 1 : 0);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
      mma_ss<64, 0, 0>(dpt, kmajor_desc(vt, kRows, 0, kk), kmajor_desc(ot, kRows, 0, kk), kk > 0 ? 1 : 0);
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
    pin(dv);
    pin(dk);
    pin(pa);
    pin(da);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) mma_rs<HDP, 1>(dv, pa[kk], mnmajor_desc(ot, kRows, 0, kk), 1);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) mma_rs<HDP, 1>(dk, da[kk], mnmajor_desc(qt, kRows, 0, kk), 1);
    wg_commit();
    wg_wait<0>();  // chunk i's buffers may be refilled after the next barrier
    pin(dv);
    pin(dk);
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
      if (p.dv != nullptr) add_pair(p.dv, p.dv_bf16, base + col, dv[4 * j + 2 * i2], dv[4 * j + 2 * i2 + 1]);
      if (p.dk != nullptr)
        add_pair(p.dk, p.dk_bf16, base + col, G.scale * dk[4 * j + 2 * i2], G.scale * dk[4 * j + 2 * i2 + 1]);
    }
  }
}

// ---- Launchers ----

// sm_90a machine code runs on compute capability 9.0 only; the SM count sizes the dk/dv grid.
// Both asked once per device.
struct DeviceInfo {
  bool sm90;
  int sms;
};
DeviceInfo device_info() {
  static std::atomic<int> known[64];  // 0: not asked yet, else 1 + 2 * sms + (sm90 ? 1 : 0)
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return {false, 0};
  auto ask = [dev] {
    int major = 0, minor = 0, sms = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 1;
    return 1 + 2 * sms + (major == 9 && minor == 0 ? 1 : 0);
  };
  int v = dev >= 0 && dev < 64 ? known[dev].load(std::memory_order_relaxed) : 0;
  if (v == 0) {
    v = ask();
    if (dev >= 0 && dev < 64) known[dev].store(v, std::memory_order_relaxed);
  }
  return {((v - 1) & 1) != 0, (v - 1) / 2};
}

Params base_params(const void* q, const void* k, const void* v, const int32_t* anchors, const int32_t* keep,
                   const DflashAttentionDims& d) {
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
  return p;
}

template <class Kernel>
void launch(Kernel kernel, unsigned grid, int smem, cudaStream_t s, const Params& p, const char* what) {
  attn::allow_smem(kernel, smem, what);
  kernel<<<grid, kThreads, smem, s>>>(p);
  check_launch(what);
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
  if (p.G.hd <= 64) launch(forward_kernel<64>, grid, forward_smem_bytes<64>(), s, p, "dflash_attention_forward (sm90)");
  else launch(forward_kernel<128>, grid, forward_smem_bytes<128>(), s, p, "dflash_attention_forward (sm90)");
  return true;
}

bool backward(const DflashAttentionBackward& a, void* stream) {
  if (!applies(a.bf16 && a.dout_bf16, a.d.hd)) return false;
  Params p = base_params(a.q, a.k, a.v, a.anchors, a.keep, a.d);
  p.dout = static_cast<const bf16_t*>(a.dout);
  p.lse_in = a.lse;
  p.delta = a.delta;
  p.dq = a.dq, p.dk = a.dk, p.dv = a.dv;
  p.dq_bf16 = a.dq_bf16, p.dk_bf16 = a.dk_bf16, p.dv_bf16 = a.dv_bf16;
  const Geometry& G = p.G;
  cudaStream_t s = as_stream(stream);
  const int64_t rows = G.B * G.T * G.nh;
  delta_kernel<<<blocks_for((rows + 1) / 2, kDeltaThreads / 32), kDeltaThreads, 0, s>>>(
      static_cast<const bf16_t*>(a.out), p.dout, a.delta, rows, G.T, G.nh, int(G.hd));
  check_launch("dflash_attention_backward (sm90): delta");
  if (p.dq != nullptr) {
    const unsigned grid = unsigned(G.B * G.nkv * p.nct);
    if (G.hd <= 64) launch(dq_kernel<64>, grid, dq_smem_bytes<64>(), s, p, "dflash_attention_backward (sm90): dq");
    else launch(dq_kernel<128>, grid, dq_smem_bytes<128>(), s, p, "dflash_attention_backward (sm90): dq");
  }
  if (p.dk != nullptr || p.dv != nullptr) {
    // The shared mode (128 keys per CTA, chunks staged once for both warpgroups) moves fewer bytes
    // per product; the split mode (64 keys per CTA, the chunks dealt to the two warpgroups) halves
    // the longest CTA. Split where the shared mode's context CTAs, of which the first sees nearly
    // every block, would not fill the GPU one and a half times (e.g. 1024:128 and 2048:256 with
    // 8 kv heads on 132 SMs, not 4096:512).
    // DFLASH_ATTENTION_DKDV=split|shared (read at every launch; a tuning knob) overrides.
    const int64_t shared_ctx = G.B * G.nkv * ((G.S + kCtaRows - 1) / kCtaRows);
    const char* force = std::getenv("DFLASH_ATTENTION_DKDV");
    const std::string mode = force ? force : "";
    const bool split = mode == "split" || (mode != "shared" && 2 * shared_ctx < 3 * int64_t(device_info().sms));
    const int keys = split ? DkdvMode<true>::kKeys : DkdvMode<false>::kKeys;
    p.nctx = int((G.S + keys - 1) / keys);
    p.ndraft = int((G.T + keys - 1) / keys);
    const unsigned grid = unsigned(G.B * G.nkv * (p.nctx + p.ndraft));
    const char* what = "dflash_attention_backward (sm90): dk/dv";
    if (split) {
      if (G.hd <= 64) launch(dkdv_kernel<64, true>, grid, dkdv_smem_bytes<64, true>(), s, p, what);
      else launch(dkdv_kernel<128, true>, grid, dkdv_smem_bytes<128, true>(), s, p, what);
    } else {
      if (G.hd <= 64) launch(dkdv_kernel<64, false>, grid, dkdv_smem_bytes<64, false>(), s, p, what);
      else launch(dkdv_kernel<128, false>, grid, dkdv_smem_bytes<128, false>(), s, p, what);
    }
  }
  return true;
}

}  // namespace dflash::kernels::cuda::sm90
