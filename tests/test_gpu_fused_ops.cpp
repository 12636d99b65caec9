// The target's forward-only fused CUDA ops (add_rmsnorm, rmsnorm_rope, swiglu_halves) against
// the unfused CUDA ops' bits and the CPU's values. Suite "gpu-ops" (the sanitize-fused step of
// scripts/gpu-check.sh runs these cases): it needs a GPU and fails without one.
#ifdef DFLASH_CUDA
#include "tests/gpu_op_harness.h"

using namespace dflash;
using namespace dflash::test;
using namespace dflash::test::gpu_ops;

TEST_SUITE("gpu-ops") {
  TEST_CASE("fused add_rmsnorm and rmsnorm_rope: the unfused CUDA ops' bits, and the CPU's values") {
    REQUIRE_GPU();
    Backends be;
    auto same_bits = [&](const std::vector<In>& in, const OpFn& fused, const OpFn& unfused) {
      for (DType dt : {DType::f32, DType::bf16}) {
        INFO("dtype " << std::string(dtype_name(dt)));
        const Result a = run(be.gpu, dt, in, fused), b = run(be.gpu, dt, in, unfused);
        REQUIRE(a.outs.size() == b.outs.size());
        for (size_t k = 0; k < a.outs.size(); ++k) CHECK(bitwise_equal(a.outs[k], b.outs[k]));
      }
      check_parity(be, in, fused);
    };
    // D = 4096: 16 packs a lane (bf16); 2048 over 999 rows: 8 packs a lane in bf16, 16 in f32, a
    // partial last block; 128, 64: one to four; 40: the unfused fallback (5 packs of 8); 1000 rows:
    // many blocks and a partial last one. f32 at 4096 (32 packs a lane) falls back too.
    for (Shape xs : {Shape{3, 4096}, Shape{999, 2048}, Shape{5, 128}, Shape{1000, 64}, Shape{7, 40}, Shape{2, 3, 256}}) {
      INFO("x " << xs.str());
      const int64_t D = xs.last();
      std::vector<float> w = random_floats(size_t(D), 41, 0.2f);
      for (float& x : w) x += 1.0f;
      std::vector<In> in{rnd(Role::frozen, xs, 42), rnd(Role::frozen, xs, 43), In{{D}, Role::frozen, w, {}}};
      same_bits(
          in,
          [](auto& a) {
            ops::AddRmsnorm r = ops::add_rmsnorm(a[0], a[1], a[2], 1e-6f);
            return std::vector<Tensor>{r.sum, r.normed};
          },
          [](auto& a) {
            Tensor r = ops::add(a[0], a[1]);
            return std::vector<Tensor>{r, ops::rmsnorm(r, a[2], 1e-6f)};
          });
    }
    struct Case {
      int64_t B, L, hq, hk, hd;
    };
    // hd 128 / 64: fused (16 / 8 lanes a head in bf16, a block's 256 threads taking 16 / 32 heads
    // a round); 40, 30 and 72 heads: partial last rounds; 2 heads over 2 x 300 rows: most of a
    // block idle; hd 16 (bf16: 2 lanes a head); hd 96 (12 packs) and hd 8 in bf16 (one pack): the
    // unfused fallback; hd 8 in f32: 2 lanes.
    for (Case c : {Case{2, 5, 4, 2, 128}, Case{1, 9, 32, 8, 128}, Case{2, 33, 32, 8, 128}, Case{1, 6, 24, 6, 128},
                   Case{1, 5, 64, 8, 128}, Case{2, 300, 1, 1, 64}, Case{3, 40, 5, 3, 16}, Case{1, 7, 3, 1, 64},
                   Case{1, 4, 2, 1, 96}, Case{2, 3, 2, 2, 8}}) {
      INFO("B " << c.B << " L " << c.L << " heads " << c.hq << "/" << c.hk << " hd " << c.hd);
      std::vector<int32_t> pos = random_ids(size_t(c.B * c.L), 32768, 44);
      pos[0] = 0;
      std::vector<float> wq = random_floats(size_t(c.hd), 45, 0.2f), wk = random_floats(size_t(c.hd), 46, 0.2f);
      for (float& x : wq) x += 1.0f;
      std::vector<In> in{rnd(Role::frozen, {c.B, c.L, c.hq, c.hd}, 47),
                         rnd(Role::frozen, {c.B, c.L, c.hk, c.hd}, 48),
                         In{{c.hd}, Role::frozen, wq, {}},
                         In{{c.hd}, Role::frozen, wk, {}},
                         ints({c.B, c.L}, pos),
                         f32c({c.hd / 2}, inv_freq(c.hd))};
      same_bits(
          in,
          [](auto& a) {
            ops::RopedQK r = ops::rmsnorm_rope(a[0], a[1], a[2], a[3], a[4], a[5], 1e-6f);
            return std::vector<Tensor>{r.q, r.k};
          },
          [](auto& a) {
            return std::vector<Tensor>{ops::rope(ops::rmsnorm(a[0], a[2], 1e-6f), a[4], a[5]),
                                       ops::rope(ops::rmsnorm(a[1], a[3], 1e-6f), a[4], a[5])};
          });
    }
  }

  TEST_CASE("swiglu_halves: CUDA swiglu's bits on the halves, and the CPU's values") {
    REQUIRE_GPU();
    Backends be;
    // I = 12288: the target's width (16-byte packs); 64 rows of 24: packs, many blocks; 200 rows of
    // 12288 and 100000 of 24: more packs than threads, so a thread's walk crosses rows; I = 5 and 4
    // (f32 packs of 4, bf16 one by one): the scalar path.
    for (Shape s : {Shape{3, 12288}, Shape{64, 24}, Shape{200, 12288}, Shape{100000, 24}, Shape{2, 3, 5}, Shape{7, 4}}) {
      INFO("gate and up " << s.str());
      std::vector<In> in{rnd(Role::frozen, s, 51), rnd(Role::frozen, s, 52)};
      const OpFn fused = [](auto& a) { return std::vector<Tensor>{ops::swiglu_halves(ops::concat(a[0], a[1], -1))}; };
      const OpFn unfused = [](auto& a) { return std::vector<Tensor>{ops::swiglu(a[0], a[1])}; };
      for (DType dt : {DType::f32, DType::bf16}) {
        INFO("dtype " << std::string(dtype_name(dt)));
        const Result a = run(be.gpu, dt, in, fused), b = run(be.gpu, dt, in, unfused);
        REQUIRE(a.outs.size() == 1);
        CHECK(bitwise_equal(a.outs[0], b.outs[0]));
      }
      check_parity(be, in, fused);
    }
  }

}
#endif
