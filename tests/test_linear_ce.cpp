// The fused, chunked lm_head + cross-entropy against an unfused reference computed here in double,
// its backward against finite differences (adding to gradients h and w already hold), its memory
// bound from a planning pass, replay against eager, numerical stability at logits near +-1e4, and its
// error messages.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {

// The unfused computation in double: full logits [R, V], then per-row softmax cross-entropy.
struct Reference {
  std::vector<float> ce, lse, loss, dh, dw;  // dh [R, H] and dw [V, H] for a given dloss
  std::vector<int32_t> argmax;
};

Reference unfused(const std::vector<float>& h, const std::vector<float>& w, const std::vector<int32_t>& labels,
                  const std::vector<float>& row_weights, int64_t R, int64_t H, int64_t V, double dloss) {
  Reference ref;
  ref.ce.assign(size_t(R), 0.0f);
  ref.lse.assign(size_t(R), 0.0f);
  ref.argmax.assign(size_t(R), 0);
  ref.dh.assign(size_t(R * H), 0.0f);
  ref.dw.assign(size_t(V * H), 0.0f);
  std::vector<double> dw(size_t(V * H), 0.0);
  double loss = 0;
  std::vector<double> z(static_cast<size_t>(V));
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t k = 0; k < H; ++k) s += double(h[size_t(r * H + k)]) * double(w[size_t(v * H + k)]);
      z[size_t(v)] = s;
    }
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v)
      if (z[size_t(v)] > z[size_t(best)]) best = v;
    double m = z[size_t(best)], sum = 0;
    for (double x : z) sum += std::exp(x - m);
    double lse = m + std::log(sum);
    int32_t label = labels[size_t(r)];
    double ce = label < 0 ? 0.0 : lse - z[size_t(label)];
    ref.ce[size_t(r)] = float(ce);
    ref.lse[size_t(r)] = float(lse);
    ref.argmax[size_t(r)] = int32_t(best);
    loss += double(row_weights[size_t(r)]) * ce;
    if (label < 0) continue;
    for (int64_t v = 0; v < V; ++v) {
      double dz = dloss * row_weights[size_t(r)] * (std::exp(z[size_t(v)] - lse) - (v == label ? 1.0 : 0.0));
      for (int64_t k = 0; k < H; ++k) {
        ref.dh[size_t(r * H + k)] += float(dz * w[size_t(v * H + k)]);
        dw[size_t(v * H + k)] += dz * h[size_t(r * H + k)];
      }
    }
  }
  for (size_t i = 0; i < dw.size(); ++i) ref.dw[i] = float(dw[i]);
  ref.loss = {float(loss)};
  return ref;
}

// Labels in [0, V) with every 7th row ignored (-1); weights positive and normalised, with every
// 5th row weighted 0 (so some rows are both ignored and weight 0, some only one of them).
struct Batch {
  std::vector<int32_t> labels;
  std::vector<float> weights;
};
Batch make_batch(int64_t R, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Batch b;
  double total = 0;
  for (int64_t r = 0; r < R; ++r) {
    b.labels.push_back(r % 7 == 3 ? -1 : int32_t(rng() % uint64_t(V)));
    float w = r % 5 == 1 ? 0.0f : 0.25f + float(rng() % 1000) / 1000.0f;
    b.weights.push_back(w);
    total += w;
  }
  for (float& w : b.weights) w = float(w / (total + 1e-6));
  return b;
}

bool row_is_zero(const std::vector<float>& g, int64_t r, int64_t H) {
  for (int64_t k = 0; k < H; ++k)
    if (g[size_t(r * H + k)] != 0.0f) return false;
  return true;
}

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("linear_cross_entropy equals the unfused computation for any chunking") {
    CpuRuntime rt;
    struct Case {
      int64_t R, H, V, chunk;
      bool train_weight;
    };
    for (Case c : {Case{37, 16, 50, 8, false}, Case{5, 16, 320, 64, true}, Case{37, 8, 50, 1, true},
                   Case{37, 16, 320, 37, false}, Case{37, 16, 50, 36, true}, Case{64, 12, 320, 16, false}}) {
      INFO("R " << c.R << " H " << c.H << " V " << c.V << " chunk " << c.chunk);
      Tensor h = param({c.R, c.H}, 1, 1.0f, "h");
      Tensor w = randn({c.V, c.H}, 2, 0.5f, "lm_head");
      if (c.train_weight) w.set_requires_grad(true);
      Batch b = make_batch(c.R, c.V, 3);
      Tensor labels = Tensor::from_ints({c.R}, b.labels), rw = Tensor::from_floats({c.R}, b.weights);

      ops::LinearCrossEntropy res = ops::linear_cross_entropy(h, w, labels, rw, c.chunk);
      CHECK(res.loss.shape() == Shape{1});
      CHECK(res.ce.shape() == Shape{c.R});
      CHECK(res.argmax.shape() == Shape{c.R});
      CHECK(res.argmax.dtype() == DType::i32);
      CHECK(res.scratch_bytes == size_t(std::min(c.chunk, c.R) * c.V * 4));
      const float dloss = 0.7f;
      run_backward({res.loss}, {Tensor::from_floats({1}, {dloss})});

      Reference ref = unfused(h.to_floats(), w.to_floats(), b.labels, b.weights, c.R, c.H, c.V, dloss);
      CHECK(rel_err(res.ce.to_floats(), ref.ce) < 1e-5);
      CHECK(rel_err(res.loss.to_floats(), ref.loss) < 1e-5);
      CHECK(res.argmax.to_ints() == ref.argmax);
      std::vector<float> dh = h.grad().to_floats();
      CHECK(rel_err(dh, ref.dh) < 1e-5);
      if (c.train_weight) CHECK(rel_err(w.grad().to_floats(), ref.dw) < 1e-5);
      std::vector<float> ce = res.ce.to_floats();
      for (int64_t r = 0; r < c.R; ++r) {
        if (b.labels[size_t(r)] < 0) CHECK(ce[size_t(r)] == 0.0f);
        if (b.labels[size_t(r)] < 0 || b.weights[size_t(r)] == 0.0f) CHECK(row_is_zero(dh, r, c.H));
      }
    }
  }

  TEST_CASE("linear_cross_entropy argmax is the first maximum, on exact ties") {
    CpuRuntime rt;
    // Small integers make every logit exact in f32, whatever the summation order: ties are real.
    const int64_t R = 40, H = 3, V = 9;
    std::mt19937_64 rng(5);
    std::vector<float> hv(size_t(R * H)), wv(size_t(V * H));
    for (float& x : hv) x = float(int(rng() % 5) - 2);
    for (float& x : wv) x = float(int(rng() % 3) - 1);
    for (int64_t k = 0; k < H; ++k) hv[size_t(k)] = 0.0f;  // row 0: every logit 0, argmax 0
    Tensor h = Tensor::from_floats({R, H}, hv), w = Tensor::from_floats({V, H}, wv);
    std::vector<int32_t> labels(size_t(R), 0);
    std::vector<float> weights(size_t(R), 1.0f / R);
    ops::LinearCrossEntropy res =
        ops::linear_cross_entropy(h, w, Tensor::from_ints({R}, labels), Tensor::from_floats({R}, weights), 7);
    Reference ref = unfused(hv, wv, labels, weights, R, H, V, 1.0);
    CHECK(res.argmax.to_ints() == ref.argmax);
    CHECK(res.argmax.to_ints()[0] == 0);
    CHECK(res.ce.to_floats()[0] == doctest::Approx(std::log(double(V))).epsilon(1e-6));
    CHECK(rel_err(res.ce.to_floats(), ref.ce) < 1e-6);
  }

  TEST_CASE("linear_cross_entropy backward against finite differences") {
    CpuRuntime rt;
    const int64_t R = 7, H = 5, V = 11;
    Batch b = make_batch(R, V, 9);
    Tensor labels = Tensor::from_ints({R}, b.labels), rw = Tensor::from_floats({R}, b.weights);
    SUBCASE("dh, h a leaf") {
      Tensor h = param({R, H}, 1), w = randn({V, H}, 2);
      check_gradients([&] { return ops::linear_cross_entropy(h, w, labels, rw, 3).loss; }, {h});
    }
    SUBCASE("dh and dweight when the lm_head is trainable") {
      Tensor h = param({R, H}, 3), w = param({V, H}, 4);
      check_gradients([&] { return ops::linear_cross_entropy(h, w, labels, rw, 2).loss; }, {h, w});
    }
    SUBCASE("dh flows on through an op that made h") {
      Tensor h0 = param({R, H}, 5), w = randn({V, H}, 6);
      check_gradients([&] { return ops::linear_cross_entropy(ops::scale(h0, 1.5f), w, labels, rw, 4).loss; }, {h0});
    }
  }

  TEST_CASE("linear_cross_entropy holds one chunk of logits, never all of them") {
    CpuRuntime rt;
    struct Case {
      int64_t R, H, V, chunk;
    };
    for (Case c : {Case{4096, 64, 1000, 128}, Case{37, 16, 50, 8}, Case{5, 16, 320, 64}}) {
      INFO("R " << c.R << " V " << c.V << " chunk " << c.chunk);
      Tensor h = Tensor::persistent({c.R, c.H}, DType::f32, "h");
      h.set_requires_grad(true);
      Tensor w = Tensor::persistent({c.V, c.H}, DType::f32, "lm_head");
      Tensor labels = Tensor::persistent({c.R}, DType::i32), rw = Tensor::persistent({c.R}, DType::f32);
      rt.ctx.begin(Mode::plan, "ce");
      size_t scratch = 0;
      {
        ops::LinearCrossEntropy res = ops::linear_cross_entropy(h, w, labels, rw, c.chunk);
        scratch = res.scratch_bytes;
        backward(res.loss);
      }
      RecordingResult plan = rt.ctx.end();
      const int64_t rows = std::min(c.chunk, c.R), chunks = (c.R + c.chunk - 1) / c.chunk;
      CHECK(scratch == size_t(rows * c.V * 4));
      // One chunk of logits (dlogits overwrite them on the CPU), the per-row ce, argmax and lse,
      // the saved unit-upstream dh [R, H], the loss and backward's seed.
      size_t bound = align_up(scratch) + 3 * align_up(size_t(c.R) * 4) + align_up(size_t(c.R * c.H) * 4) + 2 * kAlignment;
      CHECK(plan.peak_bytes >= scratch);
      CHECK(plan.peak_bytes <= bound);
      if (c.R >= 32 * c.chunk) CHECK(plan.peak_bytes < size_t(c.R * c.V * 4) / 8);
      // Forward: zero the loss, then per chunk the logits gemm, CE, unit-upstream dlogits and the
      // dh gemm (the lm_head is frozen: dh is made in the forward); backward: the seed and one
      // scaled accumulation. The logits are computed once.
      CHECK(plan.kernels == size_t(1 + 4 * chunks + 1 + 1));
    }
  }

  TEST_CASE("linear_cross_entropy recorded and replayed equals eager, bit for bit") {
    CpuRuntime rt;
    const int64_t R = 29, H = 8, V = 40, chunk = 6;
    Tensor h = param({R, H}, 1), w = param({V, H}, 2, 0.5f);
    Batch b = make_batch(R, V, 3);
    Tensor labels = Tensor::from_ints({R}, b.labels), rw = Tensor::from_floats({R}, b.weights);
    Tensor loss = Tensor::persistent({1}, DType::f32), ce = Tensor::persistent({R}, DType::f32);
    Tensor argmax = Tensor::persistent({R}, DType::i32);
    auto step = [&] {
      ops::LinearCrossEntropy res = ops::linear_cross_entropy(h, w, labels, rw, chunk);
      ops::copy_(loss, res.loss);
      ops::copy_(ce, res.ce);
      ops::copy_(argmax, res.argmax);
      backward(res.loss);
    };
    auto zero_grads = [&] {
      std::vector<float> zh(size_t(R * H), 0.0f), zw(size_t(V * H), 0.0f);
      h.grad().copy_from_host(zh.data(), zh.size() * 4);
      w.grad().copy_from_host(zw.data(), zw.size() * 4);
    };
    step();
    std::vector<float> eager_loss = loss.to_floats(), eager_ce = ce.to_floats();
    std::vector<float> eager_dh = h.grad().to_floats(), eager_dw = w.grad().to_floats();
    std::vector<int32_t> eager_argmax = argmax.to_ints();
    zero_grads();
    std::vector<float> nan(size_t(R), std::numeric_limits<float>::quiet_NaN());
    ce.copy_from_host(nan.data(), nan.size() * 4);
    loss.copy_from_host(nan.data(), 4);

    rt.ctx.begin(Mode::plan, "ce");
    step();
    rt.ctx.reserve_arena(rt.ctx.end().peak_bytes);
    std::vector<KernelCall> program;
    rt.ctx.begin(Mode::record, "ce", &program);
    step();
    rt.ctx.end();
    CHECK(std::isnan(loss.item()));  // recording ran nothing
    for (KernelCall& call : program) call();
    CHECK(bitwise_equal(loss.to_floats(), eager_loss));
    CHECK(bitwise_equal(ce.to_floats(), eager_ce));
    CHECK(argmax.to_ints() == eager_argmax);
    CHECK(bitwise_equal(h.grad().to_floats(), eager_dh));
    CHECK(bitwise_equal(w.grad().to_floats(), eager_dw));
  }

  TEST_CASE("linear_cross_entropy is stable for logits near +-1e4") {
    CpuRuntime rt;
    SUBCASE("logits spread over +-1e4") {
      const int64_t R = 19, H = 4, V = 50;
      Tensor h = param({R, H}, 1, 2500.0f), w = randn({V, H}, 2);
      Batch b = make_batch(R, V, 3);
      ops::LinearCrossEntropy res =
          ops::linear_cross_entropy(h, w, Tensor::from_ints({R}, b.labels), Tensor::from_floats({R}, b.weights), 4);
      backward(res.loss);
      Reference ref = unfused(h.to_floats(), w.to_floats(), b.labels, b.weights, R, H, V, 1.0);
      CHECK(max_abs(ref.ce) > 5e3);  // the case really reaches large logits
      CHECK(rel_err(res.ce.to_floats(), ref.ce) < 1e-5);
      CHECK(rel_err(res.loss.to_floats(), ref.loss) < 1e-5);
      CHECK(res.argmax.to_ints() == ref.argmax);
      CHECK(rel_err(h.grad().to_floats(), ref.dh) < 1e-3);
    }
    SUBCASE("every logit near +1e4 or -1e4, differing by O(1)") {
      // Row r has logits s_r * 1e4 + u_v: exp(logit) overflows f32 (and f64) unless the max is
      // subtracted first; the CE itself is O(log V).
      const int64_t R = 8, H = 2, V = 64;
      std::vector<float> hv, wv;
      for (int64_t r = 0; r < R; ++r) hv.insert(hv.end(), {r % 2 ? -1e4f : 1e4f, 1.0f + 0.25f * float(r)});
      std::vector<float> u = random_floats(size_t(V), 7);
      for (int64_t v = 0; v < V; ++v) wv.insert(wv.end(), {1.0f, u[size_t(v)]});
      Tensor h = Tensor::from_floats({R, H}, hv), w = Tensor::from_floats({V, H}, wv);
      h.set_requires_grad(true);
      Batch b = make_batch(R, V, 11);
      ops::LinearCrossEntropy res =
          ops::linear_cross_entropy(h, w, Tensor::from_ints({R}, b.labels), Tensor::from_floats({R}, b.weights), 3);
      backward(res.loss);
      Reference ref = unfused(hv, wv, b.labels, b.weights, R, H, V, 1.0);
      std::vector<float> ce = res.ce.to_floats(), dh = h.grad().to_floats();
      for (int64_t r = 0; r < R; ++r) {
        INFO("row " << r);
        CHECK(std::isfinite(ce[size_t(r)]));
        // f32 logits near 1e4 are exact to 2^-10, so the CE is good to a few of those.
        CHECK(std::fabs(ce[size_t(r)] - ref.ce[size_t(r)]) < 4e-3);
        if (b.labels[size_t(r)] >= 0) CHECK(ce[size_t(r)] > 0.5f);
      }
      for (float g : dh) CHECK(std::isfinite(g));
      CHECK(rel_err(dh, ref.dh) < 1e-2);
    }
  }

  TEST_CASE("linear_cross_entropy: a label outside [-1, V) poisons its row with NaN") {
    CpuRuntime rt;
    const int64_t R = 4, H = 3, V = 5;
    Tensor h = param({R, H}, 1), w = randn({V, H}, 2);
    Tensor labels = Tensor::from_ints({R}, {0, int32_t(V), -2, 4});
    Tensor rw = Tensor::from_floats({R}, {0.25f, 0.25f, 0.25f, 0.25f});
    ops::LinearCrossEntropy res = ops::linear_cross_entropy(h, w, labels, rw, 2);
    backward(res.loss);
    std::vector<float> ce = res.ce.to_floats(), dh = h.grad().to_floats();
    CHECK(std::isfinite(ce[0]));
    CHECK(std::isnan(ce[1]));
    CHECK(std::isnan(ce[2]));
    CHECK(std::isfinite(ce[3]));
    CHECK(std::isnan(res.loss.item()));
    CHECK(std::isfinite(dh[0]));
    CHECK(std::isnan(dh[size_t(1 * H)]));
    CHECK(std::isnan(dh[size_t(2 * H)]));
    CHECK(std::isfinite(dh[size_t(3 * H)]));
  }

  TEST_CASE("linear_cross_entropy rejects bad inputs with messages that name the fix") {
    CpuRuntime rt;
    const int64_t R = 4, H = 3, V = 5;
    Tensor h = randn({R, H}, 1, 1.0f, "h"), w = randn({V, H}, 2, 1.0f, "lm_head");
    Tensor labels = Tensor::from_ints({R}, {0, 1, 2, 3}, "labels");
    Tensor rw = Tensor::from_floats({R}, {0.25f, 0.25f, 0.25f, 0.25f}, "row_weights");
    auto run = [&](const Tensor& h_, const Tensor& w_, const Tensor& l_, const Tensor& rw_, int64_t chunk = 2) {
      return ops::linear_cross_entropy(h_, w_, l_, rw_, chunk);
    };
    CHECK_THROWS_WITH_AS(run(h, w, labels, rw, 0), doctest::Contains("chunk_rows is 0; it must be at least 1"),
                         Error);
    CHECK_THROWS_WITH_AS(run(h, w, labels, rw, -3), doctest::Contains("chunk_rows is -3"), Error);
    CHECK_THROWS_WITH_AS(run(Tensor::from_ints({R, H}, std::vector<int32_t>(size_t(R * H))), w, labels, rw),
                         doctest::Contains("linear_cross_entropy: h is i32[4,3] but must be f32"), Error);
    CHECK_THROWS_WITH_AS(run(h, w, rw, rw), doctest::Contains("labels is f32[4] 'row_weights' but must be i32"),
                         Error);
    CHECK_THROWS_WITH_AS(run(h, w, labels, labels), doctest::Contains("row_weights is i32[4] 'labels' but must be f32"),
                         Error);
    CHECK_THROWS_WITH_AS(run(h.reshape({2, 2, 3}), w, labels, rw), doctest::Contains("must be 2-D"), Error);
    CHECK_THROWS_WITH_AS(run(h, randn({V, H + 1}, 3, 1.0f, "wide"), labels, rw),
                         doctest::Contains("h f32[4,3] 'h' has 3 features but weight f32[5,4] 'wide' expects 4"),
                         Error);
    CHECK_THROWS_WITH_AS(run(h, Tensor::persistent({0, H}, DType::f32), labels, rw),
                         doctest::Contains("has an empty vocabulary"), Error);
    CHECK_THROWS_WITH_AS(run(h, w, Tensor::from_ints({R + 1}, {0, 1, 2, 3, 4}), rw),
                         doctest::Contains("must hold one label per row of h f32[4,3] 'h', i.e. have shape [4]"),
                         Error);
    CHECK_THROWS_WITH_AS(run(h, w, labels, Tensor::from_floats({R - 1}, {0.5f, 0.25f, 0.25f})),
                         doctest::Contains("must hold one weight per row of h f32[4,3] 'h', i.e. have shape [4]"),
                         Error);
    Tensor trainable_rw = param({R}, 4, 1.0f, "rw");
    CHECK_THROWS_WITH_AS(run(h, w, labels, trainable_rw),
                         doctest::Contains("row_weights f32[4] 'rw' requires grad, but the op gives it none"), Error);
  }

  TEST_CASE("linear_cross_entropy backward adds dh (and dweight) to what the inputs' gradients hold") {
    CpuRuntime rt;
    const int64_t R = 7, H = 5, V = 11;
    const Tensor labels = Tensor::from_ints({R}, {3, 0, 10, -1, 7, 7, 1});
    const Tensor rw = Tensor::from_floats({R}, {0.2f, 0.1f, 0.15f, 0.0f, 0.25f, 0.2f, 0.1f});
    // h (and w) also feed a sum of squares, so one path's gradient reaches them first and the
    // other's must be added to it, whichever order backward takes.
    SUBCASE("frozen lm_head: dh made in the forward, scaled in backward") {
      Tensor h = param({R, H}, 1), w = randn({V, H}, 2, 0.5f);
      for (bool ce_first : {true, false}) {  // recorded, and added, before or after the other path
        CAPTURE(ce_first);
        check_gradients(
            [&] {
              if (ce_first) {
                Tensor ce = ops::linear_cross_entropy(h, w, labels, rw, 3).loss;
                return ops::add(ce, ops::sum(ops::mul(h, h)));
              }
              Tensor squares = ops::sum(ops::mul(h, h));
              return ops::add(squares, ops::linear_cross_entropy(h, w, labels, rw, 3).loss);
            },
            {h});
      }
    }
    SUBCASE("trainable lm_head: dh and dweight recomputed per chunk in backward") {
      Tensor h = param({R, H}, 3), w = param({V, H}, 4, 0.5f);
      check_gradients(
          [&] {
            Tensor ce = ops::linear_cross_entropy(h, w, labels, rw, 3).loss;
            return ops::add(ops::add(ce, ops::sum(ops::mul(h, h))), ops::sum(ops::mul(w, w)));
          },
          {h, w});
    }
  }
}
