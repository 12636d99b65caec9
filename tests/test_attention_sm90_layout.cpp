// The shared-memory layout of the sm_90a attention kernels (kernels/cuda/dflash_attention_sm90.h),
// checked on the CPU: every element a wgmma operand reads through our descriptors (modelled on
// CUTLASS's canonical K_SW128 / MN_SW128 layouts) is the element the staging code wrote there,
// for each operand shape the kernels use. Suite "attention-sm90-layout" (no GPU needed).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <set>

#include "kernels/cuda/dflash_attention_sm90.h"

using namespace dflash::kernels::cuda::sm90;

namespace {

constexpr int kRows = 64;          // the kernels' tiles have 64 rows (the forward's wide K, V tiles: 128)
constexpr uint32_t kBase = 5 * 1024;  // a 1024-aligned tile start, as the kernels align them

// Byte address of element (row, col) of a tile of `rows` rows as stage_rows (and the producers)
// write it (16-byte piece col / 8).
uint32_t staged(uint32_t tile, int row, int col, int rows = kRows) {
  return tile + piece_offset(rows, row, col / 8) + uint32_t(col % 8) * 2u;
}

struct Fields {
  uint32_t start, lbo, sbo, layout;
};
Fields decode(uint64_t d) {
  return {uint32_t(d & 0x3FFF) << 4, uint32_t((d >> 16) & 0x3FFF) << 4, uint32_t((d >> 32) & 0x3FFF) << 4,
          uint32_t(d >> 62)};
}

// A K-major operand of N rows (M or N of the wgmma) at tile row row0, k-step kk of the head dim:
// element (n, k) must be tile element (row0 + n, 16 kk + k).
bool kmajor_matches(int hdp, int n_rows, int row0, int kk, int tile_rows = kRows) {
  const Fields f = decode(kmajor_desc(kBase, tile_rows, row0, kk));
  if (f.layout != 1 || f.sbo != 1024) return false;
  for (int n = 0; n < n_rows; ++n)
    for (int k = 0; k < 16; ++k)
      if (kmajor_element(f.start, f.sbo, n, k) != staged(kBase, row0 + n, 16 * kk + k, tile_rows)) return false;
  return 16 * (kk + 1) <= hdp;
}

// An MN-major operand (K = tile rows row0 + 16 kk .. +15, N = the head dim, hdp columns): element
// (n, k) must be tile element (row0 + 16 kk + k, n).
bool mnmajor_matches(int hdp, int row0, int kk, int tile_rows = kRows) {
  const Fields f = decode(mnmajor_desc(kBase, tile_rows, row0, kk));
  if (f.layout != 1 || f.sbo != 1024 || f.lbo != slab_bytes(tile_rows)) return false;
  for (int n = 0; n < hdp; ++n)
    for (int k = 0; k < 16; ++k)
      if (mnmajor_element(f.start, f.lbo, f.sbo, n, k) != staged(kBase, row0 + 16 * kk + k, n, tile_rows))
        return false;
  return true;
}

}  // namespace

TEST_SUITE("attention-sm90-layout") {
  TEST_CASE("staged pieces fill the tile exactly once, inside it") {
    for (int hdp : {64, 128}) {
      std::set<uint32_t> seen;
      for (int r = 0; r < kRows; ++r)
        for (int p = 0; p < hdp / 8; ++p) {
          const uint32_t off = piece_offset(kRows, r, p);
          CHECK(off % 16 == 0);
          CHECK(off < tile_bytes(kRows, hdp));
          seen.insert(off);
        }
      CHECK(seen.size() == size_t(kRows * hdp / 8));
    }
  }

  TEST_CASE("a descriptor advanced by a k-step's bytes is that k-step's descriptor, for every tile in shared memory") {
    // What the kernels issue: desc_advance of the k-step-0 descriptor by a constant, against the
    // descriptor built from the k-step's address; every 1024-aligned tile up to 228 KiB.
    for (uint32_t tile = 0; tile + tile_bytes(kRows, 128) <= 228u * 1024u; tile += 1024) {
      CAPTURE(tile);
      for (int row0 : {0, 8, 32, 48})
        for (int kk = 0; kk < 8; ++kk) {
          CAPTURE(row0);
          CAPTURE(kk);
          CHECK(desc_advance(kmajor_desc(tile, kRows, row0, 0), kmajor_step(kRows, kk)) ==
                kmajor_desc(tile, kRows, row0, kk));
          if (row0 + 16 * kk + 16 <= kRows)
            CHECK(desc_advance(mnmajor_desc(tile, kRows, row0, 0), mnmajor_step(kk)) ==
                  mnmajor_desc(tile, kRows, row0, kk));
        }
    }
  }

  TEST_CASE("division by the rows per block through a 64-bit magic number is exact") {
    uint64_t state = 12345;
    auto next = [&] {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return uint32_t(state >> 32);
    };
    for (uint32_t d : {1u, 2u, 3u, 7u, 8u, 16u, 24u, 48u, 64u, 96u, 100u, 128u, 1000u, 4096u, 65535u, 1u << 20,
                       2147483647u, 4294967295u}) {
      CAPTURE(d);
      const uint64_t m = div_magic(d);
      bool exact = true;
      for (uint32_t x : {0u, 1u, d - 1, d, d + 1, 2 * d - 1, 4294967295u, 4294967294u, 2147483647u})
        exact = exact && div_by_magic(x, m) == x / d;
      for (int i = 0; i < 20000; ++i) {
        const uint32_t x = next();
        exact = exact && div_by_magic(x, m) == x / d && div_by_magic(x >> 12, m) == (x >> 12) / d;
      }
      CHECK(exact);
    }
  }

  TEST_CASE("descriptors encode start, offsets and the 128-byte swizzle") {
    const uint64_t d = make_desc(0x12340, 8192, 1024);
    const Fields f = decode(d);
    CHECK(f.start == 0x12340);
    CHECK(f.lbo == 8192);
    CHECK(f.sbo == 1024);
    CHECK(f.layout == 1);
    CHECK(((d >> 49) & 7) == 0);  // base offset: tiles are 1024-byte aligned
  }

  TEST_CASE("K-major operands: Q K^T (B = K, N = 64 keys), K Q^T and V dO^T (A = K or V, B = Q or dO)") {
    for (int hdp : {64, 128}) {
      CAPTURE(hdp);
      for (int kk = 0; kk < hdp / 16; ++kk) {
        CAPTURE(kk);
        CHECK(kmajor_matches(hdp, 64, 0, kk));
        // dq: the two halves of 32 keys (m64n32k16 with B rows 0..31 and 32..63).
        CHECK(kmajor_matches(hdp, 32, 0, kk));
        CHECK(kmajor_matches(hdp, 32, 32, kk));
      }
    }
  }

  TEST_CASE("the forward's 128-key tiles: S = Q K^T over 128 keys (m64n128), P V over 8 k-steps of 16 keys") {
    for (int hdp : {64, 128}) {
      CAPTURE(hdp);
      for (int kk = 0; kk < hdp / 16; ++kk) {
        CAPTURE(kk);
        CHECK(kmajor_matches(hdp, 128, 0, kk, 128));
        CHECK(desc_advance(kmajor_desc(kBase, 128, 0, 0), kmajor_step(128, kk)) == kmajor_desc(kBase, 128, 0, kk));
      }
      for (int kk = 0; kk < 8; ++kk) {
        CAPTURE(kk);
        CHECK(mnmajor_matches(hdp, 0, kk, 128));
        CHECK(desc_advance(mnmajor_desc(kBase, 128, 0, 0), mnmajor_step(kk)) == mnmajor_desc(kBase, 128, 0, kk));
      }
    }
  }

  TEST_CASE("a key producer's rows: one piece per thread, rows kStep apart, kStep * 128 bytes apart") {
    // produce_key_tiles (dflash_attention_sm90.cuh): thread tix keeps piece tix % pieces and walks
    // rows tix / pieces + m * kStep, adding kStep * 128 bytes per row; together the 128 threads
    // write every piece of the tile once, at piece_offset's place, for 64- and 128-row tiles.
    for (int rows : {64, 128})
      for (int hdp : {64, 128}) {
        CAPTURE(rows);
        CAPTURE(hdp);
        const int pieces = hdp / 8, step = 128 / pieces;
        std::set<uint32_t> seen;
        bool at_place = true;
        for (int tix = 0; tix < 128; ++tix) {
          const int r0 = tix / pieces, piece = tix % pieces;
          const uint32_t dst = piece_offset(rows, r0, piece);
          for (int r = r0; r < rows; r += step) {
            const uint32_t at = dst + uint32_t(r - r0) * 128u;
            at_place = at_place && at == piece_offset(rows, r, piece);
            seen.insert(at);
          }
        }
        CHECK(at_place);
        CHECK(seen.size() == size_t(rows * pieces));
        CHECK(*seen.rbegin() < tile_bytes(rows, hdp));
      }
  }

  TEST_CASE("MN-major operands: P V, dS K (both halves), P^T dO, dS^T Q") {
    for (int hdp : {64, 128}) {
      CAPTURE(hdp);
      for (int kk = 0; kk < 4; ++kk) CHECK(mnmajor_matches(hdp, 0, kk));  // k over 64 rows
      for (int half = 0; half < 2; ++half)
        for (int kk = 0; kk < 2; ++kk) CHECK(mnmajor_matches(hdp, 32 * half, kk));  // dq: k over 32 keys
    }
  }

  TEST_CASE("the fused dq's operands: dS from the dS^T tile, and K's halves (head dim 128)") {
    // A = dS (M = 64 query rows, K = 16 keys per step) reads the element ds_offset wrote for
    // (key 16kk + k, row m); B = K (N = the warpgroup's 64 columns) reads K tile kk / 4's staged
    // element (key 16 (kk % 4) + k, column 64 wg + n).
    constexpr uint32_t kKTiles = 11 * 1024;
    std::set<uint32_t> ds_cells;
    for (int key = 0; key < 128; ++key)
      for (int row = 0; row < 64; ++row) ds_cells.insert(ds_offset(key, row));
    CHECK(ds_cells.size() == size_t(128 * 64));
    CHECK(*ds_cells.rbegin() < tile_bytes(128, 64));
    for (int kk = 0; kk < 8; ++kk) {
      CAPTURE(kk);
      const Fields a = decode(dq_ds_desc(kBase, kk));
      CHECK(a.layout == 1);
      CHECK(a.sbo == 1024);
      bool a_ok = true, b_ok = true;
      for (int m = 0; m < 64; ++m)
        for (int k = 0; k < 16; ++k)
          a_ok = a_ok && mnmajor_element(a.start, a.lbo, a.sbo, m, k) == kBase + ds_offset(16 * kk + k, m);
      CHECK(a_ok);
      for (int wg = 0; wg < 2; ++wg) {
        const Fields b = decode(dq_k_desc(kKTiles, wg, kk));
        const uint32_t tile = kKTiles + uint32_t(kk / 4) * tile_bytes(kRows, 128);
        for (int n = 0; n < 64; ++n)
          for (int k = 0; k < 16; ++k)
            b_ok = b_ok && mnmajor_element(b.start, b.lbo, b.sbo, n, k) == staged(tile, 16 * (kk % 4) + k, 64 * wg + n);
      }
      CHECK(b_ok);
    }
  }

  TEST_CASE("ldmatrix lanes of an A fragment: rows m0 + (lane & 7) + 8 ((lane >> 3) & 1), k 16 kk + 8 (lane >> 4)") {
    // load_a_frag: matrix j = lane / 8 of ldmatrix.x4 is (rows 0-7 | 8-15) x (k 0-7 | 8-15) in the
    // order of the mma A fragment: a0 (rows 0-7, k 0-7), a1 (rows 8-15), a2 (k 8-15), a3 (both).
    for (int lane = 0; lane < 32; ++lane) {
      const int row = (lane & 7) + ((lane >> 3) & 1) * 8, piece = 2 * 3 + (lane >> 4);
      const int j = lane / 8;
      CHECK(row / 8 == (j & 1));
      CHECK(piece - 6 == (j >> 1));
      CHECK(piece_offset(kRows, 16 + row, piece) == staged(0, 16 + row, 8 * piece));
    }
  }
}
