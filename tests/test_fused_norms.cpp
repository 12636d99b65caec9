// The forward-only fused ops (add_rmsnorm, rmsnorm_rope, rmsnorm_rope_into_slots, swiglu_halves) on
// the CPU: the unfused ops' values bit for bit (which weight goes with which tensor, rows, heads, positions), and every
// refusal, each naming the tensors and the fix; the ops the target's recorded forward runs (its
// values: the golden targets, tests/test_target.cpp). Their CUDA kernels: suite gpu-ops.
#include <algorithm>
#include <map>

#include "graphs/program.h"
#include "runtime/autograd.h"
#include "runtime/decode_ops.h"
#include "runtime/profile.h"
#include "tests/target_fixtures.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {
Tensor norm_weight(int64_t D, uint64_t seed) {
  std::vector<float> w = random_floats(size_t(D), seed, 0.3f);
  for (float& x : w) x += 1.0f;
  return Tensor::from_floats({D}, w);
}

Tensor frequencies(int64_t hd) {
  std::vector<float> f(size_t(hd / 2));
  for (int64_t i = 0; i < hd / 2; ++i) f[size_t(i)] = 1.0f / std::pow(10000.0f, float(2 * i) / float(hd));
  return Tensor::from_floats({hd / 2}, f);
}

Tensor positions(int64_t B, int64_t L, uint64_t seed) {
  std::vector<int32_t> p(size_t(B * L));
  for (size_t i = 0; i < p.size(); ++i) p[i] = int32_t((seed * 7919 + i * 104729) % 40000);
  return Tensor::from_ints({B, L}, p);
}
}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("add_rmsnorm gives add then rmsnorm, bit for bit") {
    Context ctx{Device::cpu()};
    ContextScope scope(ctx);
    for (Shape s : {Shape{1, 8}, Shape{6, 64}, Shape{2, 3, 40}}) {
      INFO("shape " << s.str());
      Tensor a = randn(s, 1), b = randn(s, 2), w = norm_weight(s.last(), 3);
      ops::AddRmsnorm f = ops::add_rmsnorm(a, b, w, 1e-5f);
      Tensor r = ops::add(a, b);
      CHECK(f.sum.shape() == s);
      CHECK(bitwise_equal(f.sum.to_floats(), r.to_floats()));
      CHECK(bitwise_equal(f.normed.to_floats(), ops::rmsnorm(r, w, 1e-5f).to_floats()));
    }
  }

  TEST_CASE("rmsnorm_rope gives rmsnorm then rope for q and k, each with its own weight") {
    Context ctx{Device::cpu()};
    ContextScope scope(ctx);
    struct Case {
      int64_t B, L, hq, hk, hd;
    };
    for (Case c : {Case{1, 1, 1, 1, 2}, Case{2, 5, 4, 2, 16}, Case{1, 3, 6, 3, 8}}) {
      INFO("B " << c.B << " L " << c.L << " heads " << c.hq << "/" << c.hk << " hd " << c.hd);
      Tensor q = randn({c.B, c.L, c.hq, c.hd}, 4), k = randn({c.B, c.L, c.hk, c.hd}, 5);
      Tensor wq = norm_weight(c.hd, 6), wk = norm_weight(c.hd, 7), pos = positions(c.B, c.L, 8), f = frequencies(c.hd);
      ops::RopedQK r = ops::rmsnorm_rope(q, k, wq, wk, pos, f, 1e-6f);
      CHECK(r.q.shape() == q.shape());
      CHECK(r.k.shape() == k.shape());
      CHECK(bitwise_equal(r.q.to_floats(), ops::rope(ops::rmsnorm(q, wq, 1e-6f), pos, f).to_floats()));
      CHECK(bitwise_equal(r.k.to_floats(), ops::rope(ops::rmsnorm(k, wk, 1e-6f), pos, f).to_floats()));
    }
  }

  TEST_CASE("the fused norms refuse gradients and mismatched inputs, naming the fix") {
    Context ctx{Device::cpu()};
    ContextScope scope(ctx);
    Tensor a = randn({3, 8}, 1), b = randn({3, 8}, 2), w = norm_weight(8, 3);
    Tensor trained = param({3, 8}, 4);
    CHECK_THROWS_WITH_AS(ops::add_rmsnorm(trained, b, w, 1e-6f),
                         doctest::Contains("forward-only (no backward is recorded); fix: call it under NoGrad for a frozen model, or use ops::add then ops::rmsnorm"), Error);
    CHECK_THROWS_WITH_AS(ops::add_rmsnorm(a, randn({3, 7}, 5), w, 1e-6f), doctest::Contains("same shape and dtype"),
                         Error);
    CHECK_THROWS_WITH_AS(ops::add_rmsnorm(a, b, norm_weight(7, 6), 1e-6f),
                         doctest::Contains("must match the last dim"), Error);
    CHECK_THROWS_WITH_AS(ops::add_rmsnorm(a, b, w, -1.0f), doctest::Contains("eps = -1"), Error);
    {
      NoGrad no_grad;  // under NoGrad a trainable input is fine: nothing would flow back
      CHECK(bitwise_equal(ops::add_rmsnorm(trained, b, w, 1e-6f).sum.to_floats(), ops::add(trained, b).to_floats()));
    }

    Tensor q = randn({1, 4, 2, 8}, 7), k = randn({1, 4, 1, 8}, 8), wq = norm_weight(8, 9), wk = norm_weight(8, 10);
    Tensor pos = positions(1, 4, 11), f = frequencies(8);
    CHECK_THROWS_WITH_AS(ops::rmsnorm_rope(param({1, 4, 2, 8}, 12), k, wq, wk, pos, f, 1e-6f),
                         doctest::Contains("ops::rmsnorm then ops::rope"), Error);
    CHECK_THROWS_WITH_AS(ops::rmsnorm_rope(q, randn({1, 5, 1, 8}, 13), wq, wk, positions(1, 5, 1), f, 1e-6f),
                         doctest::Contains("differ in dim 1"), Error);
    CHECK_THROWS_WITH_AS(ops::rmsnorm_rope(q, randn({1, 4, 1, 6}, 14), wq, wk, pos, f, 1e-6f),
                         doctest::Contains("share an even head dim"), Error);
    CHECK_THROWS_WITH_AS(ops::rmsnorm_rope(q, k, wq, norm_weight(6, 15), pos, f, 1e-6f),
                         doctest::Contains("k_weight f32[6] has 6 entries"), Error);
    CHECK_THROWS_WITH_AS(ops::rmsnorm_rope(q, k, wq, wk, positions(1, 3, 16), f, 1e-6f),
                         doctest::Contains("one position per row"), Error);
    CHECK_THROWS_WITH_AS(ops::rmsnorm_rope(q, k, wq, wk, pos, frequencies(6), 1e-6f),
                         doctest::Contains("inv_freq must be [4]"), Error);
  }

  TEST_CASE("rmsnorm_rope_into_slots: q from the packed product, k and v in their cache rows, the rest untouched") {
    Context ctx{Device::cpu()};
    ContextScope scope(ctx);
    const int64_t n = 6, nh = 4, nkv = 2, hd = 8, S = 3, C = 5, W = (nh + 2 * nkv) * hd, kv = nkv * hd;
    const std::vector<float> x = random_floats(size_t(n * W), 21, 1.0f);
    // Rows: a padding row (-1, -1), the last position, a position past the cache, a slot past it.
    const std::vector<int32_t> slot{0, -1, 2, 1, 3, 1}, pos{4, -1, 0, 5, 1, 2};
    std::vector<float> q_part, k_part, v_part;  // the packed columns, cut on the host
    for (int64_t r = 0; r < n; ++r) {
      const float* row = x.data() + r * W;
      q_part.insert(q_part.end(), row, row + nh * hd);
      k_part.insert(k_part.end(), row + nh * hd, row + nh * hd + kv);
      v_part.insert(v_part.end(), row + nh * hd + kv, row + W);
    }
    Tensor wq = norm_weight(hd, 22), wk = norm_weight(hd, 23), f = frequencies(hd);
    Tensor ps = Tensor::from_ints({n}, pos), sl = Tensor::from_ints({n}, slot);
    const std::vector<float> k0 = random_floats(size_t(S * C * kv), 24, 1.0f);
    const std::vector<float> v0 = random_floats(size_t(S * C * kv), 25, 1.0f);
    Tensor kc = Tensor::from_floats({S, C, nkv, hd}, k0), vc = Tensor::from_floats({S, C, nkv, hd}, v0);
    Tensor q = ops::rmsnorm_rope_into_slots(Tensor::from_floats({n, W}, x), wq, wk, ps, f, sl, kc, vc, 1e-6f);
    ops::RopedQK want = ops::rmsnorm_rope(Tensor::from_floats({n, nh, hd}, q_part),
                                          Tensor::from_floats({n, nkv, hd}, k_part), wq, wk, ps, f, 1e-6f);
    REQUIRE(q.shape() == Shape{n, nh, hd});
    CHECK(bitwise_equal(q.to_floats(), want.q.to_floats()));
    std::vector<float> want_k = k0, want_v = v0;
    const std::vector<float> roped_k = want.k.to_floats();
    for (int64_t r = 0; r < n; ++r) {
      if (slot[size_t(r)] < 0 || slot[size_t(r)] >= S || pos[size_t(r)] < 0 || pos[size_t(r)] >= C) continue;
      const int64_t at = (slot[size_t(r)] * C + pos[size_t(r)]) * kv;
      std::copy_n(roped_k.begin() + r * kv, kv, want_k.begin() + at);
      std::copy_n(v_part.begin() + r * kv, kv, want_v.begin() + at);
    }
    CHECK(bitwise_equal(kc.to_floats(), want_k));
    CHECK(bitwise_equal(vc.to_floats(), want_v));

    Tensor qkv = Tensor::from_floats({n, W}, x);
    CHECK_THROWS_WITH_AS(ops::rmsnorm_rope_into_slots(randn({n, W - 1}, 26), wq, wk, ps, f, sl, kc, vc, 1e-6f),
                         doctest::Contains("must be [n, (nh + 2 * 2) * 8]"), Error);
    Tensor short_slot = Tensor::from_ints({n - 1}, {0, 0, 0, 0, 0});
    CHECK_THROWS_WITH_AS(ops::rmsnorm_rope_into_slots(qkv, wq, wk, ps, f, short_slot, kc, vc, 1e-6f),
                         doctest::Contains("slot is i32[5] but must be i32 [6]"), Error);
    Tensor longer = randn({S, C + 1, nkv, hd}, 27);
    CHECK_THROWS_WITH_AS(ops::rmsnorm_rope_into_slots(qkv, wq, wk, ps, f, sl, kc, longer, 1e-6f),
                         doctest::Contains("of one shape and of qkv's dtype"), Error);
    CHECK_THROWS_WITH_AS(ops::rmsnorm_rope_into_slots(param({n, W}, 28), wq, wk, ps, f, sl, kc, vc, 1e-6f),
                         doctest::Contains("ops::split_columns, ops::rmsnorm_rope and ops::scatter_slot_rows_"), Error);
    CHECK_THROWS_WITH_AS(ops::rmsnorm_rope_into_slots(qkv, wq, norm_weight(6, 29), ps, f, sl, kc, vc, 1e-6f),
                         doctest::Contains("k_weight f32[6] has 6 entries"), Error);
  }

  TEST_CASE("swiglu_halves gives swiglu of each row's halves, bit for bit; refuses odd widths and gradients") {
    Context ctx{Device::cpu()};
    ContextScope scope(ctx);
    for (Shape s : {Shape{1, 1}, Shape{3, 16}, Shape{2, 3, 10}}) {
      INFO("gate and up " << s.str());
      Tensor g = randn(s, 21), u = randn(s, 22);
      Tensor y = ops::swiglu_halves(ops::concat(g, u, -1));  // rows [g | u]
      CHECK(y.shape() == s);
      CHECK(bitwise_equal(y.to_floats(), ops::swiglu(g, u).to_floats()));
    }
    CHECK_THROWS_WITH_AS(ops::swiglu_halves(randn({2, 7}, 23)), doctest::Contains("last dim must be even"), Error);
    CHECK_THROWS_WITH_AS(ops::swiglu_halves(param({2, 8}, 24)),
                         doctest::Contains("forward-only (no backward is recorded); fix: call it under NoGrad for a "
                                           "frozen model, or use ops::swiglu where gradients flow"),
                         Error);
  }

  TEST_CASE("the target's recorded forward runs the fused norms and the packed gate/up GEMM") {
    Context ctx{Device::cpu()};
    ContextScope scope(ctx);
    TempDir tmp;
    Target t(make_target(tmp, "t-ops", "qwen3"), {0, 2}, 16);  // layers 0..2 run
    const Tensor ids = Tensor::from_ints({1, 8}, random_ids(8, 48, 9), "ids");
    const Tensor out = Tensor::persistent({1, 8, 2 * 32}, DType::f32, "features");
    auto op_counts = [&] {
      auto body = [&] { ops::copy_(out, t.features(ids)); };
      ctx.reserve_arena(plan_program(ctx, "features", body).arena_bytes);
      ProfileLog log;
      ctx.attach_profile(&log);
      Program p = record_program(ctx, "features", body);
      ctx.attach_profile(nullptr);
      std::map<std::string, int> n;
      for (const ProfiledCall& c : log.calls()) ++n[c.op];
      return n;
    };
    // Three layers: 2 fused add+norms each but the last layer's second (nothing norms its output),
    // which is a plain add.
    std::map<std::string, int> on = op_counts();
    CHECK(on["swiglu_halves"] == 3);
    CHECK(on["rmsnorm_rope"] == 3);
    CHECK(on["add_rmsnorm"] == 5);
    CHECK(on["add"] == 1);
    CHECK(on["swiglu"] == 0);
    CHECK(on["rope"] == 0);
  }
}
