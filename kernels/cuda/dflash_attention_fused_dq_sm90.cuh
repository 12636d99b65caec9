// The fused backward's dq (sm_90a): what dk/dv's kernel adds in its `fused` mode
// (dflash_attention_dkdv_sm90.cu) so that it also sums dq = scale * sum over keys of dS K, in a
// fixed order, and the finishing pass (dflash_attention_backward_sm90.cu) that writes dq.
//
// Per chunk of 64 rows, after dV and dK are issued, each consumer warpgroup writes its dS^T (its 64
// keys x 64 rows, bf16) into one shared tile of the CTA's 128 keys; once both are there each
// computes dS K for its half of the head dim (64 rows x 64 columns over 128 keys, a wgmma with both
// operands in shared memory) and hands the f32 partial, through shared memory and a pair of
// mbarriers, to a writer warp (the producer warpgroup's last warp). The writer adds it to the
// chunk's global sum with one bulk copy (the first contribution) or bulk f32 add (the others), 32 KB
// for both halves, in turn:
//   the chunk's draft-key CTA first (turn 0), then the context-key CTAs in key order (range j: turn
//   j + 1),
// behind a per-chunk counter (acquire load until it equals the turn; release increment when done).
// The order of every sum is thus fixed, whatever the timing: same bits every run. Why those turns
// hold: the kernel's chunks are aligned to 64 rows, so a chunk lies in one draft CTA's rows (128
// draft keys are 128 / bs whole blocks, 128 * group rows), which takes part in every chunk that
// has a kept row; a context CTA of range j takes part in a chunk iff some kept row's anchor is
// above 128 j, so ranges 0..j-1 take part in every chunk range j does. Every CTA waits only for
// CTAs before it in the grid (draft CTAs first, then the context ranges in order), so with CTAs
// started in grid order the first unfinished CTA can always go on: no deadlock. Context CTAs walk
// their chunks last to first, where the longest ranges start together, so a range trails the one
// before it by about one chunk. A turn that does not come within Params::dq_wait_ns stops the
// kernel with a message (the assumption broken), never a hang.
#pragma once
#include "kernels/cuda/dflash_attention_sm90.cuh"

namespace dflash::kernels::cuda::sm90 {

constexpr int kDqHalfFloats = kRows * kRows;                      // one warpgroup's 64 x 64 partial
constexpr uint32_t kDqChunkBytes = 2u * kDqHalfFloats * 4u;       // both halves, 32 KB
constexpr uint32_t kDsTileBytes = tile_bytes(kCtaRows, kRows);    // dS^T: 128 keys x 64 rows, 16 KB

// Floats of dq_acc and ints of dq_sem for a geometry (both per (b, g) and chunk).
inline int64_t fused_chunks(const Params& p) { return p.G.B * p.G.nkv * int64_t(p.nchunk); }

// Consumer: the warpgroup's dS^T from its A fragments (k-step kk: chunk rows 16kk.., element q:
// rows 8 (2kk + q / 2) + 2tq and + 1, key 16 warp + gq + 8 (q % 2)) into tile rows 64 wg .. of the
// swizzled [128 keys][64 rows] tile (ds_offset), read as dS by dq's product.
__device__ __forceinline__ void store_ds(uint32_t sDS, const uint32_t (&da)[4][4], int wg, int warp, int gq,
                                         int tq) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int key = wg * kRows + warp * 16 + gq + 8 * (q & 1), row = 8 * (2 * kk + (q >> 1)) + 2 * tq;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sDS + ds_offset(key, row)), "r"(da[kk][q]) : "memory");
    }
}

// Consumer: dqp = dS K over the CTA's 128 keys (K tiles at sK and sK + TB) for columns 64 wg ..
// 64 wg + 63 (the operands: dflash_attention_sm90.h, dq_ds_desc and dq_k_desc).
__device__ __forceinline__ void issue_dq(float (&dqp)[32], uint32_t sDS, uint32_t sK, int wg) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) mma_ss<64, 1, 1>(dqp, dq_ds_desc(sDS, kk), dq_k_desc(sK, wg, kk), kk > 0 ? 1 : 0);
}

// Consumer: hands chunk i's partial (when the CTA computed the chunk) to the writer: element e of
// thread wtid of warpgroup wg at float wg * 4096 + e * 128 + wtid of sDQ; warpgroup 0's thread 0
// also says whether there is one. Every chunk is handed over, so both sides count the same phases
// of the mbarriers full (one arrival per consumer thread) and empty (one per writer lane); neither
// side can run a phase ahead of the other, so a parity names one phase.
__device__ __forceinline__ void hand_dq(uint32_t sDQ, const float (&dqp)[32], bool act, int i, int wg, int wtid,
                                        volatile int* s_part, uint32_t full, uint32_t empty) {
  if (i > 0) mbar_wait(empty, uint32_t(i - 1) & 1u);  // the writer is done with chunk i-1
  if (act) {
    const uint32_t base = sDQ + uint32_t(wg * kDqHalfFloats + wtid) * 4u;
#pragma unroll
    for (int e = 0; e < 32; ++e)
      asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(base + uint32_t(e * 128) * 4u), "f"(dqp[e]) : "memory");
  }
  if (wg == 0 && wtid == 0) *s_part = act ? 1 : 0;
  fence_async_shared();
  mbar_arrive(full);
}

// Waits (one thread) until *flag == turn. A turn that has not come after wait_ns means a CTA it
// waits for is not running (the turns assume CTAs start in grid order): an error, not a hang.
static __device__ __noinline__ void wait_turn(const int* flag, int turn, uint64_t wait_ns, int chunk) {
  uint64_t t0 = 0;
  for (int polls = 1; ld_acquire_gpu(flag) != turn; ++polls) {
    if ((polls & 255) != 0) continue;
    const uint64_t now = global_ns();
    if (t0 == 0) t0 = now;
    else if (now - t0 > wait_ns) {
      printf("dflash_attention_backward (sm90, fused dq): chunk %d of CTA %d waited %.1f s for turn %d (counter "
             "at %d): a CTA it waits for is not running (the turns assume CTAs start in grid order); report "
             "this with the shape\n",
             chunk, int(blockIdx.x), double(now - t0) * 1e-9, turn, *(volatile const int*)flag);
      __trap();
    }
  }
}

// The writer warp: for each of the CTA's nloc chunks (chunk_of(i), global chunk C0 + chunk_of(i)
// of acc and sem), waits for both halves, then, when there is a partial, for its turn, adds it (the
// first contribution, turn 0, stores) and passes the turn on.
template <class ChunkOf>
__device__ __forceinline__ void write_dq(int nloc, ChunkOf chunk_of, int C0, int turn, uint32_t sDQ,
                                         const volatile int* s_part, uint32_t full, uint32_t empty, float* acc,
                                         int* sem, int lane, uint64_t wait_ns) {
  for (int i = 0; i < nloc; ++i) {
    mbar_wait(full, uint32_t(i) & 1u);
    if (*s_part != 0) {
      if (lane == 0) {
        const int C = C0 + chunk_of(i);
        int* flag = sem + C;
        wait_turn(flag, turn, wait_ns, C);
        fence_async_global();
        float* dst = acc + int64_t(C) * (2 * kDqHalfFloats);
        if (turn == 0) bulk_store(dst, sDQ, kDqChunkBytes);
        else bulk_reduce_add_f32(dst, sDQ, kDqChunkBytes);
        bulk_commit();
        bulk_wait_all();
        fence_async_global();
        red_release_gpu_add(flag, 1);
      }
      __syncwarp();
    }
    if (i + 1 < nloc) mbar_arrive(empty);
  }
}

}  // namespace dflash::kernels::cuda::sm90
