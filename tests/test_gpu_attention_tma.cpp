// Version 2's producers loading by TMA against their per-row cp.async paths (the test seam's
// no_tma): dk/dv's chunks of query rows (tensor maps of q, dout, lse and delta) in the ws and fused
// modes, the same bits of dq, dk and dv; the forward's and dq's key tiles of context keys (k, v),
// the same bits of out, lse and dq. Where each applies on this GPU (the rules themselves, on the
// CPU: tests/test_heuristics.cpp). Suite "gpu-attention": it needs a GPU and fails without one.
#ifdef DFLASH_CUDA
#include <string>
#include <utility>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/test_seams.h"
#include "tests/gpu_attention_cases.h"
#include "tests/gpu_attention_kernels.h"
#include "tests/gpu_test_util.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {

namespace heur = kernels::heuristics;
using kernels::cuda::test_seams;
using kernels::cuda::TestSeamsScope;

kernels::cuda::DflashAttentionDims dims_of(const Case& c) {
  return {c.B, c.S, c.N, c.bs, c.nh, c.nkv, c.hd, c.key_tile, c.scale()};
}
bool chunks_by_tma(const Case& c) {
  return kernels::cuda::dflash_attention_backward_choice(dims_of(c), true, true).tma_chunks;
}
bool key_tiles_by_tma(const Case& c) {
  return kernels::cuda::dflash_attention_forward_choice(dims_of(c), true).tma_key_tiles;
}

// c run by the kernels with TMA loads (which `by_tma` must say apply under the seams set now) and
// with every tile staged by the threads: {tma, threads}.
std::pair<KernelResult, KernelResult> with_and_without_tma(const Case& c, uint64_t seed, bool (*by_tma)(const Case&)) {
  const Data d = make_data(c, seed);
  REQUIRE(by_tma(c));
  KernelResult tma = run_kernels(c, d, 2);
  TestSeamsScope threads;
  test_seams().attention.no_tma = true;
  CHECK_FALSE(by_tma(c));
  return {std::move(tma), run_kernels(c, d, 2)};
}

// The backward with chunks by TMA and by threads: the same bits of every gradient, accumulated and
// fresh, with dq in `dq` (separate: ws's dk/dv; fused).
void tma_is_threads(const Case& c, uint64_t seed, heur::Dq dq) {
  INFO(c.describe() << ", dq " << heur::name(dq));
  TestSeamsScope seams;
  test_seams().attention.dkdv = heur::Dkdv::ws;
  test_seams().attention.dq = dq;
  const auto [tma, threads] = with_and_without_tma(c, seed, chunks_by_tma);
  CHECK(max_abs(tma.dk) > 0);
  CHECK(all_finite(tma.dk));
  CHECK(all_finite(tma.dv));
  CHECK(all_finite(tma.dq));
  CHECK(bitwise_equal(tma.dk, threads.dk));
  CHECK(bitwise_equal(tma.dv, threads.dv));
  CHECK(bitwise_equal(tma.dq, threads.dq));
  CHECK(bitwise_equal(tma.dk3, threads.dk3));
  CHECK(bitwise_equal(tma.dv3, threads.dv3));
  CHECK(bitwise_equal(tma.dq3, threads.dq3));
  CHECK(bitwise_equal(tma.dk2, tma.dk));
}

// The query side (forward over 128-key tiles, dq in its own kernel) with context key tiles by TMA
// and by threads: the same bits of out, lse and dq, accumulated and fresh.
void query_tma_is_threads(const Case& c, uint64_t seed) {
  INFO(c.describe());
  TestSeamsScope seams;
  test_seams().attention.dq = heur::Dq::separate;
  const auto [tma, threads] = with_and_without_tma(c, seed, key_tiles_by_tma);
  CHECK(max_abs(tma.out) > 0);
  CHECK(all_finite(tma.out));
  CHECK(all_finite(tma.dq));
  CHECK(bitwise_equal(tma.out, threads.out));
  CHECK(bitwise_equal(tma.lse, threads.lse));
  CHECK(bitwise_equal(tma.dq, threads.dq));
  CHECK(bitwise_equal(tma.dq3, threads.dq3));
  CHECK(bitwise_equal(tma.dk, threads.dk));
}

}  // namespace

TEST_SUITE("gpu-attention") {
  TEST_CASE("version 2's forward and dq key tiles by TMA give the per-row cp.async path's bits") {
    REQUIRE_GPU();
    REQUIRE_HOPPER();
    SUBCASE("the drafter's layout: S 4096, N 128") {
      const Case c{1, 4096, 128, 16, 32, 8, 128, 64, spread_anchors(1, 128, 4096, 16), std::vector<int32_t>(128, 1)};
      query_tma_is_threads(c, 820);
    }
    SUBCASE("B 2, dropped blocks, anchors 0 and S; shuffled anchors; hd 64") {
      Case c{2, 1100, 40, 16, 8, 2, 128, 64, spread_anchors(2, 40, 1100, 16), std::vector<int32_t>(80, 1)};
      c.keep[0] = c.keep[17] = c.keep[40 + 39] = 0;
      c.anchors[5] = 0;
      c.anchors[40 + 7] = 1100;
      query_tma_is_threads(c, 825);
      Case shuffled{1, 1500, 48, 16, 8, 2, 128, 64, shuffled_anchors(1, 48, 1500, 16, 13), std::vector<int32_t>(48, 1)};
      shuffled.keep[10] = 0;
      query_tma_is_threads(shuffled, 826);
      query_tma_is_threads({1, 1500, 48, 16, 8, 2, 64, 64, spread_anchors(1, 48, 1500, 16), std::vector<int32_t>(48, 1)},
                           827);
    }
  }

  TEST_CASE("the forward and dq TMA loads apply at hd 64 and 128 on this GPU, not at hd 96 or in f32") {
    REQUIRE_GPU();
    REQUIRE_HOPPER();
    using kernels::cuda::dflash_attention_forward_choice;
    const kernels::cuda::DflashAttentionDims drafter{1, 4096, 512, 16, 32, 8, 128, 64, 0.09f};
    const kernels::cuda::DflashAttentionDims hd96{1, 4096, 512, 16, 32, 8, 96, 64, 0.1f};
    const kernels::cuda::DflashAttentionDims hd64{2, 1024, 128, 16, 16, 8, 64, 64, 0.125f};
    CHECK(dflash_attention_forward_choice(drafter, true).tma_key_tiles);
    CHECK(dflash_attention_forward_choice(hd64, true).tma_key_tiles);
    CHECK_FALSE(dflash_attention_forward_choice(hd96, true).tma_key_tiles);
    CHECK_FALSE(dflash_attention_forward_choice(drafter, false).tma_key_tiles);
    CHECK(kernels::cuda::dflash_attention_backward_choice(drafter, true, true).tma_key_tiles);
  }

  TEST_CASE("version 2's dk/dv chunks by TMA give the per-row cp.async path's bits") {
    REQUIRE_GPU();
    REQUIRE_HOPPER();
    SUBCASE("the drafter's layout: S 4096, N 128, nh 32, nkv 8, hd 128; ws and fused") {
      const Case c{1, 4096, 128, 16, 32, 8, 128, 64, spread_anchors(1, 128, 4096, 16), std::vector<int32_t>(128, 1)};
      tma_is_threads(c, 800, heur::Dq::separate);
      tma_is_threads(c, 801, heur::Dq::fused);
    }
    SUBCASE("B 2, dropped blocks (first, last, and of the second batch); shuffled anchors") {
      Case c{2, 1100, 40, 16, 8, 2, 128, 64, spread_anchors(2, 40, 1100, 16), std::vector<int32_t>(80, 1)};
      c.keep[0] = c.keep[17] = c.keep[40 + 39] = 0;
      tma_is_threads(c, 805, heur::Dq::separate);
      tma_is_threads(c, 806, heur::Dq::fused);
      Case shuffled{1, 1500, 48, 16, 8, 2, 128, 64, shuffled_anchors(1, 48, 1500, 16, 13), std::vector<int32_t>(48, 1)};
      shuffled.keep[10] = 0;
      tma_is_threads(shuffled, 807, heur::Dq::fused);
    }
    SUBCASE("hd 64 (one slab a tile); bs 4 with 16 heads a kv head (boxes of 4 slots x 16 heads)") {
      tma_is_threads({1, 1500, 48, 16, 8, 2, 64, 64, spread_anchors(1, 48, 1500, 16), std::vector<int32_t>(48, 1)}, 810,
                     heur::Dq::separate);
      tma_is_threads({1, 700, 96, 4, 16, 1, 128, 64, spread_anchors(1, 96, 700, 4), std::vector<int32_t>(96, 1)}, 811,
                     heur::Dq::fused);
    }
  }

  TEST_CASE("the dk/dv TMA loads apply only where a chunk is one block's rows, in the producer's modes") {
    REQUIRE_GPU();
    REQUIRE_HOPPER();
    using kernels::cuda::dflash_attention_backward_choice;
    const kernels::cuda::DflashAttentionDims drafter{1, 4096, 512, 16, 32, 8, 128, 64, 0.09f};
    CHECK(dflash_attention_backward_choice(drafter, true, true).tma_chunks);  // ws by default at 4096:512
    CHECK_FALSE(dflash_attention_backward_choice(drafter, false, true).tma_chunks);  // f32: version 1
    const kernels::cuda::DflashAttentionDims gqa2{1, 4096, 512, 16, 16, 8, 128, 64, 0.09f};  // 32 rows a block
    const kernels::cuda::DflashAttentionDims gqa8{1, 4096, 512, 16, 64, 8, 128, 64, 0.09f};  // 128 rows a block
    const kernels::cuda::DflashAttentionDims hd96{1, 4096, 512, 16, 32, 8, 96, 64, 0.1f};
    CHECK_FALSE(dflash_attention_backward_choice(gqa2, true, true).tma_chunks);
    CHECK_FALSE(dflash_attention_backward_choice(gqa8, true, true).tma_chunks);
    CHECK_FALSE(dflash_attention_backward_choice(hd96, true, true).tma_chunks);
    TestSeamsScope seams;
    test_seams().attention.dkdv = heur::Dkdv::split;  // no producer warpgroup
    CHECK_FALSE(dflash_attention_backward_choice(drafter, true, true).tma_chunks);
  }
}

#endif  // DFLASH_CUDA
