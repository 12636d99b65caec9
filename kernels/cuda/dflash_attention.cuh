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

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda::attn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kMaxWarps = 4;  // 4 warps of 16 rows (queries, or keys in the dk/dv kernel)
constexpr int kMaxThreads = 32 * kMaxWarps;
constexpr int kCtaRows = 16 * kMaxWarps;
constexpr int kMaxSmem = 227 * 1024;  // opt-in dynamic shared memory per block on sm_90

template <int HDP>
constexpr int row_stride() { return HDP + 8; }  // bf16 elements per shared-memory tile row

// Tile sizes chosen so that the kernels' shared memory fits (asserted where they are used).
// Forward and dq: KT keys per tile; dk/dv: RC query rows per chunk.
template <int HDP>
constexpr int forward_key_tile() { return HDP <= 128 ? 64 : 32; }
template <int HDP, int NP>
constexpr int dq_key_tile() { return HDP <= 128 ? 64 : (NP == 1 ? 32 : 16); }
template <int HDP, int NP>
constexpr int dkdv_row_chunk() { return HDP <= 64 ? 64 : (HDP <= 128 || NP == 1 ? 32 : 16); }

// Per-call dimensions, with derived sizes, shared by every kernel.
struct Geometry {
  int64_t B, S, N, bs, nh, nkv, hd, T, keys, group, rows_per_kv;  // rows_per_kv = group * bs
  float scale;
};
inline Geometry geometry(const DflashAttentionDims& d) {
  const int64_t T = d.N * d.bs, group = d.nh / d.nkv;
  return {d.B, d.S, d.N, d.bs, d.nh, d.nkv, d.hd, T, d.S + T, group, group * d.bs, d.scale};
}

// Warps of the query-block kernels (forward, dq): 16 query rows each, up to 4, as many as the
// group*bs query rows of one kv head need.
inline int query_warps(int64_t rows_per_kv) {
  const int64_t w = (rows_per_kv + 15) / 16;
  return int(w < 1 ? 1 : (w > kMaxWarps ? kMaxWarps : w));
}

// Lets kernel use `bytes` of dynamic shared memory (set at every launch: the attribute is per device).
template <class Kernel>
void allow_smem(Kernel kernel, int bytes, const char* what) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": cannot allow " + std::to_string(bytes) +
                             " bytes of shared memory: " + cudaGetErrorString(e));
}

__device__ __forceinline__ int64_t clamp_anchor(int32_t raw, int64_t S) {
  return raw < 0 ? 0 : (raw > S ? S : int64_t(raw));
}

// The query row rr in [0, rows_per_kv) of block a that kv head g serves: head g*group + rr/bs,
// slot rr % bs. Returns the row index into q viewed as [B*T*nh, hd] and sets the lse index.
__device__ __forceinline__ int64_t query_row(const Geometry& G, int64_t b, int64_t a, int64_t g, int64_t rr,
                                             int64_t* lse_index) {
  const int r32 = int(rr), bs32 = int(G.bs);  // rr < 64 * 64 and bs <= 64: 32-bit division
  const int64_t h = g * G.group + r32 / bs32, t = a * G.bs + r32 % bs32;
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
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most Pending of this thread's committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// Copies `rows` rows of hd elements into the tile dst [NP][rows][LD] (plane stride
// plane_stride). row_offset(r) is the element offset of row r in src, or -1 for a zero row.
// bf16 sources go through cp.async when NP = 1 (complete after cp_async_wait + __syncthreads);
// every other case converts through registers. Needs hd % 8 == 0 and 16-byte aligned rows.
template <int HDP, int NP, class RowOffset>
__device__ __forceinline__ void stage_rows(bf16_t* dst, int plane_stride, int rows, const void* src, bool src_bf16,
                                           int64_t hd, RowOffset row_offset) {
  constexpr int LD = row_stride<HDP>(), kChunks = HDP / 8;  // 16-byte chunks of bf16 per row
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int i = threadIdx.x; i < rows * kChunks; i += blockDim.x) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    bf16_t* d = dst + r * LD + c;
    const int64_t off = c < hd ? row_offset(r) : -1;
    if (off < 0) {
#pragma unroll
      for (int p = 0; p < NP; ++p) *reinterpret_cast<uint4*>(d + p * plane_stride) = zero;
    } else if (src_bf16) {
      const bf16_t* s = static_cast<const bf16_t*>(src) + off + c;
      if constexpr (NP == 1) {
        cp_async16(d, s);
      } else {
        *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(s);
        *reinterpret_cast<uint4*>(d + plane_stride) = zero;
      }
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
}

}  // namespace dflash::kernels::cuda::attn
