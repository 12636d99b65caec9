// The backward hook the overlapped gradient reduction hangs on: it runs once the layers recorded
// after it are done (their parameters' gradients complete), before the layers below, and hands
// the gradient on unchanged (the gradients equal those without the hook, bit for bit).
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

TEST_SUITE("autograd") {
  TEST_CASE("grad_hook runs between the backward of the layer after it and the layer before it") {
    CpuRuntime rt;
    Tensor w1 = param({4, 3}, 1), w2 = param({5, 4}, 2);
    Tensor x = randn({6, 3}, 3);
    auto run = [&](bool hook) {
      std::vector<float> at_hook_w1, at_hook_w2;
      int calls = 0;
      Tensor h = ops::linear(x, w1);
      if (hook)
        h = grad_hook(h, [&] {
          ++calls;
          at_hook_w1 = w1.grad().to_floats();
          at_hook_w2 = w2.grad().to_floats();
        });
      backward(ops::sum(ops::linear(ops::swiglu(h, h), w2)));
      if (hook) {
        CHECK(calls == 1);
        CHECK(max_abs(at_hook_w1) == 0.0);  // the layer before it has not run yet
        CHECK(at_hook_w2 == w2.grad().to_floats());  // the layer after it is complete
      }
      std::vector<float> g = w1.grad().to_floats(), g2 = w2.grad().to_floats();
      g.insert(g.end(), g2.begin(), g2.end());
      ops::fill_(w1.grad(), 0.0f);
      ops::fill_(w2.grad(), 0.0f);
      return g;
    };
    std::vector<float> plain = run(false), hooked = run(true);
    CHECK(max_abs(plain) > 0);
    CHECK(bitwise_equal(plain, hooked));
  }

  TEST_CASE("grad_hook on a tensor that needs no gradient records nothing") {
    CpuRuntime rt;
    Tensor x = randn({2, 2}, 1);
    size_t before = rt.ctx.tape().size();
    bool called = false;
    Tensor y = grad_hook(x, [&] { called = true; });
    CHECK(y.id() == x.id());
    CHECK(rt.ctx.tape().size() == before);
    CHECK_FALSE(called);
  }
}
