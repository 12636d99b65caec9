// DFlash block-sparse attention on CUDA against the CPU op on identical inputs: forward output,
// tiles visited, and the backward's dq, dk, dv (f32 and bf16; GQA 1, 2, 4; partial tiles; anchors
// at 0, S-bs and between, also in random order; dropped blocks), determinism, recorded-program
// replay == eager (with runtime.kernels "auto" and "portable"), and the CUDA-only errors. The op runs the default kernel version (2, wgmma, for
// bf16 with hd <= 128 on sm_90; 1 otherwise: kernels/heuristics.h); one case runs version 1 on
// any GPU through the test seam; tests/test_gpu_attention_versions.cpp compares the versions
// directly. Suite "gpu-attention": it needs a GPU and fails without one.
#ifdef DFLASH_CUDA
#include <chrono>
#include <cmath>

#include "graphs/program.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/test_seams.h"
#include "runtime/cuda/cuda_backend.h"
#include "tests/gpu_attention_cases.h"
#include "tests/gpu_test_util.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] - b[i];
  return r;
}

struct Result {
  std::vector<float> out, dq, dk, dv;  // dq, dk, dv: what the backward added to the prefilled gradients
  int32_t tiles = -1;
};

// Forward and backward on ctx. Float inputs are rounded to dt first, so both backends see the
// same values: f32 tensors on the CPU, dt on CUDA. q, k, v are trainable leaves (f32 gradients);
// with through_nonleaf the op sees scale(x, 1), so its own gradients are of dtype dt.
Result run(Context& ctx, DType dt, const Case& c, const Data& d, bool through_nonleaf = false) {
  ContextScope scope(ctx);
  const DType fdt = ctx.device().is_cpu() ? DType::f32 : dt;
  Tensor q = make_float(c.q_shape(), round_to(dt, d.q), fdt), k = make_float(c.kv_shape(), round_to(dt, d.k), fdt),
         v = make_float(c.kv_shape(), round_to(dt, d.v), fdt);
  for (auto [t, pre] : {std::pair{&q, &d.gq}, {&k, &d.gk}, {&v, &d.gv}}) {
    t->set_requires_grad(true);
    t->grad().copy_from_host(pre->data(), pre->size() * sizeof(float));
  }
  auto arg = [&](const Tensor& t) { return through_nonleaf ? ops::scale(t, 1.0f) : t; };
  Tensor anchors = Tensor::from_ints({c.B, c.N}, c.anchors), keep = Tensor::from_ints({c.B, c.N}, c.keep);
  ops::Attention r = ops::dflash_attention(arg(q), arg(k), arg(v), anchors, keep, c.S, c.bs, c.scale(), c.key_tile);
  Tensor dout = make_float(r.out.shape(), round_to(dt, d.dout), r.out.dtype());
  run_backward({r.out}, {dout});
  Result res;
  res.out = r.out.to_floats();
  res.tiles = r.tiles_visited.to_ints()[0];
  res.dq = minus(q.grad().to_floats(), d.gq);
  res.dk = minus(k.grad().to_floats(), d.gk);
  res.dv = minus(v.grad().to_floats(), d.gv);
  return res;
}

// Dropped blocks: output rows and dq rows exactly 0, and their own draft keys get exactly no
// dk or dv (nothing else sees them).
void check_dropped_blocks(const Case& c, const Result& r) {
  const size_t qrow = size_t(c.nh * c.hd), kvrow = size_t(c.nkv * c.hd);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t a = 0; a < c.N; ++a) {
      if (c.keep[size_t(b * c.N + a)] != 0) continue;
      INFO("dropped block " << a << " of sequence " << b);
      bool zero = true;
      for (int64_t s = 0; s < c.bs; ++s) {
        const size_t q0 = size_t(b * c.T() + a * c.bs + s) * qrow;
        const size_t k0 = size_t(b * c.keys() + c.S + a * c.bs + s) * kvrow;
        for (size_t e = 0; e < qrow; ++e) zero = zero && r.out[q0 + e] == 0.0f && r.dq[q0 + e] == 0.0f;
        for (size_t e = 0; e < kvrow; ++e) zero = zero && r.dk[k0 + e] == 0.0f && r.dv[k0 + e] == 0.0f;
      }
      CHECK(zero);
    }
}

// CUDA against the CPU op in f32 (tolerance 1e-4 of the largest magnitude) and bf16 (2e-2).
void check_parity(const Case& c, uint64_t seed, bool through_nonleaf = false) {
  INFO(c.describe());
  CAPTURE(through_nonleaf);
  Context cpu{Device::cpu()}, gpu{Device::cuda(0)};
  const Data d = make_data(c, seed);
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO("dtype " << std::string(dtype_name(dt)));
    const double tol = dt == DType::f32 ? 1e-4 : 2e-2;
    const Result g = run(gpu, dt, c, d, through_nonleaf), h = run(cpu, dt, c, d, through_nonleaf);
    for (auto [name, x] : {std::pair{"out", &g.out}, {"dq", &g.dq}, {"dk", &g.dk}, {"dv", &g.dv}}) {
      INFO(std::string(name));
      CHECK(all_finite(*x));
    }
    INFO("relative errors: out " << rel_err(g.out, h.out) << ", dq " << rel_err(g.dq, h.dq) << ", dk "
                                 << rel_err(g.dk, h.dk) << ", dv " << rel_err(g.dv, h.dv));
    CHECK(rel_err(g.out, h.out) <= tol);
    CHECK(rel_err(g.dq, h.dq) <= tol);
    CHECK(rel_err(g.dk, h.dk) <= tol);
    CHECK(rel_err(g.dv, h.dv) <= tol);
    if (expected_tiles(c) > 0) CHECK(max_abs(h.dk) > 0);
    CHECK(g.tiles == h.tiles);
    CHECK(g.tiles == expected_tiles(c));
    check_dropped_blocks(c, g);
  }
}

bool identical(const Result& a, const Result& b) {
  return bitwise_equal(a.out, b.out) && bitwise_equal(a.dq, b.dq) && bitwise_equal(a.dk, b.dk) &&
         bitwise_equal(a.dv, b.dv) && a.tiles == b.tiles;
}

}  // namespace

TEST_SUITE("gpu-attention") {
  TEST_CASE("CUDA equals the CPU op: GQA 1, 2, 4; partial tiles; anchors at 0, S-bs and between; dropped blocks") {
    REQUIRE_GPU();
    SUBCASE("GQA 1, hd 64, bs 4, S = 100 (not a multiple of the tile), anchors on and off tile edges") {
      check_parity({2, 100, 4, 4, 2, 2, 64, 64, {0, 96, 37, 64, 5, 100, 63, 1000000}, {1, 1, 1, 0, 1, 1, 1, 0}}, 10);
    }
    SUBCASE("GQA 2, hd 128, bs 16, key_tile 32") {
      check_parity({1, 77, 3, 16, 4, 2, 128, 32, {61, 0, 40}, {1, 1, 1}}, 20);
    }
    SUBCASE("GQA 4, hd 64, bs 16; anchors outside [0, S] act as clamped") {
      check_parity({2, 130, 3, 16, 8, 2, 64, 64, {0, 64, 114, -3, 129, 500}, {1, 1, 1, 1, 1, 0}}, 30);
    }
    SUBCASE("GQA 4, hd 128, bs 16, through bf16 non-leaf gradients") {
      check_parity({2, 130, 3, 16, 8, 2, 128, 64, {0, 64, 114, 7, 70, 1}, {1, 0, 1, 1, 1, 1}}, 40, true);
    }
    SUBCASE("GQA 8 with bs 16: 128 query rows per kv head, several CTAs per block") {
      check_parity({1, 90, 2, 16, 16, 2, 128, 64, {74, 33}, {1, 1}}, 50);
    }
    SUBCASE("bs 64, hd 64: a full draft tile") {
      check_parity({1, 140, 2, 64, 2, 1, 64, 64, {76, 10}, {1, 1}}, 60);
    }
    SUBCASE("no context (S = 0)") {
      check_parity({1, 0, 2, 4, 2, 2, 64, 64, {0, 0}, {1, 1}}, 70);
    }
    SUBCASE("every block dropped") {
      check_parity({1, 50, 2, 4, 2, 1, 64, 64, {10, 20}, {0, 0}}, 80);
    }
    SUBCASE("head dims 8, 96 and 256 (padded to the kernels' 64, 128, 256)") {
      check_parity({1, 20, 2, 4, 4, 4, 8, 8, {16, 3}, {1, 1}}, 90);
      check_parity({1, 50, 2, 4, 2, 1, 96, 64, {46, 17}, {1, 1}}, 91);
      check_parity({1, 70, 2, 8, 2, 1, 256, 64, {62, 17}, {1, 1}}, 92);
      check_parity({1, 70, 2, 8, 4, 2, 256, 64, {62, 33}, {1, 0}}, 93, true);
    }
  }

  TEST_CASE("CUDA equals the CPU op with the drafter's head layout: B 2, S 1000 (no tile multiple), GQA 4 and 1") {
    REQUIRE_GPU();
    // Anchors at 0 and at S - bs in both sequences, contexts of up to 16 key tiles, dropped blocks
    // (the first of sequence 0, two of sequence 1).
    Case gqa4{2, 1000, 24, 16, 8, 2, 128, 64, spread_anchors(2, 24, 1000, 16), std::vector<int32_t>(48, 1)};
    gqa4.keep[0] = gqa4.keep[24 + 7] = gqa4.keep[24 + 8] = 0;
    Case gqa1{2, 700, 12, 16, 2, 2, 128, 64, spread_anchors(2, 12, 700, 16), std::vector<int32_t>(24, 1)};
    gqa1.keep[5] = gqa1.keep[23] = 0;
    SUBCASE("GQA 4") { check_parity(gqa4, 500); }
    SUBCASE("GQA 1") { check_parity(gqa1, 510); }
  }

  TEST_CASE("CUDA equals the CPU op on a larger case (S 1024, N 32, bs 16, nh 8, nkv 2, hd 128)") {
    REQUIRE_GPU();
    Case c{1, 1024, 32, 16, 8, 2, 128, 64, spread_anchors(1, 32, 1024, 16), std::vector<int32_t>(32, 1)};
    c.keep[5] = c.keep[17] = 0;
    c.anchors[9] = c.anchors[8];  // equal anchors are allowed by the kernels
    check_parity(c, 100);
  }

  TEST_CASE("CUDA equals the CPU op with the portable kernels (version 1) forced where the rules choose version 2") {
    REQUIRE_GPU();
    kernels::cuda::TestSeamsScope seams;
    kernels::cuda::test_seams().attention.portable = true;
    check_parity({2, 100, 4, 4, 2, 2, 64, 64, {0, 96, 37, 64, 5, 100, 63, 1000000}, {1, 1, 1, 0, 1, 1, 1, 0}}, 11);
    check_parity({2, 130, 3, 16, 8, 2, 128, 64, {0, 64, 114, 7, 70, 1}, {1, 0, 1, 1, 1, 1}}, 41, true);
    check_parity({1, 90, 2, 16, 16, 2, 128, 64, {74, 33}, {1, 1}}, 51);
    Case c{1, 1024, 32, 16, 8, 2, 128, 64, spread_anchors(1, 32, 1024, 16), std::vector<int32_t>(32, 1)};
    c.keep[5] = c.keep[17] = 0;
    check_parity(c, 101);
  }

  TEST_CASE("CUDA equals the CPU op with anchors in random order, repeats and drops; N > 128") {
    REQUIRE_GPU();
    // The kernels may rely on sorted anchors only for speed. N = 160 > 128 makes the dk/dv search
    // for the first block that sees a key tile take more than one round of 128 blocks.
    Case small{1, 512, 160, 4, 4, 2, 64, 64, shuffled_anchors(1, 160, 512, 4, 7), std::vector<int32_t>(160, 1)};
    for (int i = 0; i < 160; i += 9) small.keep[size_t(i)] = 0;
    // The drafter's head layout (GQA 4, bs 16, hd 128) with two sequences.
    Case wide{2, 700, 24, 16, 8, 2, 128, 64, shuffled_anchors(2, 24, 700, 16, 11), std::vector<int32_t>(48, 1)};
    wide.keep[3] = wide.keep[30] = 0;
    SUBCASE("bs 4, GQA 2, hd 64, N 160") { check_parity(small, 400); }
    SUBCASE("bs 16, GQA 4, hd 128, B 2") { check_parity(wide, 410); }
    SUBCASE("the same calls twice give the same bits") {
      Context gpu{Device::cuda(0)};
      for (const Case* c : {&small, &wide}) {
        const Data d = make_data(*c, 420);
        for (DType dt : {DType::f32, DType::bf16}) {
          INFO("dtype " << std::string(dtype_name(dt)) << ", N " << c->N);
          CHECK(identical(run(gpu, dt, *c, d), run(gpu, dt, *c, d)));
        }
      }
    }
  }

  TEST_CASE("CUDA attention is deterministic: the same call twice gives the same bits") {
    REQUIRE_GPU();
    Case c{2, 1024, 32, 16, 8, 2, 128, 64, spread_anchors(2, 32, 1024, 16), std::vector<int32_t>(64, 1)};
    c.keep[3] = c.keep[40] = 0;
    Context gpu{Device::cuda(0)};
    const Data d = make_data(c, 200);
    for (DType dt : {DType::f32, DType::bf16}) {
      INFO("dtype " << std::string(dtype_name(dt)));
      CHECK(identical(run(gpu, dt, c, d), run(gpu, dt, c, d)));
      CHECK(identical(run(gpu, dt, c, d, true), run(gpu, dt, c, d, true)));
    }
  }

  TEST_CASE("a recorded program replays attention forward and backward bit for bit like eager") {
    REQUIRE_GPU();
    const KernelPaths paths = each_kernel_paths();  // on an H100: the wgmma kernels, then the mma.sync ones
    KernelPathsScope chosen(paths);
    expect_kernel_paths(paths);
    Case c{2, 300, 8, 16, 8, 2, 128, 64, spread_anchors(2, 8, 300, 16), std::vector<int32_t>(16, 1)};
    c.keep[2] = 0;
    const kernels::cuda::DflashAttentionDims dims{c.B, c.S, c.N, c.bs, c.nh, c.nkv, c.hd, c.key_tile, c.scale()};
    if (paths == KernelPaths::portable)
      CHECK_FALSE(kernels::cuda::dflash_attention_backward_choice(dims, true, true).sm90);
    const Data d = make_data(c, 300);
    for (DType dt : {DType::bf16, DType::f32}) {
      INFO("dtype " << std::string(dtype_name(dt)));
      Context ctx{Device::cuda(0)};
      ContextScope scope(ctx);
      Tensor q = make_float(c.q_shape(), d.q, dt), k = make_float(c.kv_shape(), d.k, dt),
             v = make_float(c.kv_shape(), d.v, dt), dout = make_float(c.q_shape(), d.dout, dt);
      for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
      Tensor anchors = Tensor::from_ints({c.B, c.N}, c.anchors), keep = Tensor::from_ints({c.B, c.N}, c.keep);
      Tensor out = Tensor::persistent(c.q_shape(), dt), tiles = Tensor::persistent({1}, DType::i32);
      auto body = [&] {
        ops::Attention r = ops::dflash_attention(q, k, v, anchors, keep, c.S, c.bs, c.scale(), c.key_tile);
        ops::copy_(out, r.out);
        ops::copy_(tiles, r.tiles_visited);
        run_backward({r.out}, {dout});
      };
      auto reset = [&] {
        for (Tensor* t : {&q, &k, &v}) {
          std::vector<float> zero(size_t(t->numel()), 0.0f);
          t->grad().copy_from_host(zero.data(), zero.size() * sizeof(float));
        }
        ops::fill_(out, NAN);
        int32_t none = -1;
        tiles.copy_from_host(&none, sizeof(none));
        ctx.synchronize();
      };
      auto read = [&] {
        ctx.synchronize();
        return Result{out.to_floats(), q.grad().to_floats(), k.grad().to_floats(), v.grad().to_floats(),
                      tiles.to_ints()[0]};
      };
      reset();
      body();
      const Result eager = read();
      REQUIRE(all_finite(eager.out));
      REQUIRE(max_abs(eager.dk) > 0);
      CHECK(eager.tiles == expected_tiles(c));

      reset();
      ctx.reserve_arena(plan_program(ctx, "attention", body).arena_bytes);
      Program program = record_program(ctx, "attention", body);
      ctx.synchronize();
      CHECK(std::isnan(out.to_floats()[0]));  // recording ran nothing
      for (int round = 0; round < 2; ++round) {
        INFO("replay round " << round);
        reset();
        program.replay();
        CHECK(identical(read(), eager));
      }
    }
  }

  TEST_CASE("the drafter's hot shape runs and reports its speed (B 1, S 4096, N 512, bs 16, nh 32, nkv 8, hd 128)") {
    REQUIRE_GPU();
    Case c{1, 4096, 512, 16, 32, 8, 128, 64, spread_anchors(1, 512, 4096, 16), std::vector<int32_t>(512, 1)};
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    Tensor q = make_float(c.q_shape(), random_floats(size_t(c.q_shape().numel()), 1), DType::bf16);
    Tensor k = make_float(c.kv_shape(), random_floats(size_t(c.kv_shape().numel()), 2), DType::bf16);
    Tensor v = make_float(c.kv_shape(), random_floats(size_t(c.kv_shape().numel()), 3), DType::bf16);
    Tensor dout = make_float(c.q_shape(), random_floats(size_t(c.q_shape().numel()), 4), DType::bf16);
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
    Tensor anchors = Tensor::from_ints({c.B, c.N}, c.anchors), keep = Tensor::from_ints({c.B, c.N}, c.keep);
    auto attend = [&] { return ops::dflash_attention(q, k, v, anchors, keep, c.S, c.bs, c.scale(), c.key_tile); };
    using clock = std::chrono::steady_clock;
    auto ms_since = [](clock::time_point t0) {
      return std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    };
    {
      ops::Attention r = attend();  // warm-up, and a sanity check
      run_backward({r.out}, {dout});
      CHECK(all_finite(r.out.to_floats()));
      CHECK(r.tiles_visited.to_ints()[0] == expected_tiles(c));
      CHECK(all_finite(k.grad().to_floats()));
    }
    const int reps = 10;
    ctx.synchronize();
    clock::time_point t0 = clock::now();
    {
      NoGrad no_grad;
      for (int i = 0; i < reps; ++i) attend();
      ctx.synchronize();
    }
    const double fwd_ms = ms_since(t0) / reps;
    double bwd_ms = 0;
    for (int i = 0; i < reps; ++i) {
      ops::Attention r = attend();
      ctx.synchronize();
      t0 = clock::now();
      run_backward({r.out}, {dout});
      ctx.synchronize();
      bwd_ms += ms_since(t0) / reps;
    }
    // Forward FLOPs: Q K^T and P V over the visible keys; backward counted as 2.5x (five products).
    double flops = 0;
    for (int64_t a = 0; a < c.N; ++a)
      flops += 4.0 * double(c.bs) * double(c.anchors[size_t(a)] + c.bs) * double(c.hd) * double(c.nh);
    MESSAGE("dflash_attention bf16 hot shape: forward " << fwd_ms << " ms (" << flops / fwd_ms * 1e-9
                                                        << " TFLOP/s), backward " << bwd_ms << " ms ("
                                                        << 2.5 * flops / bwd_ms * 1e-9 << " TFLOP/s)");
  }

  TEST_CASE("CUDA-only attention errors name the tensors and the fix") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    // S = 5, block_size 2, N = 2: T = 4 and S+T = 9.
    Tensor anchors = Tensor::from_ints({1, 2}, {1, 3}), keep = Tensor::from_ints({1, 2}, {1, 1});
    auto call = [&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return ops::dflash_attention(q, k, v, anchors, keep, 5, 2, 0.5f, 64);
    };
    auto bf = [](const Shape& s, uint64_t seed) {
      return make_float(s, random_floats(size_t(s.numel()), seed), DType::bf16);
    };
    CHECK_NOTHROW(call(bf({1, 4, 2, 8}, 1), bf({1, 9, 1, 8}, 2), bf({1, 9, 1, 8}, 3)));
    CHECK_THROWS_WITH_AS(call(bf({1, 4, 2, 12}, 1), bf({1, 9, 1, 12}, 2), bf({1, 9, 1, 12}, 3)),
                         doctest::Contains("has head dim 12; the CUDA kernel needs a multiple of 8 in [8, 256]"),
                         Error);
    CHECK_THROWS_WITH_AS(call(bf({1, 4, 2, 8}, 1), make_float({1, 9, 1, 8}, random_floats(72, 2), DType::f32),
                              bf({1, 9, 1, 8}, 3)),
                         doctest::Contains("on CUDA they must share one dtype (bf16 or f32)"), Error);
    Tensor flat = bf({65}, 4);
    CHECK_THROWS_WITH_AS(call(flat.rows(1, 65).reshape({1, 4, 2, 8}), bf({1, 9, 1, 8}, 2), bf({1, 9, 1, 8}, 3)),
                         doctest::Contains("q bf16[1,4,2,8] does not start at a 16-byte aligned address"), Error);
  }
}

#endif  // DFLASH_CUDA
