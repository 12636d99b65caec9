// DFlash attention's CUDA kernel versions called directly (the op runs the heuristics' choice):
// version 1 (mma.sync) against version 2 (wgmma, sm_90a) on the drafter's layout and on GQA 1, 2,
// 4, 8, hd 64 and 96, dropped blocks and anchors in any order; version 2's backward the same bits
// twice; fresh (NaN-filled) gradients written over without being read; version 2's dk/dv modes (split,
// ws) each against version 1, its query side (the forward over 128-key tiles, dq in its own kernel)
// likewise; the fused backward (dq summed in dk/dv's kernel) against dq's own kernel and the same
// bits run after run, and its wait for a turn that never comes. Modes a shape's rules do not
// choose are reached through the test seams (kernels/cuda/test_seams.h).
// Suite "gpu-attention": it needs a GPU and fails without one.
#ifdef DFLASH_CUDA
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sys/wait.h>
#include <string>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/test_seams.h"
#include "tests/gpu_attention_cases.h"
#include "tests/gpu_attention_kernels.h"
#include "tests/gpu_test_util.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {

// Versions 1 and 2 agree up to bf16 rounding; version 2 writes every output element (no NaN from
// the poisoned buffers), gives dropped blocks output, lse and dq exactly 0, and the same bits twice.
void check_versions(const Case& c, uint64_t seed) {
  INFO(c.describe());
  const Data d = make_data(c, seed);
  const KernelResult v1 = run_kernels(c, d, 1), v2 = run_kernels(c, d, 2);
  for (auto [name, x] : {std::pair{"out", &v2.out}, {"lse", &v2.lse}, {"dq", &v2.dq}, {"dk", &v2.dk}, {"dv", &v2.dv}}) {
    INFO(std::string(name));
    CHECK(all_finite(*x));
  }
  INFO("relative differences v2 - v1: out " << rel_err(v2.out, v1.out) << ", lse " << rel_err(v2.lse, v1.lse)
                                            << ", dq " << rel_err(v2.dq, v1.dq) << ", dk " << rel_err(v2.dk, v1.dk)
                                            << ", dv " << rel_err(v2.dv, v1.dv));
  CHECK(rel_err(v2.out, v1.out) <= 1e-2);
  CHECK(rel_err(v2.lse, v1.lse) <= 1e-3);
  CHECK(rel_err(v2.dq, v1.dq) <= 2e-2);
  CHECK(rel_err(v2.dk, v1.dk) <= 2e-2);
  CHECK(rel_err(v2.dv, v1.dv) <= 2e-2);
  CHECK(max_abs(v2.dk) > 0);
  CHECK(bitwise_equal(v2.dq, v2.dq2));
  CHECK(bitwise_equal(v2.dk, v2.dk2));
  CHECK(bitwise_equal(v2.dv, v2.dv2));
  CHECK(bitwise_equal(v1.dk, v1.dk2));
  // Fresh gradients: every element written, the bits of adding to zeros (both versions).
  for (const KernelResult* r : {&v1, &v2}) {
    INFO("version " << (r == &v1 ? 1 : 2) << ", fresh gradients");
    CHECK(bitwise_equal(r->dq3, r->dq));
    CHECK(bitwise_equal(r->dk3, r->dk));
    CHECK(bitwise_equal(r->dv3, r->dv));
  }
  const size_t qrow = size_t(c.nh * c.hd);
  bool dropped_zero = true;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t a = 0; a < c.N; ++a) {
      if (c.keep[size_t(b * c.N + a)] != 0) continue;
      for (int64_t slot = 0; slot < c.bs; ++slot) {
        const size_t q0 = size_t(b * c.T() + a * c.bs + slot) * qrow;
        for (size_t e = 0; e < qrow; ++e)
          dropped_zero = dropped_zero && v2.out[q0 + e] == 0.0f && v2.dq[q0 + e] == 0.0f;
        for (int64_t h = 0; h < c.nh; ++h)
          dropped_zero = dropped_zero && v2.lse[size_t((b * c.nh + h) * c.T() + a * c.bs + slot)] == 0.0f;
      }
    }
  CHECK(dropped_zero);
}

// check_versions where some block is kept (it asks for some non-zero dk); a mode's tests end with it.
void check_versions_where_kept(const Case& c, uint64_t seed) {
  if (std::any_of(c.keep.begin(), c.keep.end(), [](int32_t k) { return k != 0; })) check_versions(c, seed);
}

namespace heur = kernels::heuristics;
using kernels::cuda::test_seams;
using kernels::cuda::TestSeamsScope;

// check_versions with version 2's dk/dv in `mode` (dq in its own kernel: fused walks other chunks).
void check_versions_in(heur::Dkdv mode, const Case& c, uint64_t seed) {
  INFO("dk/dv mode " << heur::name(mode));
  TestSeamsScope seams;
  test_seams().attention.dkdv = mode;
  test_seams().attention.dq = heur::Dq::separate;
  check_versions(c, seed);
}

// Version 2's query side (forward, dq in its own kernel): version 1's values (check_versions), and
// out, lse and dq the same bits on a second run.
void check_query_side(const Case& c, uint64_t seed) {
  INFO(c.describe());
  TestSeamsScope seams;
  test_seams().attention.dq = heur::Dq::separate;
  const Data d = make_data(c, seed);
  const KernelResult r = run_kernels(c, d, 2), again = run_kernels(c, d, 2);
  CHECK(all_finite(r.out));
  CHECK(all_finite(r.lse));
  CHECK(bitwise_equal(r.out, again.out));
  CHECK(bitwise_equal(r.lse, again.lse));
  CHECK(bitwise_equal(r.dq, again.dq));
  CHECK(bitwise_equal(r.dq3, r.dq));
  check_versions_where_kept(c, seed);
}

// The query side's cases where warpgroups skip tiles: B 2, S 1100, N 40, GQA 4 with dropped blocks
// (first, middle, last); anchors in random order with a repeat and a dropped block.
Case b2_dropped_blocks() {
  Case c{2, 1100, 40, 16, 8, 2, 128, 64, spread_anchors(2, 40, 1100, 16), std::vector<int32_t>(80, 1)};
  c.keep[0] = c.keep[17] = c.keep[40 + 39] = 0;
  return c;
}
Case shuffled_with_a_dropped_block() {
  Case c{1, 1500, 48, 16, 8, 2, 128, 64, shuffled_anchors(1, 48, 1500, 16, 13), std::vector<int32_t>(48, 1)};
  c.keep[10] = 0;
  return c;
}

// The fused backward's small case, also run by the stall test's child.
Case fused_small() { return {1, 300, 8, 16, 8, 2, 128, 64, spread_anchors(1, 8, 300, 16), std::vector<int32_t>(8, 1)}; }

}  // namespace

TEST_SUITE("gpu-attention") {
  TEST_CASE("CUDA kernel versions 1 and 2 agree; version 2's backward gives the same bits twice") {
    REQUIRE_GPU();
    REQUIRE_HOPPER();
    // Version 2's dk/dv kernel picks its mode by size (ws for the drafter's shape below, with dq
    // fused on 132 SMs; split for the small ones); the first three cases run as the rules choose,
    // then in both modes with dq in its own kernel.
    auto versions_in_every_mode = [](const Case& c, uint64_t seed) {
      check_versions(c, seed);
      for (heur::Dkdv mode : {heur::Dkdv::split, heur::Dkdv::ws}) check_versions_in(mode, c, seed);
    };
    SUBCASE("the drafter's layout: S 4096, N 128, nh 32, nkv 8, hd 128; every dk/dv mode") {
      const Case c{1, 4096, 128, 16, 32, 8, 128, 64, spread_anchors(1, 128, 4096, 16), std::vector<int32_t>(128, 1)};
      versions_in_every_mode(c, 600);
    }
    SUBCASE("B 2, S 1100, N 40, GQA 4, dropped blocks; every dk/dv mode") {
      versions_in_every_mode(b2_dropped_blocks(), 605);
    }
    SUBCASE("hd 64 with two chunks (fewer than the pipelines' stages ahead); shuffled anchors; every dk/dv mode") {
      versions_in_every_mode({1, 200, 2, 16, 8, 2, 64, 64, {150, 40}, {1, 1}}, 607);
      versions_in_every_mode(shuffled_with_a_dropped_block(), 608);
    }
    SUBCASE("B 2, S 3000, N 96, GQA 4, dropped blocks (first, middle, last)") {
      Case c{2, 3000, 96, 16, 8, 2, 128, 64, spread_anchors(2, 96, 3000, 16), std::vector<int32_t>(192, 1)};
      c.keep[0] = c.keep[50] = c.keep[95] = c.keep[96 + 40] = c.keep[96 + 41] = 0;
      check_versions(c, 610);
    }
    SUBCASE("GQA 1 (16 rows per block: 8 blocks per CTA)") {
      check_versions({1, 2000, 40, 16, 4, 4, 128, 64, spread_anchors(1, 40, 2000, 16), std::vector<int32_t>(40, 1)},
                     620);
    }
    SUBCASE("GQA 8 (128 rows per block: one block over both warpgroups)") {
      check_versions({1, 1500, 20, 16, 16, 2, 128, 64, spread_anchors(1, 20, 1500, 16), std::vector<int32_t>(20, 1)},
                     630);
    }
    SUBCASE("bs 4, GQA 2 (8 rows per block), hd 96 (padded to 128)") {
      check_versions({1, 900, 64, 4, 4, 2, 96, 64, spread_anchors(1, 64, 900, 4), std::vector<int32_t>(64, 1)}, 640);
    }
    SUBCASE("hd 64, GQA 4, B 2") {
      check_versions({2, 1500, 40, 16, 8, 2, 64, 64, spread_anchors(2, 40, 1500, 16), std::vector<int32_t>(80, 1)},
                     650);
    }
    SUBCASE("anchors in random order, with a repeat, 0 and S (kernels may rely on sorted anchors only for speed)") {
      check_versions(shuffled_with_a_dropped_block(), 660);
    }
    SUBCASE("no context (S = 0), and every block dropped") {
      check_versions({1, 0, 8, 16, 8, 2, 128, 64, std::vector<int32_t>(8, 0), std::vector<int32_t>(8, 1)}, 670);
      Case all_dropped{1, 300, 8, 16, 8, 2, 128, 64, spread_anchors(1, 8, 300, 16), std::vector<int32_t>(8, 0)};
      const Data d = make_data(all_dropped, 680);
      const KernelResult r = run_kernels(all_dropped, d, 2);
      CHECK(max_abs(r.out) == 0);
      CHECK(max_abs(r.dq) == 0);
      CHECK(max_abs(r.dk) == 0);
      CHECK(max_abs(r.dv) == 0);
      // Fresh: no row sees any key, so every CTA writes its zeros (none may keep the NaN fill).
      CHECK(bitwise_equal(r.dq3, r.dq));
      CHECK(bitwise_equal(r.dk3, r.dk));
      CHECK(bitwise_equal(r.dv3, r.dv));
    }
  }

  // Its name keeps the words the sanitizer parts select it by (scripts/gpu-test.sh: "query side in
  // the ws mode").
  TEST_CASE("version 2's query side in the ws mode (the forward over 128-key tiles, dq in its own kernel) against "
            "version 1, the same bits twice") {
    REQUIRE_GPU();
    REQUIRE_HOPPER();
    SUBCASE("the drafter's layout: S 4096, N 128, nh 32, nkv 8, hd 128 (many tiles per CTA, the ring wraps)") {
      check_query_side({1, 4096, 128, 16, 32, 8, 128, 64, spread_anchors(1, 128, 4096, 16),
                        std::vector<int32_t>(128, 1)},
                       700);
    }
    SUBCASE("B 2, S 1100, N 40, GQA 4, dropped blocks; shuffled anchors (warpgroups skip tiles); bs 4 with hd 96") {
      check_query_side(b2_dropped_blocks(), 705);
      check_query_side(shuffled_with_a_dropped_block(), 706);
      check_query_side({1, 700, 60, 4, 8, 4, 96, 64, spread_anchors(1, 60, 700, 4), std::vector<int32_t>(60, 1)}, 707);
    }
    // (S = 0 and every block dropped: the version test's last subcase, on the same kernels.)
    SUBCASE("hd 64, GQA 1; GQA 1 at hd 128 (8 blocks per CTA); one tile (fewer than the ring)") {
      check_query_side({2, 1500, 40, 16, 8, 8, 64, 64, spread_anchors(2, 40, 1500, 16), std::vector<int32_t>(80, 1)},
                       710);
      check_query_side({1, 2000, 40, 16, 4, 4, 128, 64, spread_anchors(1, 40, 2000, 16), std::vector<int32_t>(40, 1)},
                       712);
      check_query_side({1, 40, 2, 16, 8, 2, 128, 64, {20, 7}, {1, 1}}, 713);
    }
  }

  TEST_CASE("version 2's fused backward: dq summed in dk/dv's kernel, in a fixed order across CTAs") {
    REQUIRE_GPU();
    REQUIRE_HOPPER();
    // Against dq's own kernel and ws's dk/dv (the same products, other sums: bf16 rounding apart),
    // the same bits over repeated runs (the turns fix the order of the cross-CTA sums of dq), then
    // against version 1 as every mode is.
    auto fused_vs_separate = [](const Case& c, uint64_t seed) {
      INFO(c.describe());
      const Data d = make_data(c, seed);
      const kernels::cuda::DflashAttentionDims dims{c.B, c.S, c.N, c.bs, c.nh, c.nkv, c.hd, c.key_tile, c.scale()};
      TestSeamsScope seams;
      test_seams().attention.dkdv = heur::Dkdv::ws;
      test_seams().attention.dq = heur::Dq::separate;
      CHECK(kernels::cuda::dflash_attention_backward_scratch_bytes(dims, true, true, 2) == 0);
      const KernelResult separate = run_kernels(c, d, 2);
      test_seams().attention.dq = heur::Dq::fused;
      REQUIRE(kernels::cuda::dflash_attention_backward_scratch_bytes(dims, true, true, 2) > 0);
      const KernelResult fused = run_kernels(c, d, 2);
      CHECK(all_finite(fused.dq));
      INFO("dq fused vs separate: " << rel_err(fused.dq, separate.dq));
      CHECK(rel_err(fused.dq, separate.dq) <= 5e-3);
      // dk, dv: the same products, but over 64-row-aligned chunks walked last to first, so other sums.
      CHECK(rel_err(fused.dk, separate.dk) <= 5e-3);
      CHECK(rel_err(fused.dv, separate.dv) <= 5e-3);
      CHECK(bitwise_equal(fused.dq2, fused.dq));
      CHECK(bitwise_equal(fused.dq3, fused.dq));
      for (int again = 0; again < 3; ++again) {
        const KernelResult r = run_kernels(c, d, 2);
        CHECK(bitwise_equal(r.dq, fused.dq));
        CHECK(bitwise_equal(r.dk, fused.dk));
        CHECK(bitwise_equal(r.dv, fused.dv));
      }
      check_versions_where_kept(c, seed);
    };
    SUBCASE("the drafter's layout: 32 context CTAs per kv head take turns at every chunk") {
      fused_vs_separate(
          {1, 4096, 128, 16, 32, 8, 128, 64, spread_anchors(1, 128, 4096, 16), std::vector<int32_t>(128, 1)}, 730);
    }
    SUBCASE("B 2, GQA 4, dropped blocks; shuffled anchors with a repeat, 0 and S") {
      Case c{2, 3000, 96, 16, 8, 2, 128, 64, spread_anchors(2, 96, 3000, 16), std::vector<int32_t>(192, 1)};
      c.keep[0] = c.keep[50] = c.keep[95] = c.keep[96 + 40] = c.keep[96 + 41] = 0;
      fused_vs_separate(c, 735);
      fused_vs_separate(shuffled_with_a_dropped_block(), 736);
    }
    SUBCASE("GQA 1 (four blocks per chunk), GQA 8 (two chunks per block), bs 4 with hd 96") {
      fused_vs_separate({1, 2000, 40, 16, 4, 4, 128, 64, spread_anchors(1, 40, 2000, 16), std::vector<int32_t>(40, 1)},
                        740);
      fused_vs_separate({1, 1500, 20, 16, 16, 2, 128, 64, spread_anchors(1, 20, 1500, 16), std::vector<int32_t>(20, 1)},
                        741);
      fused_vs_separate({1, 900, 64, 4, 4, 2, 96, 64, spread_anchors(1, 64, 900, 4), std::vector<int32_t>(64, 1)}, 742);
    }
    SUBCASE("no context (S = 0), every block dropped, a small kept case") {
      fused_vs_separate({1, 0, 8, 16, 8, 2, 128, 64, std::vector<int32_t>(8, 0), std::vector<int32_t>(8, 1)}, 745);
      fused_vs_separate({1, 300, 8, 16, 8, 2, 128, 64, spread_anchors(1, 8, 300, 16), std::vector<int32_t>(8, 0)}, 746);
      fused_vs_separate(fused_small(), 747);
    }
    SUBCASE("by default at 4096:512 and not at 1024:128 with B = 4 (this GPU's SMs); forced, not at hd 64, bs 24, split") {
      const kernels::cuda::DflashAttentionDims d4096{1, 4096, 512, 16, 32, 8, 128, 64, 0.09f};
      const kernels::cuda::DflashAttentionDims d1024x4{4, 1024, 128, 16, 32, 8, 128, 64, 0.09f};
      CHECK(kernels::cuda::dflash_attention_backward_choice(d4096, true, true).dq == heur::Dq::fused);
      CHECK(kernels::cuda::dflash_attention_backward_scratch_bytes(d4096, true, true) > 0);
      CHECK(kernels::cuda::dflash_attention_backward_scratch_bytes(d1024x4, true, true) == 0);
      TestSeamsScope seams;
      test_seams().attention.dkdv = heur::Dkdv::ws;
      test_seams().attention.dq = heur::Dq::fused;
      CHECK(kernels::cuda::dflash_attention_backward_scratch_bytes(d1024x4, true, true, 2) > 0);
      const kernels::cuda::DflashAttentionDims hd64{1, 1500, 40, 16, 8, 2, 64, 64, 0.125f};
      const kernels::cuda::DflashAttentionDims bs24{1, 1500, 40, 24, 8, 2, 128, 64, 0.09f};
      const kernels::cuda::DflashAttentionDims ok{1, 1500, 40, 16, 8, 2, 128, 64, 0.09f};
      CHECK(kernels::cuda::dflash_attention_backward_scratch_bytes(hd64, true, true, 2) == 0);
      CHECK(kernels::cuda::dflash_attention_backward_scratch_bytes(bs24, true, true, 2) == 0);
      CHECK(kernels::cuda::dflash_attention_backward_scratch_bytes(ok, true, false, 2) == 0);  // no dq asked for
      CHECK(kernels::cuda::dflash_attention_backward_scratch_bytes(ok, true, true, 1) == 0);   // version 1
      // 1 x 2 kv heads x 40 chunks of 64 rows (40 blocks x 4 heads x 16 slots per kv head): 2 x 64 x 64
      // floats and a counter each.
      CHECK(kernels::cuda::dflash_attention_backward_scratch_bytes(ok, true, true, 2) == 2 * 40 * (2 * 64 * 64 * 4 + 4));
      test_seams().attention.dkdv = heur::Dkdv::split;
      CHECK(kernels::cuda::dflash_attention_backward_scratch_bytes(ok, true, true, 2) == 0);
    }
  }

  // Its own case, so that the sanitizer steps can leave it out by name (scripts/gpu-test.sh, excluded):
  // the child it starts traps on purpose, which a sanitizer reports as the child's error.
  TEST_CASE("version 2's fused backward: a turn that never comes stops the kernel with an error, not a hang") {
    REQUIRE_GPU();
    REQUIRE_HOPPER();
    // In a child process (the trap ends its CUDA context), the skipped case below: every turn waits
    // for one that never comes, with a 1 s wait.
    const CommandOutput child = run_command("timeout 120 " + self_binary() +
                                            " --no-skip --test-case='*stalled turns (the child of*'");
    const std::string& text = child.text;
    const int status = child.status;
    INFO(text);
    CHECK(status != 0);
    CHECK(WEXITSTATUS(status) != 124);  // not timeout's: the kernel stopped itself
    CHECK(text.find("fused dq): chunk") != std::string::npos);
    CHECK(text.find("waited 1.") != std::string::npos);
    CHECK(text.find("report this with the shape") != std::string::npos);
  }

  // Run only by the case above, in its own process (skipped unless --no-skip).
  TEST_CASE("version 2's fused backward with stalled turns (the child of the never-coming turn's case)" *
            doctest::skip()) {
    REQUIRE_GPU();
    TestSeamsScope seams;
    test_seams().attention.dkdv = heur::Dkdv::ws;
    test_seams().attention.dq = heur::Dq::fused;
    test_seams().dq_stall = true;
    test_seams().dq_wait_s = 1;
    const Case c = fused_small();
    run_kernels(c, make_data(c, 747), 2);
  }

  TEST_CASE("a kernel version other than 0, 1 and 2 is refused, naming the choices") {
    REQUIRE_GPU();
    const Case c{1, 200, 2, 16, 8, 2, 64, 64, {150, 40}, {1, 1}};
    CHECK_THROWS_WITH_AS(run_kernels(c, make_data(c, 720), 3),
                         doctest::Contains("kernel version 3 does not exist; use 0 (the heuristics' choice), 1 "
                                           "(mma.sync) or 2 (wgmma, sm_90)"),
                         std::runtime_error);
  }
}

#endif  // DFLASH_CUDA
