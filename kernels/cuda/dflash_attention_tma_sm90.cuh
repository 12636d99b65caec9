// TMA tile loads of the sm_90a DFlash attention kernels' producers (dflash_attention_sm90.cuh:
// produce_key_tiles; dflash_attention_dkdv_sm90.cu): the tensor maps they read and the loads of
// one key tile or one dk/dv chunk. The maps are encoded on the host (dflash_attention_tma_sm90.cu)
// and passed as __grid_constant__ kernel arguments; docs/ATTENTION.md, "TMA producers".
#pragma once
#include <cstdint>

#include <cuda.h>

#include "kernels/cuda/dflash_attention_sm90.h"
#include "kernels/cuda/dflash_attention_sm90_ptx.cuh"

namespace dflash::kernels::cuda::sm90 {

// dk/dv's producer (ws and fused modes, where a chunk of 64 rows is one block's rows: group x bs =
// 64): q and dout as tensors of [hd][B*T tokens][nh heads] in boxes of {64, bs, group} (one
// 64-column slab of a chunk, in the tile's row order hq * bs + slot, 128-byte swizzled as
// dflash_attention_sm90.h lays tiles out), lse and delta as [T][B*nh] in boxes of {bs, group} (the
// chunk's 64 words in row order).
struct DkdvMaps {  // 64-byte aligned, as CUtensorMap is
  CUtensorMap q, dout, lse, delta;
};
// The query side's producer (forward and dq): k and v as tensors of [hd][B*(S+T)
// keys][nkv heads] in boxes of {64, rows of a key tile, 1} (one 64-column slab of a tile). Only tiles
// of context keys alone (the virtual sequence's keys v0 .. v0 + rows - 1 are keys v0 ..) come by
// TMA; the tile that reaches the draft keys and the zero rows past the sequence are staged by the
// producer threads.
struct KvMaps {
  CUtensorMap k, v;
};

// By one thread, after the barrier's expected bytes include them: the chunk of block rows `tok`
// (b * T + a * bs) of q heads `head` (g * group) ..: Q and dO into the [ROWS][HDP] tiles qt and ot,
// lse and D (row `lrow` = b * nh + head, column a * bs) into lse_dst and d_dst.
template <int HDP, int ROWS>
__device__ __forceinline__ void tma_load_chunk(const DkdvMaps& m, uint32_t qt, uint32_t ot, uint32_t lse_dst,
                                               uint32_t d_dst, int tok, int head, int lrow, int col, uint32_t bar) {
#pragma unroll
  for (int sl = 0; sl < HDP / kSlabCols; ++sl) {
    tma_load_3d(qt + uint32_t(sl) * slab_bytes(ROWS), &m.q, sl * kSlabCols, tok, head, bar);
    tma_load_3d(ot + uint32_t(sl) * slab_bytes(ROWS), &m.dout, sl * kSlabCols, tok, head, bar);
  }
  tma_load_2d(lse_dst, &m.lse, col, lrow, bar);
  tma_load_2d(d_dst, &m.delta, col, lrow, bar);
}
// By one thread, likewise: keys `key` (b * (S+T) + v0) .. of kv head g into the [ROWS][HDP] tiles
// k_dst and v_dst.
template <int HDP, int ROWS>
__device__ __forceinline__ void tma_load_key_tile(const KvMaps& m, uint32_t k_dst, uint32_t v_dst, int key, int g,
                                                  uint32_t bar) {
#pragma unroll
  for (int sl = 0; sl < HDP / kSlabCols; ++sl) {
    tma_load_3d(k_dst + uint32_t(sl) * slab_bytes(ROWS), &m.k, sl * kSlabCols, key, g, bar);
    tma_load_3d(v_dst + uint32_t(sl) * slab_bytes(ROWS), &m.v, sl * kSlabCols, key, g, bar);
  }
}

}  // namespace dflash::kernels::cuda::sm90
