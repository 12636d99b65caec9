// embedding, rmsnorm, rope, swiglu: forward against references computed here in double, backward
// against central finite differences, and every error message the ops can raise (concat: test_ops_concat.cpp).
#include <cmath>
#include <cstring>
#include <tuple>

#include "kernels/cpu/cpu_kernels.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

namespace {

std::vector<int32_t> random_ids(size_t n, int32_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = int32_t(rng() % uint64_t(V));
  return v;
}

// HF's inv_freq: 1 / theta^(2i/hd), in f32.
std::vector<float> hf_inv_freq(int64_t hd, float theta = 10000.0f) {
  std::vector<float> f(size_t(hd / 2));
  for (int64_t i = 0; i < hd / 2; ++i) f[size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(hd));
  return f;
}

// Rotate-half RoPE in double. The angle is the f32 product float(pos) * inv_freq[i], as the op's
// contract (and HF) defines it; only cos/sin and the rotation are evaluated in double.
std::vector<double> rope_reference(const std::vector<float>& x, const std::vector<int32_t>& pos,
                                   const std::vector<float>& inv_freq, int64_t heads, int64_t hd) {
  std::vector<double> y(x.size());
  int64_t half = hd / 2;
  for (size_t r = 0; r < pos.size(); ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        double angle = double(float(pos[r]) * inv_freq[size_t(i)]);
        double c = std::cos(angle), s = std::sin(angle);
        size_t base = (r * size_t(heads) + size_t(h)) * size_t(hd);
        double x1 = x[base + size_t(i)], x2 = x[base + size_t(i + half)];
        y[base + size_t(i)] = x1 * c - x2 * s;
        y[base + size_t(i + half)] = x2 * c + x1 * s;
      }
  return y;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

}  // namespace

TEST_SUITE("ops") {
  // ---- embedding ----

  TEST_CASE("embedding forward copies table rows, for ids of 1, 2 and 3 dims") {
    CpuRuntime rt;
    int64_t V = 11, H = 7;
    Tensor table = randn({V, H}, 1);
    std::vector<float> tv = table.to_floats();
    for (Shape ids_shape : {Shape{5}, Shape{2, 3}, Shape{2, 1, 4}}) {
      std::vector<int32_t> idv = random_ids(size_t(ids_shape.numel()), int32_t(V), 2);
      idv[0] = int32_t(V - 1);  // the last row too
      Tensor ids = Tensor::from_ints(ids_shape, idv);
      Tensor out = ops::embedding(table, ids);
      Shape want = ids_shape;
      want.d[want.ndim++] = H;
      CHECK(out.shape() == want);
      std::vector<float> ov = out.to_floats();
      for (size_t i = 0; i < idv.size(); ++i)
        for (int64_t j = 0; j < H; ++j) CHECK(ov[i * size_t(H) + size_t(j)] == tv[size_t(idv[i] * H + j)]);
    }
  }

  TEST_CASE("embedding of a frozen table records nothing") {
    CpuRuntime rt;
    Tensor table = randn({4, 3}, 1);
    Tensor out = ops::embedding(table, Tensor::from_ints({2}, {3, 0}));
    CHECK_FALSE(out.requires_grad());
    CHECK(rt.ctx.tape().size() == 0);
  }

  TEST_CASE("embedding backward scatter-adds into a trainable table, repeated ids included") {
    CpuRuntime rt;
    int64_t V = 5, H = 3;
    std::vector<int32_t> idv = {1, 4, 1, 0, 1, 4, 2};  // 3 never appears: its gradient row stays 0
    Tensor ids = Tensor::from_ints({7}, idv);
    Tensor table = param({V, H}, 3);
    check_gradients([&] { return ops::embedding(table, ids); }, {table});

    // The exact sum of dout rows per id, in double.
    std::vector<float> zero(size_t(V * H), 0.0f);
    table.grad().copy_from_host(zero.data(), zero.size() * 4);
    Tensor out = ops::embedding(table, ids.reshape({7}));
    Tensor dout = randn(out.shape(), 4);
    run_backward({out}, {dout});
    std::vector<float> dv = dout.to_floats(), gv = table.grad().to_floats();
    std::vector<double> want(size_t(V * H), 0.0);
    for (size_t i = 0; i < idv.size(); ++i)
      for (int64_t j = 0; j < H; ++j) want[size_t(idv[i] * H + j)] += dv[i * size_t(H) + size_t(j)];
    CHECK(max_abs_diff(gv, want) < 1e-6);
    for (int64_t j = 0; j < H; ++j) CHECK(gv[size_t(3 * H + j)] == 0.0f);

    // 2-D ids with a 2-D dout.
    Tensor ids2 = Tensor::from_ints({2, 3}, {0, 0, 4, 2, 0, 1});
    check_gradients([&] { return ops::embedding(table, ids2); }, {table});
  }

  TEST_CASE("embedding errors name the op, the tensors and the fix") {
    CpuRuntime rt;
    Tensor table = randn({4, 3}, 1, 1.0f, "embed_tokens");
    CHECK_THROWS_WITH_AS(ops::embedding(table, randn({2}, 2)),
                         doctest::Contains("embedding: ids is f32[2] but must be i32"), Error);
    CHECK_THROWS_WITH_AS(ops::embedding(randn({12}, 3), Tensor::from_ints({2}, {0, 1})),
                         doctest::Contains("embedding: table is f32[12] but must be 2-D"), Error);
    CHECK_THROWS_WITH_AS(ops::embedding(table, Tensor::from_ints({1, 1, 1, 2}, {0, 1})),
                         doctest::Contains("reshape the ids to at most 3 dims"), Error);
    Tensor int_table = Tensor::from_ints({2, 2}, {0, 1, 2, 3});
    CHECK_THROWS_WITH_AS(ops::embedding(int_table, Tensor::from_ints({1}, {0})),
                         doctest::Contains("embedding: table is i32[2,2] but must be f32"), Error);
  }

  // ---- rmsnorm ----

  TEST_CASE("rmsnorm forward equals a double-precision reference, per token and per head") {
    CpuRuntime rt;
    float eps = 1e-6f;
    for (Shape xs : {Shape{1, 1}, Shape{5, 7}, Shape{33, 64}, Shape{3, 4, 8}, Shape{2, 2, 3, 5}}) {
      int64_t D = xs.last(), rows = xs.numel() / D;
      Tensor x = randn(xs, 10, 2.0f), w = randn({D}, 11);
      std::vector<float> xv = x.to_floats(), wv = w.to_floats(), yv = ops::rmsnorm(x, w, eps).to_floats();
      std::vector<double> want(xv.size());
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t j = 0; j < D; ++j) ss += double(xv[size_t(r * D + j)]) * xv[size_t(r * D + j)];
        double rstd = 1.0 / std::sqrt(ss / double(D) + double(eps));
        for (int64_t j = 0; j < D; ++j) want[size_t(r * D + j)] = xv[size_t(r * D + j)] * rstd * wv[size_t(j)];
      }
      INFO("x " << xs.str());
      CHECK(max_abs_diff(yv, want) < 1e-5 * std::max(1.0, max_abs(yv)));
    }
  }

  TEST_CASE("rmsnorm backward (dx and dw) against finite differences") {
    CpuRuntime rt;
    for (int64_t rows : {1, 5, 33})
      for (int64_t D : {1, 7, 64}) {
        INFO("rows " << rows << ", D " << D);
        Tensor x = param({rows, D}, uint64_t(rows * 100 + D)), w = param({D}, uint64_t(D));
        check_gradients([&] { return ops::rmsnorm(x, w, 1e-5f); }, {x, w});
      }
    // Per-head shape, and a frozen weight (dx only).
    Tensor x = param({3, 4, 8}, 5), w = param({8}, 6);
    check_gradients([&] { return ops::rmsnorm(x, w, 1e-6f); }, {x, w});
    Tensor wf = randn({8}, 7);
    check_gradients([&] { return ops::rmsnorm(x, wf, 1e-6f); }, {x});
    // Through a non-leaf input: rmsnorm's backward first (its dx is fresh: written, not added to)
    // and after another consumer's (added to that consumer's gradient).
    check_gradients([&] { return ops::rmsnorm(ops::scale(x, 1.5f), w, 1e-6f); }, {x, w});
    check_gradients([&] {
      Tensor y = ops::scale(x, 1.5f);
      Tensor n = ops::rmsnorm(y, w, 1e-6f);
      return ops::add(n, ops::scale(y, 0.5f));  // scale's backward runs first: rmsnorm's dx is added
    }, {x, w});
    check_gradients([&] {
      Tensor y = ops::scale(x, 1.5f);
      Tensor s = ops::scale(y, 0.5f);
      return ops::add(s, ops::rmsnorm(y, w, 1e-6f));  // rmsnorm's backward runs first: fresh dx
    }, {x, w});
  }

  TEST_CASE("rmsnorm and rope backward kernels: a fresh dx is written (its old bytes never read), else added to") {
    // The kernels against themselves on other buffers: fresh into NaN bytes must equal added to
    // zeros bit for bit (what a zero-filled gradient gave), and added to ones must be 1 + that.
    CpuRuntime rt;
    const int64_t rows = 3, heads = 2, hd = 8, D = heads * hd;
    std::vector<float> x = randn({rows, D}, 81).to_floats(), dy = randn({rows, D}, 82).to_floats();
    std::vector<float> w = randn({hd}, 83).to_floats(), rstd(size_t(rows * heads), 0.7f);
    std::vector<float> freq = hf_inv_freq(hd);
    std::vector<int32_t> pos = {3, 0, 1000};
    const float nan = std::nanf("");
    for (int op = 0; op < 2; ++op) {
      INFO((op == 0 ? "rmsnorm" : "rope"));
      auto run = [&](float prefill, bool fresh) {
        std::vector<float> dx(size_t(rows * D), prefill);
        if (op == 0) kernels::cpu::rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), nullptr,
                                                    rows * heads, hd, fresh);
        else kernels::cpu::rope_backward(dy.data(), pos.data(), freq.data(), dx.data(), rows, heads, hd, fresh);
        return dx;
      };
      const std::vector<float> fresh = run(nan, true), zeros = run(0.0f, false), ones = run(1.0f, false);
      CHECK(std::memcmp(fresh.data(), zeros.data(), fresh.size() * sizeof(float)) == 0);
      for (size_t i = 0; i < ones.size(); ++i) CHECK(ones[i] == zeros[i] + 1.0f);
    }
  }

  TEST_CASE("rmsnorm errors name the op, the tensors and the fix") {
    CpuRuntime rt;
    Tensor x = randn({3, 8}, 1);
    CHECK_THROWS_WITH_AS(ops::rmsnorm(x, randn({4}, 2), 1e-6f),
                         doctest::Contains("weight must match x's last dim"), Error);
    CHECK_THROWS_WITH_AS(ops::rmsnorm(x, randn({2, 4}, 2), 1e-6f),
                         doctest::Contains("rmsnorm: weight is f32[2,4] but must be 1-D"), Error);
    CHECK_THROWS_WITH_AS(ops::rmsnorm(x, randn({8}, 2), -1.0f), doctest::Contains("it must be finite and >= 0"),
                         Error);
    CHECK_THROWS_WITH_AS(ops::rmsnorm(Tensor::from_ints({1, 2}, {1, 2}), Tensor::from_ints({2}, {1, 1}), 1e-6f),
                         doctest::Contains("rmsnorm: x is i32[1,2] but must be f32"), Error);
    CHECK_THROWS_WITH_AS(ops::rmsnorm(x, Tensor::from_ints({8}, std::vector<int32_t>(8, 1)), 1e-6f),
                         doctest::Contains("both must have the same dtype"), Error);
  }

  TEST_CASE("rmsnorm with a frozen x and a trainable weight records its backward: dw against finite differences") {
    CpuRuntime rt;
    const Tensor x = randn({5, 6}, 1);
    Tensor w = param({6}, 2);
    CHECK(ops::rmsnorm(x, w, 1e-6f).requires_grad());
    check_gradients([&] { return ops::rmsnorm(x, w, 1e-6f); }, {w});
    // Per head: weight [hd] over x [rows, heads, hd].
    const Tensor xh = randn({3, 2, 4}, 3);
    Tensor wh = param({4}, 4);
    check_gradients([&] { return ops::rmsnorm(xh, wh, 1e-6f); }, {wh});
  }

  // ---- rope ----

  TEST_CASE("rope forward equals explicit cos/sin rotation, arbitrary and large positions") {
    CpuRuntime rt;
    for (auto [B, L, heads, hd] : {std::tuple{1, 1, 1, 2}, {2, 5, 3, 8}, {1, 7, 2, 64}}) {
      INFO("B " << B << " L " << L << " heads " << heads << " hd " << hd);
      Tensor x = randn({B, L, heads, hd}, 20);
      std::vector<int32_t> pos = random_ids(size_t(B * L), 100, 21);
      pos[0] = 60000;                      // large: the f32 angle decides the result
      if (pos.size() > 2) pos[2] = pos[1];  // repeated
      Tensor positions = Tensor::from_ints({B, L}, pos);
      std::vector<float> f = hf_inv_freq(hd, 1000000.0f);
      Tensor inv_freq = Tensor::from_floats({hd / 2}, f);
      std::vector<float> y = ops::rope(x, positions, inv_freq).to_floats();
      CHECK(max_abs_diff(y, rope_reference(x.to_floats(), pos, f, heads, hd)) < 1e-5);
    }
    // 3-D x [L, heads, hd] with 1-D positions, Llama-style theta.
    Tensor x = randn({6, 4, 16}, 22);
    std::vector<int32_t> pos = {5, 0, 3, 3, 40000, 1};
    std::vector<float> f = hf_inv_freq(16);
    std::vector<float> y = ops::rope(x, Tensor::from_ints({6}, pos), Tensor::from_floats({8}, f)).to_floats();
    CHECK(max_abs_diff(y, rope_reference(x.to_floats(), pos, f, 4, 16)) < 1e-5);
  }

  TEST_CASE("rope: dot(rope(q, p1), rope(k, p2)) depends only on p1 - p2") {
    CpuRuntime rt;
    int64_t hd = 64;
    Tensor inv_freq = Tensor::from_floats({hd / 2}, hf_inv_freq(hd));
    Tensor q = randn({1, 1, hd}, 30), k = randn({1, 1, hd}, 31);
    auto dot_at = [&](int32_t p1, int32_t p2) {
      std::vector<float> a = ops::rope(q, Tensor::from_ints({1}, {p1}), inv_freq).to_floats();
      std::vector<float> b = ops::rope(k, Tensor::from_ints({1}, {p2}), inv_freq).to_floats();
      double s = 0;
      for (int64_t i = 0; i < hd; ++i) s += double(a[size_t(i)]) * b[size_t(i)];
      return s;
    };
    auto norm = [](const Tensor& t) {
      double s = 0;
      for (float v : t.to_floats()) s += double(v) * v;
      return std::sqrt(s);
    };
    double qn = norm(q), kn = norm(k);
    // The identity is exact only for exact angles. The f32 angle pos * inv_freq rounds by up to
    // ulp(pos)/2 (4e-6 rad at pos 100), so positions stay small and the tolerance is 1e-4 |q||k|.
    for (int32_t delta : {0, 1, 3, 17}) {
      double ref = dot_at(delta, 0);
      for (int32_t base : {1, 5, 60, 100}) {
        INFO("delta " << delta << ", base " << base);
        CHECK(std::fabs(dot_at(base + delta, base) - ref) <= 1e-4 * qn * kn);
      }
    }
    // And it really does depend on the offset.
    CHECK(std::fabs(dot_at(1, 0) - dot_at(0, 0)) > 1e-3 * qn * kn);
  }

  TEST_CASE("rope backward against finite differences") {
    CpuRuntime rt;
    for (auto [rows, heads, hd] : {std::tuple{1, 1, 2}, {5, 3, 8}, {33, 2, 64}}) {
      INFO("rows " << rows << " heads " << heads << " hd " << hd);
      Tensor x = param({rows, heads, hd}, uint64_t(40 + hd));
      std::vector<int32_t> pos = random_ids(size_t(rows), 70000, 41);
      Tensor positions = Tensor::from_ints({rows}, pos);
      Tensor inv_freq = Tensor::from_floats({hd / 2}, hf_inv_freq(hd));
      check_gradients([&] { return ops::rope(x, positions, inv_freq); }, {x});
    }
    Tensor x = param({2, 3, 2, 6}, 42);
    Tensor positions = Tensor::from_ints({2, 3}, {7, 7, 0, 59999, 2, 1});
    Tensor inv_freq = Tensor::from_floats({3}, hf_inv_freq(6));
    check_gradients([&] { return ops::rope(x, positions, inv_freq); }, {x});
    // Through a non-leaf input: rope's backward first (fresh dx: written) and after another
    // consumer's (added to).
    check_gradients([&] { return ops::rope(ops::scale(x, 1.5f), positions, inv_freq); }, {x});
    check_gradients([&] {
      Tensor y = ops::scale(x, 1.5f);
      Tensor r = ops::rope(y, positions, inv_freq);
      return ops::add(r, ops::scale(y, 0.5f));
    }, {x});
    check_gradients([&] {
      Tensor y = ops::scale(x, 1.5f);
      Tensor s = ops::scale(y, 0.5f);
      return ops::add(s, ops::rope(y, positions, inv_freq));
    }, {x});
  }

  TEST_CASE("rope errors name the op, the tensors and the fix") {
    CpuRuntime rt;
    Tensor x = randn({2, 3, 4, 8}, 1);
    Tensor pos = Tensor::from_ints({2, 3}, {0, 1, 2, 3, 4, 5});
    Tensor f = Tensor::from_floats({4}, hf_inv_freq(8));
    CHECK_THROWS_WITH_AS(ops::rope(randn({2, 3, 4, 7}, 1), pos, Tensor::from_floats({3}, hf_inv_freq(6))),
                         doctest::Contains("rotate-half needs an even head dim"), Error);
    CHECK_THROWS_WITH_AS(ops::rope(x, Tensor::from_ints({3}, {0, 1, 2}), f),
                         doctest::Contains("hold 3 positions but x f32[2,3,4,8] has 6 rows of 4 heads"), Error);
    CHECK_THROWS_WITH_AS(ops::rope(x, pos, Tensor::from_floats({8}, hf_inv_freq(16))),
                         doctest::Contains("inv_freq must be [4]"), Error);
    CHECK_THROWS_WITH_AS(ops::rope(x, randn({2, 3}, 2), f), doctest::Contains("rope: positions is f32[2,3] but must be i32"),
                         Error);
    CHECK_THROWS_WITH_AS(ops::rope(randn({8}, 3), pos, f), doctest::Contains("it must be [..., heads, hd]"), Error);
    Tensor trainable_f = param({4}, 4);
    CHECK_THROWS_WITH_AS(ops::rope(x, pos, trainable_f), doctest::Contains("rope does not differentiate its frequencies"),
                         Error);
  }

  TEST_CASE("rope refuses a head dim of 0 and an inv_freq that is not f32") {
    CpuRuntime rt;
    const Tensor pos = Tensor::from_ints({3}, {0, 1, 2});
    CHECK_ERROR(ops::rope(Tensor::from_floats({3, 2, 0}, {}), pos, Tensor::from_floats({0}, {})),
                "rope: x f32[3,2,0] has head dim 0; rotate-half needs an even head dim >= 2");
    CHECK_ERROR(ops::rope(randn({3, 2, 8}, 1), pos, Tensor::from_ints({4}, {1, 1, 1, 1})),
                "rope: inv_freq is i32[4] but must be f32");
  }

  // ---- swiglu ----

  TEST_CASE("swiglu forward and gradient equal a double reference, large |gate| included") {
    CpuRuntime rt;
    std::vector<float> gv = random_floats(40, 50, 3.0f);
    for (float big : {30.0f, -30.0f, 100.0f, -100.0f, 1000.0f, -1000.0f, 1e30f, -1e30f}) gv.push_back(big);
    size_t n = gv.size();
    std::vector<float> uv = random_floats(n, 51);
    Tensor g = Tensor::from_floats({int64_t(n)}, gv), u = Tensor::from_floats({int64_t(n)}, uv);
    g.set_requires_grad(true);
    u.set_requires_grad(true);
    Tensor y = ops::swiglu(g, u);
    std::vector<float> dyv = random_floats(n, 52);
    run_backward({y}, {Tensor::from_floats(y.shape(), dyv)});
    std::vector<float> yv = y.to_floats(), dg = g.grad().to_floats(), du = u.grad().to_floats();
    for (size_t i = 0; i < n; ++i) {
      double x = gv[i], sig = 1.0 / (1.0 + std::exp(-x));
      double silu = x * sig, dsilu = sig * (1.0 + x * (1.0 - sig));
      INFO("gate " << x);
      REQUIRE(std::isfinite(yv[i]));
      REQUIRE(std::isfinite(dg[i]));
      REQUIRE(std::isfinite(du[i]));
      CHECK(std::fabs(yv[i] - silu * uv[i]) <= 1e-6 * std::max(1.0, std::fabs(silu * uv[i])));
      CHECK(std::fabs(du[i] - dyv[i] * silu) <= 1e-6 * std::max(1.0, std::fabs(dyv[i] * silu)));
      CHECK(std::fabs(dg[i] - dyv[i] * uv[i] * dsilu) <= 1e-6 * std::max(1.0, std::fabs(dyv[i] * uv[i] * dsilu)));
    }
  }

  TEST_CASE("swiglu backward against finite differences") {
    CpuRuntime rt;
    for (Shape s : {Shape{1}, Shape{7}, Shape{5, 33}, Shape{2, 3, 64}}) {
      INFO("shape " << s.str());
      Tensor g = param(s, 60, 2.0f), u = param(s, 61);
      check_gradients([&] { return ops::swiglu(g, u); }, {g, u});
    }
    Tensor g = param({9}, 62), u_frozen = randn({9}, 63);
    check_gradients([&] { return ops::swiglu(g, u_frozen); }, {g});
  }

  TEST_CASE("swiglu errors name the op, the tensors and the fix") {
    CpuRuntime rt;
    CHECK_THROWS_WITH_AS(ops::swiglu(randn({2, 3}, 1, 1.0f, "gate"), randn({3, 2}, 2, 1.0f, "up")),
                         doctest::Contains("swiglu: gate f32[2,3] 'gate' and up f32[3,2] 'up' differ in shape"), Error);
    CHECK_THROWS_WITH_AS(ops::swiglu(randn({2}, 1), Tensor::from_ints({2}, {1, 2})),
                         doctest::Contains("both must have the same dtype"), Error);
    CHECK_THROWS_WITH_AS(ops::swiglu(Tensor::from_ints({2}, {1, 2}), Tensor::from_ints({2}, {1, 2})),
                         doctest::Contains("swiglu: gate is i32[2] but must be f32"), Error);
  }
}

TEST_SUITE("ops") {
  TEST_CASE("linear_residual: residual + x W^T against double sums, the values of add(residual, linear); gradients") {
    CpuRuntime rt;
    const int64_t B = 2, S = 3, in = 5, out = 4;
    Tensor x = param({B, S, in}, 31), w = param({out, in}, 32), h = param({B, S, out}, 33);
    const std::vector<float> xv = x.to_floats(), wv = w.to_floats(), hv = h.to_floats();
    const std::vector<float> y = ops::linear_residual(x, w, h).to_floats();
    REQUIRE(y.size() == size_t(B * S * out));
    for (int64_t r = 0; r < B * S; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double want = hv[size_t(r * out + o)];
        for (int64_t k = 0; k < in; ++k) want += double(xv[size_t(r * in + k)]) * wv[size_t(o * in + k)];
        CHECK(std::fabs(y[size_t(r * out + o)] - want) <= 1e-5 * std::max(1.0, std::fabs(want)));
      }
    CHECK(bitwise_equal(h.to_floats(), hv));  // the residual is read, not written
    CHECK(bitwise_equal(y, ops::add(h, ops::linear(x, w)).to_floats()));
    // The residual also read by another op (its gradient then sums both paths), and as a leaf.
    Tensor p = param({B, S, out}, 34);
    check_gradients([&] {
      const Tensor hh = ops::scale(p, 2.0f);
      return ops::mul(ops::linear_residual(x, w, hh), hh);
    }, {x, w, p});
    check_gradients([&] { return ops::linear_residual(x, w, h); }, {x, w, h});
    CHECK_THROWS_WITH_AS(ops::linear_residual(x, w, randn({B, S, out + 1}, 35)),
                         doctest::Contains("must have the output's shape [2,3,4]"), Error);
    CHECK_THROWS_WITH_AS(ops::linear_residual(x, randn({out, in + 1}, 36), h),
                         doctest::Contains("has 5 features but weight"), Error);
    CHECK_THROWS_WITH_AS(ops::linear_residual(x, w, Tensor::from_ints({B, S, out}, std::vector<int32_t>(B * S * out))),
                         doctest::Contains("and residual is i32[2,3,4]; they must have the same dtype"), Error);
    CHECK_THROWS_WITH_AS(ops::linear(x, Tensor::from_ints({out, in}, std::vector<int32_t>(out * in))),
                         doctest::Contains("linear: x is f32[2,3,5] and weight is i32[4,5]; they must have the same dtype"),
                         Error);
  }

  TEST_CASE("linear_concat_rows equals linear(concat(a, b, 1)) forward and backward, batch 1 and 3") {
    CpuRuntime rt;
    for (int64_t B : {1, 3}) {
      INFO("batch " << B);
      const int64_t Sa = 5, Sb = 3, in = 4, out = 6;
      Tensor a = param({B, Sa, in}, 11), b = param({B, Sb, in}, 12), w = param({out, in}, 13);
      Tensor y = ops::linear_concat_rows(a, b, w);
      CHECK(y.shape() == Shape{B, Sa + Sb, out});
      Tensor a2 = param({B, Sa, in}, 11), b2 = param({B, Sb, in}, 12), w2 = param({out, in}, 13);
      Tensor ref = ops::linear(ops::concat(a2, b2, 1), w2);
      CHECK(rel_err(y.to_floats(), ref.to_floats()) < 1e-6);
      check_gradients([&] { return ops::sum(ops::mul(ops::linear_concat_rows(a, b, w), ops::linear_concat_rows(a, b, w))); },
                      {a, b, w});
    }
  }
}
