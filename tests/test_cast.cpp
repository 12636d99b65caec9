// ops::cast on the CPU: f32 -> f32 is a copy into a new tensor, its backward accumulates the
// gradient unchanged (against finite differences too), it records and replays, and every other
// dtype pair is refused with the reason (the CPU computes in f32 throughout).
#include "graphs/program.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

TEST_SUITE("ops") {
  TEST_CASE("cast f32 -> f32 on the CPU copies into a new tensor") {
    CpuRuntime rt;
    const Tensor x = randn({3, 5}, 1);
    const Tensor y = ops::cast(x, DType::f32);
    CHECK(y.shape() == x.shape());
    CHECK(y.dtype() == DType::f32);
    CHECK(y.raw() != x.raw());
    CHECK(bitwise_equal(y.to_floats(), x.to_floats()));
    CHECK_FALSE(y.requires_grad());  // a frozen input records nothing
    CHECK(rt.ctx.tape().size() == 0);
  }

  TEST_CASE("cast backward accumulates the gradient unchanged") {
    CpuRuntime rt;
    Tensor x = param({4, 6}, 2);
    const std::vector<float> dy = random_floats(24, 3);
    for (int pass = 1; pass <= 2; ++pass) {
      const Tensor y = ops::cast(x, DType::f32);
      REQUIRE(y.requires_grad());
      run_backward({y}, {Tensor::from_floats({4, 6}, dy)});
      std::vector<float> want(dy);
      for (float& w : want) w *= float(pass);
      CHECK(bitwise_equal(x.grad().to_floats(), want));
    }
    // Through a chain, against finite differences.
    Tensor a = param({7}, 4), b = param({7}, 5);
    check_gradients([&] { return ops::mul(ops::cast(a, DType::f32), ops::cast(ops::scale(b, 2.0f), DType::f32)); },
                    {a, b});
  }

  TEST_CASE("cast records as a program and replays like eager") {
    CpuRuntime rt;
    const Tensor x = randn({64}, 6);
    const Tensor out = Tensor::persistent({64}, DType::f32);
    auto body = [&] { ops::copy_(out, ops::scale(ops::cast(x, DType::f32), 3.0f)); };
    body();
    const std::vector<float> eager = out.to_floats();
    rt.ctx.reserve_arena(plan_program(rt.ctx, "cast", body).arena_bytes);
    Program p = record_program(rt.ctx, "cast", body);
    ops::fill_(out, 0.0f);
    p.replay();
    CHECK(bitwise_equal(out.to_floats(), eager));
  }

  TEST_CASE("cast on the CPU refuses anything but f32 -> f32, naming the reason") {
    CpuRuntime rt;
    const Tensor x = randn({2, 2}, 7);
    CHECK_THROWS_WITH_AS(ops::cast(x, DType::bf16),
                         doctest::Contains("cast: f32[2,2] to bf16 on the CPU, but the CPU backend computes in f32"),
                         Error);
    CHECK_THROWS_WITH_AS(ops::cast(x, DType::i32), doctest::Contains("only f32 -> f32 (a copy) is supported there"),
                         Error);
    const std::vector<uint16_t> h(4, f32_to_bf16(1.0f));
    CHECK_THROWS_WITH_AS(ops::cast(Tensor::from_host({4}, DType::bf16, h.data()), DType::f32),
                         doctest::Contains("bf16 tensors exist on CUDA devices only"), Error);
    CHECK_THROWS_WITH_AS(ops::cast(Tensor::from_ints({2}, {1, 2}), DType::f32), doctest::Contains("cast: i32[2]"),
                         Error);
  }
}
