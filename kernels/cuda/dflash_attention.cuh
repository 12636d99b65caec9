// Device helpers shared by the DFlash attention kernels (dflash_attention.cu and
// dflash_attention_backward.cu): bf16 tensor-core MMA (mma.sync m16n8k16, f32 accumulation),
// ldmatrix fragment loads, cp.async, and the staging of rows into shared-memory tiles.
//
// Shared-memory tiles are [NP][rows][HDP + 8] bf16. NP = 1: bf16 tensors (or f32 rounded to
// bf16). NP = 2: f32 tensors split into hi = bf16(x) and lo = bf16(x - hi); a product then takes
// three MMAs (lo*hi + hi*lo + hi*hi), which keeps ~2^-17 relative accuracy per operand. The +8
// columns of padding keep every row 16-byte aligned and put the 8 rows an ldmatrix reads on
// distinct banks. Columns past hd and rows without a source are zero.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/test_seams.h"
#include "kernels/heuristics.h"

namespace dflash::kernels::cuda::attn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kMaxWarps = 4;  // 4 warps of 16 rows (queries, or keys in the dk/dv kernel)
constexpr int kMaxThreads = 32 * kMaxWarps;
constexpr int kCtaRows = 16 * kMaxWarps;
constexpr int kMaxSmem = 227 * 1024;  // opt-in dynamic shared memory per block on sm_90

template <int HDP>
constexpr int row_stride() { return HDP + 8; }  // bf16 elements per shared-memory tile row

// Tile sizes chosen so that the kernels' shared memory fits 9.0's (asserted where they are used).
// Forward and dq: KT keys per tile; dk/dv: RC query rows per chunk. dq takes half its KT where the
// device has less shared memory (kernels/heuristics.h, portable_dq_keys).
template <int HDP>
constexpr int forward_key_tile() { return HDP <= 128 ? 64 : 32; }
template <int HDP, int NP>
constexpr int dq_key_tile() { return HDP <= 128 ? 64 : (NP == 1 ? 32 : 16); }
template <int HDP, int NP>
constexpr int dkdv_row_chunk() { return HDP <= 64 ? 64 : (HDP <= 128 || NP == 1 ? 32 : 16); }
// 16-row m tiles per forward warp: 2 (32 query rows, FlashAttention-2's shape: twice the MMAs
// per K/V fragment read from shared memory) where the accumulators fit in registers (bf16, hd
// <= 128), else 1.
template <int HDP, int NP>
constexpr int forward_m_tiles() { return NP == 1 && HDP <= 128 ? 2 : 1; }

// Per-call dimensions, with derived sizes, shared by every kernel.
struct Geometry {
  int64_t B, S, N, bs, nh, nkv, hd, T, keys, group, rows_per_kv;  // rows_per_kv = group * bs
  float scale;
  uint64_t bs_magic;  // ceil(2^32 / bs): x / bs = (x * bs_magic) >> 32 for 0 <= x < 2^26
};
inline Geometry geometry(const DflashAttentionDims& d) {
  const int64_t T = d.N * d.bs, group = d.nh / d.nkv;
  const uint64_t magic = d.bs > 0 ? ((uint64_t(1) << 32) + uint64_t(d.bs) - 1) / uint64_t(d.bs) : 0;
  return {d.B, d.S, d.N, d.bs, d.nh, d.nkv, d.hd, T, d.S + T, group, group * d.bs, d.scale, magic};
}

// Warps of the query-block kernels (forward, dq): warp_rows query rows each, at most kCtaRows
// rows in all, as many as the group*bs query rows of one kv head need.
inline int query_warps(int64_t rows_per_kv, int warp_rows) {
  const int64_t w = (rows_per_kv + warp_rows - 1) / warp_rows, most = kCtaRows / warp_rows;
  return int(w < 1 ? 1 : (w > most ? most : w));
}

// Whether a call tries the sm_90a kernels first (they decline, launching nothing, where they do
// not apply): `version` 2 asks for them, 1 for the portable mma.sync kernels, 0 leaves the choice
// to kernels/heuristics.h (the sm_90a kernels wherever they apply; a test seam may force the
// portable ones). Another version is an error that names the choices.
inline bool tries_sm90(int version) {
  if (version < 0 || version > 2)
    throw std::runtime_error("dflash attention: kernel version " + std::to_string(version) +
                             " does not exist; use 0 (the heuristics' choice), 1 (mma.sync) or 2 (wgmma, sm_90)");
  return version == 2 || (version == 0 && !test_seams().attention.portable);
}

inline heuristics::AttentionShape attention_shape(const DflashAttentionDims& d) {
  return {d.B, d.S, d.N, d.bs, d.nh, d.nkv, d.hd};
}

// Lets kernel use `bytes` of dynamic shared memory (set at every launch: the attribute is per device).
template <class Kernel>
void allow_smem(Kernel kernel, int bytes, const char* what) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": cannot allow " + std::to_string(bytes) +
                             " bytes of shared memory a CTA (more than this GPU allows: kernels/heuristics.h, "
                             "smem_per_block; bf16 with head_dim up to 128 fits every GPU of compute capability 8.0 "
                             "on): " + cudaGetErrorString(e));
}

__device__ __forceinline__ int64_t clamp_anchor(int32_t raw, int64_t S) {
  return raw < 0 ? 0 : (raw > S ? S : int64_t(raw));
}

// The query row rr in [0, rows_per_kv) of block a that kv head g serves: head g*group + rr/bs,
// slot rr % bs. Returns the row index into q viewed as [B*T*nh, hd] and sets the lse index.
// rr < rows_per_kv = group * bs < 2^26, so the division by bs is the exact multiply-shift.
__device__ __forceinline__ int64_t query_row(const Geometry& G, int64_t b, int64_t a, int64_t g, int64_t rr,
                                             int64_t* lse_index) {
  const int64_t hq = int64_t((uint64_t(rr) * G.bs_magic) >> 32), slot = rr - hq * G.bs;
  const int64_t h = g * G.group + hq, t = a * G.bs + slot;
  *lse_index = (b * G.nh + h) * G.T + t;
  return (b * G.T + t) * G.nh + h;
}

// ---- Tensor-core primitives ----

// c += a * b for one m16n8k16 tile (a: 4 regs of bf16x2, b: 2 regs of bf16x2).
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a * b over the planes: lo*hi and hi*lo first (the small terms), then hi*hi.
template <int NP>
__device__ __forceinline__ void mma_planes(float (&c)[4], const uint32_t (&a)[NP][4], const uint32_t (&b)[NP][4],
                                           int half) {
  if constexpr (NP == 2) {
    mma(c, a[1], b[0][2 * half], b[0][2 * half + 1]);
    mma(c, a[0], b[1][2 * half], b[1][2 * half + 1]);
  }
  mma(c, a[0], b[0][2 * half], b[0][2 * half + 1]);
}

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p))
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const bf16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p))
               : "memory");
}

// Fragment loads from a tile plane with row stride LD (elements). lane = threadIdx.x & 31.
// A (16x16) at rows m0.., cols k0.. of a row-major [m][k] tile.
template <int LD>
__device__ __forceinline__ void load_a(uint32_t (&r)[4], const bf16_t* tile, int m0, int k0, int lane) {
  ldsm_x4(r, tile + (m0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + k0 + (lane >> 4) * 8);
}
// B (16x8) for the n blocks n0 and n0+8 (r[0..1] and r[2..3]) at k0, from a tile stored [n][k]
// (B = tile^T, e.g. K for Q K^T).
template <int LD>
__device__ __forceinline__ void load_b_nk(uint32_t (&r)[4], const bf16_t* tile, int n0, int k0, int lane) {
  ldsm_x4(r, tile + (n0 + (lane & 7) + (lane >> 4) * 8) * LD + k0 + ((lane >> 3) & 1) * 8);
}
// The same from a tile stored [k][n] (B = tile, e.g. V for P V), through the transposing load.
template <int LD>
__device__ __forceinline__ void load_b_kn(uint32_t (&r)[4], const bf16_t* tile, int k0, int n0, int lane) {
  ldsm_x4_trans(r, tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + n0 + (lane >> 4) * 8);
}

// Both planes of an A or B fragment; plane p of the tile starts at tile + p * plane_stride.
template <int NP, int LD>
__device__ __forceinline__ void load_a_planes(uint32_t (&r)[NP][4], const bf16_t* tile, int plane_stride, int m0,
                                              int k0, int lane) {
#pragma unroll
  for (int p = 0; p < NP; ++p) load_a<LD>(r[p], tile + p * plane_stride, m0, k0, lane);
}
template <int NP, int LD>
__device__ __forceinline__ void load_b_nk_planes(uint32_t (&r)[NP][4], const bf16_t* tile, int plane_stride, int n0,
                                                 int k0, int lane) {
#pragma unroll
  for (int p = 0; p < NP; ++p) load_b_nk<LD>(r[p], tile + p * plane_stride, n0, k0, lane);
}
template <int NP, int LD>
__device__ __forceinline__ void load_b_kn_planes(uint32_t (&r)[NP][4], const bf16_t* tile, int plane_stride, int k0,
                                                 int n0, int lane) {
#pragma unroll
  for (int p = 0; p < NP; ++p) load_b_kn<LD>(r[p], tile + p * plane_stride, k0, n0, lane);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lower 16 bits) = lo
  return *reinterpret_cast<uint32_t*>(&v);
}
// The bf16 planes of the f32 pair (x, y): plane 0 = rounded, plane 1 = the rounding residue.
template <int NP>
__device__ __forceinline__ void split_pair(float x, float y, uint32_t* plane0, uint32_t* plane1) {
  __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  *plane0 = *reinterpret_cast<uint32_t*>(&h);
  if constexpr (NP == 2) *plane1 = pack_bf16(x - __low2float(h), y - __high2float(h));
}

// An A fragment (16 rows x 16 k) built from two accumulator tiles c0 (k 0..7) and c1 (k 8..15)
// of an m16n8 product: the accumulator layout of columns 2t, 2t+1 is the A layout of k 2t, 2t+1.
template <int NP>
__device__ __forceinline__ void a_from_acc(uint32_t (&r)[NP][4], const float (&c0)[4], const float (&c1)[4]) {
  split_pair<NP>(c0[0], c0[1], &r[0][0], &r[NP - 1][0]);
  split_pair<NP>(c0[2], c0[3], &r[0][1], &r[NP - 1][1]);
  split_pair<NP>(c1[0], c1[1], &r[0][2], &r[NP - 1][2]);
  split_pair<NP>(c1[2], c1[3], &r[0][3], &r[NP - 1][3]);
}

using cuda::exp2_ftz;  // common.cuh; the kernels call it attn::exp2_ftz

// Max and sum over the 4 lanes of a quad (the lanes holding one accumulator row), fixed order.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- Asynchronous copies ----

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_address(dst)), "l"(src) : "memory");
}
// The same with src_bytes in {0, 16}: 0 reads nothing and writes 16 zero bytes (src must still be
// a valid address).
__device__ __forceinline__ void cp_async16_zfill(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most Pending of this thread's committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// One 16-byte piece (8 elements at column c of the row at element offset off, or zeros when
// off < 0) of a bf16 or f32 source into the tile planes at d. bf16 sources go through cp.async
// when NP = 1 (complete after cp_async_wait + __syncthreads); every other case converts through
// registers (complete after __syncthreads).
template <int NP>
__device__ __forceinline__ void stage_piece(bf16_t* d, int plane_stride, const void* src, bool src_bf16, int64_t off,
                                            int c) {
  const uint4 zero = make_uint4(0, 0, 0, 0);
  if (NP == 1 && src_bf16) {
    const bf16_t* s = static_cast<const bf16_t*>(src) + (off < 0 ? 0 : off + c);
    cp_async16_zfill(d, s, off < 0 ? 0 : 16);
  } else if (off < 0) {
#pragma unroll
    for (int p = 0; p < NP; ++p) *reinterpret_cast<uint4*>(d + p * plane_stride) = zero;
  } else if (src_bf16) {  // NP = 2: hi = the value, lo = 0
    *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(static_cast<const bf16_t*>(src) + off + c);
    *reinterpret_cast<uint4*>(d + plane_stride) = zero;
  } else {
    const float4* s = reinterpret_cast<const float4*>(static_cast<const float*>(src) + off + c);
    const float4 x0 = s[0], x1 = s[1];
    uint4 hi, lo;
    split_pair<NP>(x0.x, x0.y, &hi.x, &lo.x);
    split_pair<NP>(x0.z, x0.w, &hi.y, &lo.y);
    split_pair<NP>(x1.x, x1.y, &hi.z, &lo.z);
    split_pair<NP>(x1.z, x1.w, &hi.w, &lo.w);
    *reinterpret_cast<uint4*>(d) = hi;
    if constexpr (NP == 2) *reinterpret_cast<uint4*>(d + plane_stride) = lo;
  }
}

// Copies `rows` rows of hd elements into the tile dst [NP][rows][LD] (plane stride
// plane_stride). row_offset(r) is the element offset of row r in src, or -1 for a zero row;
// columns past hd are zero. Each thread owns one 16-byte column piece and every
// (blockDim.x / (HDP / 8))-th row, so row_offset runs once per row and thread. Needs hd % 8 == 0,
// 16-byte aligned rows and blockDim.x a multiple of 32.
template <int HDP, int NP, class RowOffset>
__device__ __forceinline__ void stage_rows(bf16_t* dst, int plane_stride, int rows, const void* src, bool src_bf16,
                                           int64_t hd, RowOffset row_offset) {
  constexpr int LD = row_stride<HDP>(), kPieces = HDP / 8;
  const int c = (int(threadIdx.x) % kPieces) * 8, step = int(blockDim.x) / kPieces;
  const bool col = c < hd;
  if (NP == 1 && src_bf16) {  // cp.async only: no dtype test per row
    const bf16_t* base = static_cast<const bf16_t*>(src);
    for (int r = int(threadIdx.x) / kPieces; r < rows; r += step) {
      const int64_t off = col ? row_offset(r) : -1;
      cp_async16_zfill(dst + r * LD + c, base + (off < 0 ? 0 : off + c), off < 0 ? 0 : 16);
    }
    return;
  }
  for (int r = int(threadIdx.x) / kPieces; r < rows; r += step)
    stage_piece<NP>(dst + r * LD + c, plane_stride, src, src_bf16, col ? row_offset(r) : -1, c);
}

// The same for two sources with the same row offsets (K and V; Q and dO) into two tiles.
template <int HDP, int NP, class RowOffset>
__device__ __forceinline__ void stage_rows2(bf16_t* dst0, bf16_t* dst1, int plane_stride, int rows, const void* src0,
                                            bool src0_bf16, const void* src1, bool src1_bf16, int64_t hd,
                                            RowOffset row_offset) {
  constexpr int LD = row_stride<HDP>(), kPieces = HDP / 8;
  const int c = (int(threadIdx.x) % kPieces) * 8, step = int(blockDim.x) / kPieces;
  const bool col = c < hd;
  if (NP == 1 && src0_bf16 && src1_bf16) {
    const bf16_t *base0 = static_cast<const bf16_t*>(src0), *base1 = static_cast<const bf16_t*>(src1);
    for (int r = int(threadIdx.x) / kPieces; r < rows; r += step) {
      const int64_t off = col ? row_offset(r) : -1, at = off < 0 ? 0 : off + c;
      const int bytes = off < 0 ? 0 : 16;
      cp_async16_zfill(dst0 + r * LD + c, base0 + at, bytes);
      cp_async16_zfill(dst1 + r * LD + c, base1 + at, bytes);
    }
    return;
  }
  for (int r = int(threadIdx.x) / kPieces; r < rows; r += step) {
    const int64_t off = col ? row_offset(r) : -1;
    stage_piece<NP>(dst0 + r * LD + c, plane_stride, src0, src0_bf16, off, c);
    stage_piece<NP>(dst1 + r * LD + c, plane_stride, src1, src1_bf16, off, c);
  }
}

// bf16 fast path for `rows` rows at a constant stride (a tile of context keys): row r of the
// tile is src + off0 + r * stride (elements). A pointer step per row; columns past hd are zero.
// Complete after cp_async_wait + __syncthreads. Same thread layout as stage_rows.
template <int HDP>
__device__ __forceinline__ void stage_strided(bf16_t* dst, int rows, const void* src, int64_t off0, int64_t stride,
                                              int64_t hd) {
  constexpr int LD = row_stride<HDP>(), kPieces = HDP / 8;
  const int c = (int(threadIdx.x) % kPieces) * 8, step = int(blockDim.x) / kPieces, r0 = int(threadIdx.x) / kPieces;
  const int bytes = c < hd ? 16 : 0;
  const bf16_t* s = static_cast<const bf16_t*>(src) + off0 + r0 * stride + (bytes ? c : 0);
  const int64_t s_step = int64_t(step) * stride;
  bf16_t* d = dst + r0 * LD + c;
  for (int r = r0; r < rows; r += step, s += s_step, d += step * LD) cp_async16_zfill(d, s, bytes);
}
template <int HDP>
__device__ __forceinline__ void stage_strided2(bf16_t* dst0, bf16_t* dst1, int rows, const void* src0,
                                               const void* src1, int64_t off0, int64_t stride, int64_t hd) {
  constexpr int LD = row_stride<HDP>(), kPieces = HDP / 8;
  const int c = (int(threadIdx.x) % kPieces) * 8, step = int(blockDim.x) / kPieces, r0 = int(threadIdx.x) / kPieces;
  const int bytes = c < hd ? 16 : 0;
  const int64_t at = off0 + r0 * stride + (bytes ? c : 0), s_step = int64_t(step) * stride;
  const bf16_t *s0 = static_cast<const bf16_t*>(src0) + at, *s1 = static_cast<const bf16_t*>(src1) + at;
  const int d0 = r0 * LD + c;
  for (int r = r0, d = d0; r < rows; r += step, s0 += s_step, s1 += s_step, d += step * LD) {
    cp_async16_zfill(dst0 + d, s0, bytes);
    cp_async16_zfill(dst1 + d, s1, bytes);
  }
}

}  // namespace dflash::kernels::cuda::attn

// dflash_attention_*_sm90.cu (sm_90a): version 2 of the kernels, for bf16 q, k, v (and dout) with
// hd <= 128 on a compute capability 9.0 device. Each returns false, launching nothing, where it
// does not apply (the caller then runs version 1). Their modes and loads: kernels/heuristics.h.
// A build without them (DFLASH_CUDA_ARCHS without 90a) has these stand-ins, which never apply.
namespace dflash::kernels::cuda::sm90 {
#ifdef DFLASH_SM90_KERNELS
bool forward(const DflashAttentionForward& a, void* stream);
bool backward(const DflashAttentionBackward& a, void* stream);
// Bytes of scratch the fused backward needs for dims d with dq asked for (0 when it will not run).
int64_t backward_scratch_bytes(const DflashAttentionDims& d, bool bf16);
#else
inline bool forward(const DflashAttentionForward&, void*) { return false; }
inline bool backward(const DflashAttentionBackward&, void*) { return false; }
inline int64_t backward_scratch_bytes(const DflashAttentionDims&, bool) { return 0; }
#endif
}  // namespace dflash::kernels::cuda::sm90
