// Autograd semantics: reverse order, += accumulation (or fresh gradients within FreshLeafGrads),
// frozen tensors, no-grad scopes and the backward-twice error; row ranges and reshapes adding to gradients
// already held; swiglu and linear writing gradients over their dead inputs.
#include "graphs/program.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

namespace {
// Plans `body` (the online planner's arena), then runs it eagerly from zeroed gradients: that
// arena and the leaves' gradients, one after another.
std::pair<size_t, std::vector<float>> arena_and_grads(Context& ctx, const char* name, const std::function<void()>& body,
                                                      const std::vector<Tensor>& leaves) {
  const size_t arena = plan_program(ctx, name, body).arena_bytes;
  for (const Tensor& t : leaves) ops::fill_(t.grad(), 0.0f);
  body();  // eager
  std::vector<float> grads;
  for (const Tensor& t : leaves) {
    const std::vector<float> g = t.grad().to_floats();
    grads.insert(grads.end(), g.begin(), g.end());
  }
  return {arena, grads};
}
}  // namespace

TEST_SUITE("autograd") {
  TEST_CASE("gradients accumulate into leaf buffers across backward calls") {
    CpuRuntime rt;
    Tensor w = param({3, 2}, 1);
    Tensor x = randn({4, 2}, 2);
    auto loss = [&] { return ops::sum(ops::linear(x, w)); };
    backward(loss());
    std::vector<float> once = w.grad().to_floats();
    backward(loss());
    std::vector<float> twice = w.grad().to_floats();
    for (size_t i = 0; i < once.size(); ++i) CHECK(twice[i] == doctest::Approx(2 * once[i]));
    // d sum(x W^T) / dW[o, i] = sum over rows of x[:, i].
    std::vector<float> xv = x.to_floats();
    for (int o = 0; o < 3; ++o)
      for (int i = 0; i < 2; ++i) {
        double s = 0;
        for (int r = 0; r < 4; ++r) s += xv[size_t(r * 2 + i)];
        CHECK(once[size_t(o * 2 + i)] == doctest::Approx(s).epsilon(1e-5));
      }
  }

  TEST_CASE("frozen tensors and no-grad scopes record nothing") {
    CpuRuntime rt;
    Tensor frozen = randn({3, 2}, 1);
    Tensor x = randn({4, 2}, 2);
    size_t before = rt.ctx.tape().size();
    Tensor y = ops::linear(x, frozen);
    CHECK_FALSE(y.requires_grad());
    CHECK(rt.ctx.tape().size() == before);
    Tensor w = param({3, 2}, 3);
    {
      NoGrad ng;
      Tensor z = ops::linear(x, w);
      CHECK_FALSE(z.requires_grad());
    }
    CHECK(rt.ctx.tape().size() == before);
    Tensor z = ops::linear(x, w);
    CHECK(z.requires_grad());
    CHECK(rt.ctx.tape().size() == before + 1);
  }

  TEST_CASE("backward twice without a new forward is an error") {
    CpuRuntime rt;
    Tensor w = param({3, 2}, 1);
    Tensor x = randn({4, 2}, 2);
    Tensor loss = ops::sum(ops::linear(x, w));
    backward(loss);
    CHECK_THROWS_WITH_AS(backward(loss), doctest::Contains("backward called twice without a new forward"), Error);
    Tensor again = ops::sum(ops::linear(x, w));
    CHECK_NOTHROW(backward(again));
  }

  TEST_CASE("backward needs a one-element loss that requires grad") {
    CpuRuntime rt;
    Tensor x = randn({4, 2}, 2);
    CHECK_THROWS_WITH_AS(backward(ops::sum(x)), doctest::Contains("does not require grad"), Error);
    Tensor w = param({3, 2}, 1);
    CHECK_THROWS_WITH_AS(backward(ops::linear(x, w)), doctest::Contains("one-element"), Error);
  }

  TEST_CASE("a tensor used twice receives the sum of both gradients") {
    CpuRuntime rt;
    Tensor a = param({5}, 1);
    // y = a*a + a: dy/da = 2a + 1.
    Tensor y = ops::sum(ops::add(ops::mul(a, a), a));
    backward(y);
    std::vector<float> av = a.to_floats(), g = a.grad().to_floats();
    for (size_t i = 0; i < av.size(); ++i) CHECK(g[i] == doctest::Approx(2 * av[i] + 1));
  }

  TEST_CASE("FreshLeafGrads: each leaf's first gradient overwrites stale values, later ones add, unreached leaves are zeroed") {
    CpuRuntime rt;
    Tensor w = param({3, 4}, 1), w2 = param({2, 4}, 2), g = param({4}, 3), unused = param({5}, 4);
    const Tensor x = randn({6, 4}, 5), x2 = randn({3, 4}, 6), a = randn({2, 3, 4}, 7), b = randn({2, 2, 4}, 8),
                 z = randn({5, 4}, 9);
    const std::vector<Tensor> leaves = {w, w2, g, unused};
    auto loss = [&] {
      // w twice (overwritten, then added); w2 through linear_concat_rows (2 batch rows, 2 GEMMs each);
      // g through rmsnorm, whose backward only adds (zero-filled first).
      Tensor l = ops::add(ops::sum(ops::linear(x, w)), ops::sum(ops::linear(x2, w)));
      l = ops::add(l, ops::sum(ops::linear_concat_rows(a, b, w2)));
      return ops::add(l, ops::sum(ops::mul(ops::rmsnorm(z, g, 1e-6f), ops::rmsnorm(z, g, 1e-6f))));
    };
    // Independent reference in double: d sum(x W^T)/dW[o, i] = sum_r x[r, i] (for every o);
    // d sum((z_r / rms_r * g)^2)/dg[i] = sum_r 2 g[i] (z[r, i] / rms_r)^2.
    auto colsum = [](const Tensor& t, int64_t cols) {
      std::vector<double> s(size_t(cols), 0.0);
      const std::vector<float> v = t.to_floats();
      for (size_t k = 0; k < v.size(); ++k) s[k % size_t(cols)] += v[k];
      return s;
    };
    const std::vector<double> sx = colsum(x, 4), sx2 = colsum(x2, 4), sa = colsum(a, 4), sb = colsum(b, 4);
    const std::vector<float> zv = z.to_floats(), gv = g.to_floats();
    std::vector<double> dg(4, 0.0);
    for (int r = 0; r < 5; ++r) {
      double ms = 0;
      for (int i = 0; i < 4; ++i) ms += double(zv[size_t(r * 4 + i)]) * zv[size_t(r * 4 + i)] / 4;
      for (int i = 0; i < 4; ++i) {
        const double n = zv[size_t(r * 4 + i)] / std::sqrt(ms + 1e-6);
        dg[size_t(i)] += 2 * double(gv[size_t(i)]) * n * n;
      }
    }
    auto check_grads = [&](float stale) {
      const std::vector<float> gw = w.grad().to_floats(), gw2 = w2.grad().to_floats(), gg = g.grad().to_floats();
      for (size_t k = 0; k < gw.size(); ++k) CHECK(gw[k] == doctest::Approx(stale + sx[k % 4] + sx2[k % 4]).epsilon(1e-5));
      for (size_t k = 0; k < gw2.size(); ++k) CHECK(gw2[k] == doctest::Approx(stale + sa[k % 4] + sb[k % 4]).epsilon(1e-5));
      for (size_t k = 0; k < gg.size(); ++k) CHECK(gg[k] == doctest::Approx(stale + dg[k]).epsilon(1e-4));
      for (float u : unused.grad().to_floats()) CHECK(u == stale);
    };
    // Stale values: without the scope they are added to; within it they are gone.
    for (const Tensor& t : leaves) ops::fill_(t.grad(), 7.0f);
    backward(loss());
    check_grads(7.0f);
    for (const Tensor& t : leaves) ops::fill_(t.grad(), 7.0f);
    {
      FreshLeafGrads fresh(leaves);
      CHECK_THROWS_WITH_AS([&] { FreshLeafGrads inner(leaves); }(), doctest::Contains("do not nest"), Error);
      backward(loss());
      fresh.finish();
    }
    check_grads(0.0f);
    // The scope has ended: the next backward adds again.
    backward(loss());
    const std::vector<float> gw = w.grad().to_floats();
    for (size_t k = 0; k < gw.size(); ++k) CHECK(gw[k] == doctest::Approx(2 * (sx[k % 4] + sx2[k % 4])).epsilon(1e-5));
  }

  TEST_CASE("view gradients flow back to the base") {
    CpuRuntime rt;
    Tensor a = param({4, 3}, 1);
    check_gradients([&] { return ops::scale(a.rows(1, 3).reshape({3, 2}), 2.0f); }, {a});
    std::vector<float> g = a.grad().to_floats();
    // Rows 0 and 3 are outside the view: their gradient stays 0.
    for (int i : {0, 1, 2, 9, 10, 11}) CHECK(g[size_t(i)] == 0.0f);
  }

  TEST_CASE("rows refuses a negative begin; overlapping row ranges add their gradients") {
    CpuRuntime rt;
    const Tensor t = randn({4, 3}, 1);
    CHECK_ERROR(t.rows(-1, 2), "rows(-1, 2) on f32[4,3]: need 0 <= begin <= end <= 4");
    CHECK(t.rows(2, 2).numel() == 0);  // an empty range is a view too
    // Rows 1 and 2 are in both ranges: their gradient is the sum of both.
    Tensor x = param({4, 3}, 2);
    check_gradients([&] { return ops::add(x.rows(0, 3), ops::scale(x.rows(1, 4), 2.0f)); }, {x});
    Tensor a = param({5, 2}, 3);
    check_gradients([&] {  // the same through a non-leaf, whose gradient is a temporary
      Tensor y = ops::scale(a, 1.5f);
      return ops::mul(y.rows(0, 3), y.rows(2, 5));
    }, {a});
  }

  TEST_CASE("reshape hands the gradient to a leaf, and adds it to one that already holds a gradient") {
    CpuRuntime rt;
    Tensor x = param({2, 6}, 1);
    check_gradients([&] { return ops::scale(x.reshape({3, 4}), 2.0f); }, {x});
    check_gradients([&] { return ops::add(ops::scale(x, 0.5f), ops::scale(x.reshape({3, 4}).reshape({2, 6}), 3.0f)); }, {x});
    check_gradients([&] {
      Tensor y = ops::scale(x, 1.5f);
      Tensor direct = y.reshape({12});  // its backward runs after the other path's has reached y
      Tensor negated = ops::scale(y, -1.0f).reshape({12});
      return ops::mul(direct, negated);
    }, {x});
  }
}

TEST_SUITE("autograd") {
  TEST_CASE("swiglu backward writes its gradients over gate and up when nothing else holds them") {
    // The same gradients whether gate and up are dead after swiglu (then their storage becomes
    // their gradients') or still held by the caller; the planned arena is smaller when dead.
    CpuRuntime rt;
    Tensor x = randn({64, 32}, 1), w_gate = param({48, 32}, 2, 0.2f), w_up = param({48, 32}, 3, 0.2f);
    auto run = [&](bool hold) {
      std::vector<Tensor> held;
      auto body = [&] {
        Tensor gate = ops::linear(x, w_gate), up = ops::linear(x, w_up);  // (64, 48) each
        if (hold) held = {gate, up};
        Tensor y = ops::swiglu(gate, up);
        gate = Tensor();
        up = Tensor();
        backward(ops::sum(ops::mul(y, y)));
        held.clear();
      };
      return arena_and_grads(rt.ctx, hold ? "held" : "dead", body, {w_gate, w_up});
    };
    auto [dead_arena, dead_grads] = run(false);
    auto [held_arena, held_grads] = run(true);
    CHECK(bitwise_equal(dead_grads, held_grads));
    // What the caller still holds keeps its values: gate itself, or only a view of its storage.
    for (bool view_only : {false, true}) {
      CAPTURE(view_only);
      Tensor gate = ops::linear(x, w_gate), up = ops::linear(x, w_up);
      Tensor held = view_only ? gate.reshape({64 * 48}) : gate;
      const std::vector<float> before = held.to_floats();
      Tensor y = ops::swiglu(gate, up);
      gate = Tensor();
      up = Tensor();
      backward(ops::sum(ops::mul(y, y)));
      CHECK(bitwise_equal(held.to_floats(), before));
    }
    // Without the reuse both plans hold gate and up until swiglu's backward: the same arena.
    CHECK(dead_arena + 64 * 48 * sizeof(float) <= held_arena);
    // And the gradients are right: against finite differences of the same loss.
    check_gradients([&] { return ops::sum(ops::mul(ops::swiglu(ops::linear(x, w_gate), ops::linear(x, w_up)),
                                                   ops::swiglu(ops::linear(x, w_gate), ops::linear(x, w_up)))); },
                    {w_gate, w_up});
  }

  TEST_CASE("linear backward writes dx over its input x when nothing else holds x, after dW has read it") {
    // x is a non-leaf (like the down projection's input): dead after the linear, its storage
    // becomes dx's. The same gradients (weight and the leaf behind x) as when the caller holds x,
    // a smaller arena, and whatever the caller holds keeps its values.
    CpuRuntime rt;
    Tensor x0 = param({64, 48}, 4), w = param({32, 48}, 5, 0.2f);
    auto run = [&](bool hold) {
      std::vector<Tensor> held;
      auto body = [&] {
        Tensor x = ops::scale(x0, 1.5f);  // (64, 48)
        if (hold) held = {x};
        Tensor y = ops::linear(x, w);  // (64, 32)
        x = Tensor();
        backward(ops::sum(ops::mul(y, y)));
        held.clear();
      };
      return arena_and_grads(rt.ctx, hold ? "held" : "dead", body, {w, x0});
    };
    auto [dead_arena, dead_grads] = run(false);
    auto [held_arena, held_grads] = run(true);
    CHECK(bitwise_equal(dead_grads, held_grads));
    CHECK(dead_arena + 64 * 48 * sizeof(float) <= held_arena);
    for (bool view_only : {false, true}) {
      CAPTURE(view_only);
      Tensor x = ops::scale(x0, 1.5f);
      Tensor held = view_only ? x.reshape({64 * 48}) : x;
      const std::vector<float> before = held.to_floats();
      Tensor y = ops::linear(x, w);
      x = Tensor();
      backward(ops::sum(ops::mul(y, y)));
      CHECK(bitwise_equal(held.to_floats(), before));
    }
    check_gradients([&] {
      Tensor y = ops::linear(ops::scale(x0, 1.5f), w);
      return ops::sum(ops::mul(y, y));
    }, {x0, w});
  }

  TEST_CASE("swiglu backward: up's gradient takes up's storage when only gate is still held, and gate's the other way") {
    // The planned arena of linear -> swiglu -> loss -> backward with the caller holding gate, up,
    // both or neither: a dead input lends its storage to its own gradient, so holding only one
    // input costs at least one (64, 256) f32 buffer less than holding both, whichever it is.
    CpuRuntime rt;
    Tensor x = randn({64, 16}, 1), w_gate = param({256, 16}, 2, 0.2f), w_up = param({256, 16}, 3, 0.2f);
    auto arena = [&](bool hold_gate, bool hold_up) {
      return plan_program(rt.ctx, "swiglu", [&] {
               std::vector<Tensor> held;
               Tensor gate = ops::linear(x, w_gate), up = ops::linear(x, w_up);  // (64, 256) each
               if (hold_gate) held.push_back(gate);
               if (hold_up) held.push_back(up);
               Tensor y = ops::swiglu(gate, up);
               gate = Tensor();
               up = Tensor();
               backward(ops::sum(ops::mul(y, y)));
               held.clear();
             }).arena_bytes;
    };
    const size_t both = arena(true, true), only_gate = arena(true, false), only_up = arena(false, true),
                 none = arena(false, false);
    INFO("arena: both " << both << ", only gate " << only_gate << ", only up " << only_up << ", none " << none);
    const size_t buffer = 64 * 256 * sizeof(float);
    CHECK(only_gate + buffer <= both);
    CHECK(only_up + buffer <= both);
    CHECK(none + buffer <= both);
  }
}
