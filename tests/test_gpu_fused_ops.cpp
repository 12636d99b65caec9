// The target's forward-only fused CUDA ops (add_rmsnorm, rmsnorm_rope, swiglu_halves) against
// the unfused CUDA ops' bits and the CPU's values; linear_residual (the residual add in the GEMM's
// epilogue) against the CPU and a double reference. Suite "gpu-ops" (scripts/gpu-test.sh's sanitizer
// steps run these cases): it needs a GPU and fails without one.
#ifdef DFLASH_CUDA
#include <cstring>

#include "graphs/program.h"
#include "kernels/cuda/gemm_candidates.h"
#include "runtime/cuda/gemm_tuner.h"
#include "runtime/decode_ops.h"
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
    // many blocks and a partial last one. f32 at 4096 (32 packs a lane) falls back too. Grids that
    // leave SMs idle take fewer rows a block and load the weights ahead (all but 1500 x 4096, whose
    // full blocks fill a GPU of up to 187 SMs).
    for (Shape xs : {Shape{3, 4096}, Shape{1500, 4096}, Shape{999, 2048}, Shape{5, 128}, Shape{1000, 64}, Shape{7, 40},
                     Shape{2, 3, 256}}) {
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
    // a round); 40, 30 and 72 heads: partial last rounds (72: five rounds in bf16, nine in f32, so
    // rounds past the four loaded before the angles); 2 heads over 2 x 300 rows: most of a
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

  TEST_CASE("rmsnorm_rope_into_slots: the unfused ops' bits on CUDA, and the CPU's values") {
    REQUIRE_GPU();
    Backends be;
    struct Case {
      int64_t n, nh, nkv, hd;
    };
    // Qwen3-8B's heads (the fused kernel, 16 lanes a head in bf16, 32 in f32); 4 / 2 heads of 64; hd
    // 96 (12 packs) and 40 (5): the unfused ops. Rows: a padding row (slot and position -1), one at
    // the cache's last position, one past it, one with a slot past the cache (none written), and
    // two in the same slot.
    for (Case c : {Case{7, 32, 8, 128}, Case{7, 4, 2, 64}, Case{7, 2, 1, 96}, Case{7, 3, 1, 40}}) {
      INFO("n " << c.n << " heads " << c.nh << "/" << c.nkv << " hd " << c.hd);
      const int64_t S = 3, C = 6, W = (c.nh + 2 * c.nkv) * c.hd;
      const std::vector<int32_t> slot{0, -1, 2, 1, 1, 3, 2}, pos{5, -1, 0, 6, 2, 1, 3};
      std::vector<float> wq = random_floats(size_t(c.hd), 45, 0.2f), wk = random_floats(size_t(c.hd), 46, 0.2f);
      for (float& x : wq) x += 1.0f;
      const Shape cache{S, C, c.nkv, c.hd};
      std::vector<In> in{rnd(Role::frozen, {c.n, W}, 47),        In{{c.hd}, Role::frozen, wq, {}},
                         In{{c.hd}, Role::frozen, wk, {}},        ints({c.n}, pos),
                         f32c({c.hd / 2}, inv_freq(c.hd)),        ints({c.n}, slot),
                         rnd(Role::frozen, cache, 48),            rnd(Role::frozen, cache, 49)};
      const OpFn fused = [](auto& a) {
        return std::vector<Tensor>{ops::rmsnorm_rope_into_slots(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], 1e-6f),
                                   a[6], a[7]};
      };
      const int64_t nh = c.nh, nkv = c.nkv, hd = c.hd, n = c.n;
      const OpFn unfused = [=](auto& a) {
        const std::vector<Tensor> p = ops::split_columns(a[0], {nh * hd, nkv * hd, nkv * hd});
        ops::RopedQK r = ops::rmsnorm_rope(p[0].reshape({n, nh, hd}), p[1].reshape({n, nkv, hd}), a[1], a[2], a[3], a[4],
                                           1e-6f);
        ops::scatter_slot_rows_(a[6], r.k, a[5], a[3]);
        ops::scatter_slot_rows_(a[7], p[2].reshape({n, nkv, hd}), a[5], a[3]);
        return std::vector<Tensor>{r.q, a[6], a[7]};
      };
      for (DType dt : {DType::f32, DType::bf16}) {
        INFO("dtype " << std::string(dtype_name(dt)));
        const Result a = run(be.gpu, dt, in, fused), b = run(be.gpu, dt, in, unfused);
        REQUIRE(a.outs.size() == 3);
        for (size_t k = 0; k < 3; ++k) CHECK(bitwise_equal(a.outs[k], b.outs[k]));
      }
      check_parity(be, in, fused);
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

  TEST_CASE("linear_residual on CUDA: the CPU's values and gradients; bf16 is the exact sum rounded once") {
    REQUIRE_GPU();
    Backends be;
    // Rows and widths off every tile; the residual as a leaf and through another op.
    for (auto [rows, in, out] : {std::tuple<int64_t, int64_t, int64_t>{1, 8, 8}, {37, 64, 96}, {300, 256, 520}})
      for (Role role : {Role::trainable, Role::nonleaf}) {
        INFO(rows << " x " << in << " -> " << out << (role == Role::nonleaf ? ", residual through a non-leaf" : ""));
        std::vector<In> ins{rnd(Role::trainable, {rows, in}, 61), rnd(Role::trainable, {out, in}, 62, 0.2f),
                            rnd(role, {rows, out}, 63)};
        check_parity(be, ins, [](auto& a) { return std::vector<Tensor>{ops::linear_residual(a[0], a[1], a[2])}; });
      }
    // bf16 against double sums of the same inputs: every element is the exact sum rounded to the
    // nearest bf16 (where the f32 accumulation cannot decide it, it is skipped); rounding the product
    // to bf16 first (add after linear) would miss some. With cuBLASLt's heuristic pick, and with every
    // tuner candidate that agrees with cuBLAS set in the table; recorded like eager; the residual unchanged.
    Context& ctx = be.gpu;
    ContextScope scope(ctx);
    const int64_t M = 192, K = 320, N = 264;
    const std::vector<float> xv = round_to(DType::bf16, random_floats(size_t(M * K), 71)),
                             wv = round_to(DType::bf16, random_floats(size_t(N * K), 72, 0.1f)),
                             hv = round_to(DType::bf16, random_floats(size_t(M * N), 73, 4.0f));
    const Tensor x = make_float({M, K}, xv, DType::bf16), w = make_float({N, K}, wv, DType::bf16),
                 h = make_float({M, N}, hv, DType::bf16);
    auto bf16_nearest = [](double v) {  // ties to even
      const float f = float(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      uint32_t lo_bits = u & 0xffff0000u, hi_bits = lo_bits + 0x10000u;
      float lo, hi;
      std::memcpy(&lo, &lo_bits, 4);
      std::memcpy(&hi, &hi_bits, 4);
      const double dlo = std::fabs(v - lo), dhi = std::fabs(v - hi);
      return dlo < dhi ? lo : dhi < dlo ? hi : ((lo_bits >> 16) & 1u) ? hi : lo;
    };
    std::vector<double> exact(size_t(M * N)), product(size_t(M * N)), slack(size_t(M * N));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0, a = 0;
        for (int64_t k = 0; k < K; ++k) {
          s += double(xv[size_t(i * K + k)]) * wv[size_t(j * K + k)];
          a += std::fabs(double(xv[size_t(i * K + k)]) * wv[size_t(j * K + k)]);
        }
        product[size_t(i * N + j)] = s;
        exact[size_t(i * N + j)] = s + hv[size_t(i * N + j)];
        slack[size_t(i * N + j)] = double(K) * std::ldexp(a, -23);
      }
    auto check_rounded_once = [&](const std::vector<float>& y) {
      int64_t decided = 0, wrong = 0, twice_differs = 0;
      for (size_t e = 0; e < y.size(); ++e) {
        const float want = bf16_nearest(exact[e]);
        if (bf16_nearest(exact[e] - slack[e]) != want || bf16_nearest(exact[e] + slack[e]) != want) continue;
        ++decided;
        wrong += y[e] != want;
        twice_differs += bf16_nearest(double(bf16_nearest(product[e])) + hv[e]) != want;
      }
      CHECK(decided > int64_t(y.size()) / 2);  // the slack is a bound: about 80 % are decided
      CHECK(wrong == 0);
      CHECK(twice_differs > 0);  // the reference can tell one rounding from two
    };
    const std::vector<float> heuristic = ops::linear_residual(x, w, h).to_floats();
    check_rounded_once(heuristic);
    CHECK(bitwise_equal(h.to_floats(), hv));
    const GemmKey key{M, N, K, K, K, N, false, true, true, true, true};
    kernels::cuda::GemmArgs probe{M, N, K, x.raw(), K, false, w.raw(), K, true, nullptr, N, 1.0f, 1.0f, true, true};
    const Tensor c = make_float({M, N}, hv, DType::bf16);
    probe.C = c.raw();
    const Tensor check = Tensor::persistent({int64_t(kernels::cuda::gemm_check_bytes(probe))}, DType::u8);
    const kernels::cuda::GemmCandidates cands = time_gemm(ctx, probe, 8, 1, check.raw());
    int tried = 0;
    for (const kernels::cuda::GemmCandidate& cand : cands.candidates) {
      if (!cand.agrees) continue;
      INFO("candidate " << cand.config);
      GemmAlgoConfig cfg;
      std::copy(cand.config_values, cand.config_values + 9, cfg.begin());
      ctx.gemm_table().set(key, cfg);
      check_rounded_once(ops::linear_residual(x, w, h).to_floats());
      ++tried;
    }
    CHECK(tried > 0);
    ctx.gemm_table().erase(key);
    const Tensor out = Tensor::persistent({M, N}, DType::bf16);
    auto body = [&] { ops::copy_(out, ops::linear_residual(x, w, h)); };
    ctx.reserve_arena(std::max(ctx.arena_bytes(), plan_program(ctx, "residual", body).arena_bytes));
    Program p = record_program(ctx, "residual", body);
    ops::fill_(out, NAN);
    p.replay();
    ctx.synchronize();
    CHECK(bitwise_equal(out.to_floats(), heuristic));
    CHECK(bitwise_equal(h.to_floats(), hv));
  }
}
#endif
