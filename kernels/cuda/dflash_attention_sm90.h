// Shared-memory tile layout and wgmma matrix descriptors of the sm_90a DFlash attention kernels
// (dflash_attention_*_sm90.cu). Plain C++ (host and device), so that a CPU test can check the
// staging addresses against the addresses the descriptors make the tensor cores read.
//
// A tile holds R rows (R a multiple of 8) of HDP bf16 columns (HDP = 64 or 128) as HDP/64 slabs of
// [R][64]: 128-byte rows, 128-byte swizzle (the 16-byte piece p of row r sits at piece p ^ (r % 8)),
// the slab of columns 64s.. at byte s * R * 128. Tiles start 1024-byte aligned, so the swizzle,
// which the hardware applies to address bits [4:6] ^ [7:9], agrees with the row index. The same
// tile is read as a K-major operand (K = the head dim: Q K^T, K Q^T) and as an MN-major operand
// (K = the rows, N = the head dim: P V, dS K, P^T dO, dS^T Q), through two descriptor kinds:
// CUTLASS's canonical GMMA layouts K_SW128 and MN_SW128 (cute/atom/mma_traits_sm90_gmma.hpp).
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define DFLASH_HD __host__ __device__
#else
#define DFLASH_HD
#endif

namespace dflash::kernels::cuda::sm90 {

inline constexpr int kSlabCols = 64;  // bf16 columns per 128-byte swizzled row

DFLASH_HD constexpr uint32_t slab_bytes(int rows) { return uint32_t(rows) * 128u; }
DFLASH_HD constexpr uint32_t tile_bytes(int rows, int hdp) { return slab_bytes(rows) * uint32_t(hdp / kSlabCols); }

// Byte offset in a tile of `rows` rows of the 16-byte piece `piece` (columns 8*piece..) of `row`.
DFLASH_HD constexpr uint32_t piece_offset(int rows, int row, int piece) {
  return uint32_t(piece >> 3) * slab_bytes(rows) + uint32_t(row) * 128u + (uint32_t((piece & 7) ^ (row & 7)) << 4);
}

// wgmma shared-memory matrix descriptor: start address, leading and stride byte offsets (all in
// 16-byte units, 14 bits), base offset 0, layout type 1 = 128-byte swizzle (bits 62-63).
DFLASH_HD constexpr uint64_t desc_field(uint32_t bytes) { return uint64_t((bytes & 0x3FFFFu) >> 4); }
DFLASH_HD constexpr uint64_t make_desc(uint32_t start, uint32_t lbo, uint32_t sbo) {
  return desc_field(start) | (desc_field(lbo) << 16) | (desc_field(sbo) << 32) | (uint64_t(1) << 62);
}

// K-major operand (rows = M or N, columns = K = head dim) for the k-step kk (columns 16kk..16kk+15),
// starting at tile row row0 (a multiple of 8): 8-row groups 1024 bytes apart (SBO); the leading
// offset is unused by swizzled K-major layouts (CUTLASS sets 1). The k-step moves 32 bytes inside
// the swizzled 128-byte row, then to the next slab.
DFLASH_HD constexpr uint32_t kmajor_start(uint32_t tile, int rows, int row0, int kk) {
  return tile + uint32_t(kk >> 2) * slab_bytes(rows) + uint32_t(kk & 3) * 32u + uint32_t(row0) * 128u;
}
DFLASH_HD constexpr uint64_t kmajor_desc(uint32_t tile, int rows, int row0, int kk) {
  return make_desc(kmajor_start(tile, rows, row0, kk), 16u, 1024u);
}

// MN-major operand (K = tile rows row0 + 16kk .. +15, N = head dim): 8-row K groups 1024 bytes
// apart (SBO), 64-column N groups one slab apart (LBO).
DFLASH_HD constexpr uint32_t mnmajor_start(uint32_t tile, int row0, int kk) {
  return tile + uint32_t(row0 + 16 * kk) * 128u;
}
DFLASH_HD constexpr uint64_t mnmajor_desc(uint32_t tile, int rows, int row0, int kk) {
  return make_desc(mnmajor_start(tile, row0, kk), slab_bytes(rows), 1024u);
}

// A descriptor moved on by `bytes` (a multiple of 16): the descriptor of k-step kk from that of
// k-step 0, desc_advance(kmajor_desc(t, rows, row0, 0), kmajor_step(rows, kk)) ==
// kmajor_desc(t, rows, row0, kk), and likewise mnmajor_step; one add of a constant where kk is
// one, instead of masking the address again. Exact while the start address stays below 2^18
// (shared memory is 228 KiB), so no carry leaves the 14-bit start field.
DFLASH_HD constexpr uint32_t kmajor_step(int rows, int kk) {
  return uint32_t(kk >> 2) * slab_bytes(rows) + uint32_t(kk & 3) * 32u;
}
DFLASH_HD constexpr uint32_t mnmajor_step(int kk) { return uint32_t(16 * kk) * 128u; }
DFLASH_HD constexpr uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + uint64_t(bytes >> 4); }

// The fused backward's dq = dS K (dflash_attention_fused_dq_sm90.cuh), head dim 128. A = dS from
// the [128 keys][64 rows] tile of dS^T (tile row = key, column = query row; one slab): element
// (key, row) at ds_offset, read MN-major (M = rows, K = keys 16kk..). B = K from the CTA's two
// [64 keys][128] K tiles (tile_bytes(64, 128) apart): k-step kk is keys 16kk.. of tile kk / 4,
// warpgroup wg's columns 64wg.. (slab wg), read MN-major.
DFLASH_HD constexpr uint32_t ds_offset(int key, int row) {
  return piece_offset(128, key, row / 8) + uint32_t(row % 8) * 2u;
}
DFLASH_HD constexpr uint64_t dq_ds_desc(uint32_t ds_tile, int kk) { return mnmajor_desc(ds_tile, 128, 0, kk); }
DFLASH_HD constexpr uint64_t dq_k_desc(uint32_t k_tiles, int wg, int kk) {
  return mnmajor_desc(k_tiles + uint32_t(kk >> 2) * tile_bytes(64, 128) + uint32_t(wg) * slab_bytes(64), 64, 0,
                      kk & 3);
}

// The address the tensor cores read for element (mn, k) of one m64nNk16 operand, as the canonical
// layouts define it (used by the CPU layout test only): K-major SW128 is ((8,m),(8,2)) over
// (rows of 128 bytes, 8-row groups at SBO); MN-major SW128 is ((64,n),(8,k)) over (64 contiguous
// elements, groups at LBO; rows of 128 bytes, 8-row groups at SBO); then the 128-byte swizzle.
DFLASH_HD constexpr uint32_t swizzle128(uint32_t a) { return a ^ (((a >> 7) & 7u) << 4); }
DFLASH_HD constexpr uint32_t kmajor_element(uint32_t start, uint32_t sbo, int mn, int k) {
  return swizzle128(start + uint32_t(mn >> 3) * sbo + uint32_t(mn & 7) * 128u + uint32_t(k) * 2u);
}
DFLASH_HD constexpr uint32_t mnmajor_element(uint32_t start, uint32_t lbo, uint32_t sbo, int mn, int k) {
  return swizzle128(start + uint32_t(mn >> 6) * lbo + uint32_t(mn & 63) * 2u + uint32_t(k >> 3) * sbo +
                    uint32_t(k & 7) * 128u);
}

// x / d for 32-bit x and 1 <= d < 2^32 by one 64-bit multiply-high: magic = ceil(2^64 / d), or 0
// for d = 1. Exact: x * magic / 2^64 = x / d + x * e / (d 2^64) with e < d, and x < 2^32 keeps
// the error term below 1/d, so it never crosses an integer.
DFLASH_HD constexpr uint64_t div_magic(uint32_t d) { return d <= 1 ? 0 : ~uint64_t(0) / d + 1; }
DFLASH_HD inline uint32_t div_by_magic(uint32_t x, uint64_t magic) {
  if (magic == 0) return x;
#if defined(__CUDA_ARCH__)
  return uint32_t(__umul64hi(uint64_t(x), magic));
#else
  return uint32_t((unsigned __int128)x * magic >> 64);
#endif
}

}  // namespace dflash::kernels::cuda::sm90
