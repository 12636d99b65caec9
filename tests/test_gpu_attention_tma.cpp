// Version 2's producers loading by TMA against their per-row cp.async paths: dk/dv's chunks of
// query rows (tensor maps of q, dout, lse and delta; DFLASH_ATTENTION_DKDV_LOADS=threads) in the ws
// and fused modes, the same bits of dq, dk and dv; the forward's and dq's key tiles of context keys
// (k, v; DFLASH_ATTENTION_QUERY_LOADS=threads), the same bits of out, lse and dq. Where each applies.
// Suite "gpu-attention": it needs a GPU and fails without one.
#ifdef DFLASH_CUDA
#include <string>
#include <utility>

#include "kernels/cuda/cuda_kernels.h"
#include "tests/gpu_attention_cases.h"
#include "tests/gpu_attention_kernels.h"
#include "tests/gpu_test_util.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {

kernels::cuda::DflashAttentionDims dims_of(const Case& c) {
  return {c.B, c.S, c.N, c.bs, c.nh, c.nkv, c.hd, c.key_tile, c.scale()};
}

// c run by the kernels with TMA loads (which `by_tma` must say apply by default) and with
// `knob`=threads (which it must say turns them off): {tma, threads}.
std::pair<KernelResult, KernelResult> with_and_without_tma(const Case& c, uint64_t seed, const char* knob,
                                                           bool (*by_tma)(const kernels::cuda::DflashAttentionDims&,
                                                                          bool)) {
  const Data d = make_data(c, seed);
  REQUIRE(by_tma(dims_of(c), true));
  KernelResult tma = run_kernels(c, d, 2);
  ScopedEnv off(knob, "threads");
  CHECK_FALSE(by_tma(dims_of(c), true));
  return {std::move(tma), run_kernels(c, d, 2)};
}

// The backward with chunks by TMA (asked to be the default here) and by threads: the same bits
// of every gradient, accumulated and fresh, in the dq mode `dq` (separate: ws's dk/dv; fused).
void tma_is_threads(const Case& c, uint64_t seed, const char* dq) {
  INFO(c.describe() << ", dq " << std::string(dq));
  ScopedEnv ws("DFLASH_ATTENTION_DKDV", "ws");
  ScopedEnv mode("DFLASH_ATTENTION_DQ", dq);
  const auto [tma, threads] = with_and_without_tma(c, seed, "DFLASH_ATTENTION_DKDV_LOADS",
                                                   kernels::cuda::dflash_attention_dkdv_loads_by_tma);
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

// The query side (forward, dq in its own kernel, the ws mode) with context key tiles by TMA and
// by threads, over tiles of `keys`: the same bits of out, lse and dq, accumulated and fresh.
void query_tma_is_threads(const Case& c, uint64_t seed, const char* keys) {
  INFO(c.describe() << ", forward key tiles of " << std::string(keys));
  ScopedEnv ws("DFLASH_ATTENTION_QUERY", "ws");
  ScopedEnv tiles("DFLASH_ATTENTION_FORWARD_KEYS", keys);
  ScopedEnv separate("DFLASH_ATTENTION_DQ", "separate");
  const auto [tma, threads] = with_and_without_tma(c, seed, "DFLASH_ATTENTION_QUERY_LOADS",
                                                   kernels::cuda::dflash_attention_query_loads_by_tma);
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
    SUBCASE("the drafter's layout: S 4096, N 128; 128- and 64-key tiles") {
      const Case c{1, 4096, 128, 16, 32, 8, 128, 64, spread_anchors(1, 128, 4096, 16), std::vector<int32_t>(128, 1)};
      query_tma_is_threads(c, 820, "128");
      query_tma_is_threads(c, 821, "64");
    }
    SUBCASE("B 2, dropped blocks, anchors 0 and S; shuffled anchors; hd 64") {
      Case c{2, 1100, 40, 16, 8, 2, 128, 64, spread_anchors(2, 40, 1100, 16), std::vector<int32_t>(80, 1)};
      c.keep[0] = c.keep[17] = c.keep[40 + 39] = 0;
      c.anchors[5] = 0;
      c.anchors[40 + 7] = 1100;
      query_tma_is_threads(c, 825, "128");
      Case shuffled{1, 1500, 48, 16, 8, 2, 128, 64, shuffled_anchors(1, 48, 1500, 16, 13), std::vector<int32_t>(48, 1)};
      shuffled.keep[10] = 0;
      query_tma_is_threads(shuffled, 826, "64");
      query_tma_is_threads({1, 1500, 48, 16, 8, 2, 64, 64, spread_anchors(1, 48, 1500, 16), std::vector<int32_t>(48, 1)},
                           827, "128");
    }
  }

  TEST_CASE("the forward and dq TMA loads apply at hd 64 and 128 in the ws mode only") {
    REQUIRE_GPU();
    using kernels::cuda::dflash_attention_query_loads_by_tma;
    const kernels::cuda::DflashAttentionDims drafter{1, 4096, 512, 16, 32, 8, 128, 64, 0.09f};
    const kernels::cuda::DflashAttentionDims hd96{1, 4096, 512, 16, 32, 8, 96, 64, 0.1f};
    const kernels::cuda::DflashAttentionDims hd64{2, 1024, 128, 16, 16, 8, 64, 64, 0.125f};
    CHECK(dflash_attention_query_loads_by_tma(drafter, true));
    CHECK(dflash_attention_query_loads_by_tma(hd64, true));
    CHECK_FALSE(dflash_attention_query_loads_by_tma(hd96, true));
    CHECK_FALSE(dflash_attention_query_loads_by_tma(drafter, false));
    {
      ScopedEnv lockstep("DFLASH_ATTENTION_QUERY", "lockstep");  // no producer warpgroup
      CHECK_FALSE(dflash_attention_query_loads_by_tma(drafter, true));
    }
    ScopedEnv bad("DFLASH_ATTENTION_QUERY_LOADS", "bulk");
    CHECK_THROWS_WITH_AS(dflash_attention_query_loads_by_tma(drafter, true),
                         doctest::Contains("DFLASH_ATTENTION_QUERY_LOADS=bulk: use tma or threads"), std::runtime_error);
    const Case c{1, 200, 2, 16, 8, 2, 64, 64, {150, 40}, {1, 1}};
    CHECK_THROWS_WITH_AS(run_kernels(c, make_data(c, 829), 2),
                         doctest::Contains("DFLASH_ATTENTION_QUERY_LOADS=bulk: use tma or threads"), std::runtime_error);
  }

  TEST_CASE("version 2's dk/dv chunks by TMA give the per-row cp.async path's bits") {
    REQUIRE_GPU();
    SUBCASE("the drafter's layout: S 4096, N 128, nh 32, nkv 8, hd 128; ws and fused") {
      const Case c{1, 4096, 128, 16, 32, 8, 128, 64, spread_anchors(1, 128, 4096, 16), std::vector<int32_t>(128, 1)};
      tma_is_threads(c, 800, "separate");
      tma_is_threads(c, 801, "fused");
    }
    SUBCASE("B 2, dropped blocks (first, last, and of the second batch); shuffled anchors") {
      Case c{2, 1100, 40, 16, 8, 2, 128, 64, spread_anchors(2, 40, 1100, 16), std::vector<int32_t>(80, 1)};
      c.keep[0] = c.keep[17] = c.keep[40 + 39] = 0;
      tma_is_threads(c, 805, "separate");
      tma_is_threads(c, 806, "fused");
      Case shuffled{1, 1500, 48, 16, 8, 2, 128, 64, shuffled_anchors(1, 48, 1500, 16, 13), std::vector<int32_t>(48, 1)};
      shuffled.keep[10] = 0;
      tma_is_threads(shuffled, 807, "fused");
    }
    SUBCASE("hd 64 (one slab a tile); bs 4 with 16 heads a kv head (boxes of 4 slots x 16 heads)") {
      tma_is_threads({1, 1500, 48, 16, 8, 2, 64, 64, spread_anchors(1, 48, 1500, 16), std::vector<int32_t>(48, 1)}, 810,
                     "separate");
      tma_is_threads({1, 700, 96, 4, 16, 1, 128, 64, spread_anchors(1, 96, 700, 4), std::vector<int32_t>(96, 1)}, 811,
                     "fused");
    }
  }

  TEST_CASE("the dk/dv TMA loads apply only where a chunk is one block's rows, in the producer's modes") {
    REQUIRE_GPU();
    using kernels::cuda::dflash_attention_dkdv_loads_by_tma;
    const kernels::cuda::DflashAttentionDims drafter{1, 4096, 512, 16, 32, 8, 128, 64, 0.09f};
    CHECK(dflash_attention_dkdv_loads_by_tma(drafter, true));  // ws by default at 4096:512
    CHECK_FALSE(dflash_attention_dkdv_loads_by_tma(drafter, false));  // f32: version 1
    const kernels::cuda::DflashAttentionDims gqa2{1, 4096, 512, 16, 16, 8, 128, 64, 0.09f};   // 32 rows a block
    const kernels::cuda::DflashAttentionDims gqa8{1, 4096, 512, 16, 64, 8, 128, 64, 0.09f};   // 128 rows a block
    const kernels::cuda::DflashAttentionDims hd96{1, 4096, 512, 16, 32, 8, 96, 64, 0.1f};
    CHECK_FALSE(dflash_attention_dkdv_loads_by_tma(gqa2, true));
    CHECK_FALSE(dflash_attention_dkdv_loads_by_tma(gqa8, true));
    CHECK_FALSE(dflash_attention_dkdv_loads_by_tma(hd96, true));
    {
      ScopedEnv split("DFLASH_ATTENTION_DKDV", "split");  // no producer warpgroup
      CHECK_FALSE(dflash_attention_dkdv_loads_by_tma(drafter, true));
    }
    {
      ScopedEnv tma("DFLASH_ATTENTION_DKDV_LOADS", "tma");
      CHECK(dflash_attention_dkdv_loads_by_tma(drafter, true));
    }
    ScopedEnv bad("DFLASH_ATTENTION_DKDV_LOADS", "bulk");
    CHECK_THROWS_WITH_AS(dflash_attention_dkdv_loads_by_tma(drafter, true),
                         doctest::Contains("DFLASH_ATTENTION_DKDV_LOADS=bulk: use tma or threads"), std::runtime_error);
    const Case c{1, 200, 2, 16, 8, 2, 64, 64, {150, 40}, {1, 1}};
    ScopedEnv ws("DFLASH_ATTENTION_DKDV", "ws");
    CHECK_THROWS_WITH_AS(run_kernels(c, make_data(c, 815), 2),
                         doctest::Contains("DFLASH_ATTENTION_DKDV_LOADS=bulk: use tma or threads"), std::runtime_error);
  }
}

#endif  // DFLASH_CUDA
