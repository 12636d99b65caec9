// The runtime ops' argument checks and gradient wiring, and the CPU kernels under them: refusals by
// their messages, values against hand-computed numbers, gradients against finite differences.
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_kernels.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

TEST_SUITE("ops-kernels-wiring") {
  TEST_CASE("normalize_weights: w / (sum w + eps); all-zero weights give zeros, not NaN") {
    CpuRuntime rt;
    // sum 4, eps 1: every weight over 5.
    CHECK(ops::normalize_weights(Tensor::from_floats({3}, {1, 1, 2}), 1.0f).to_floats() ==
          std::vector<float>{0.2f, 0.2f, 0.4f});
    CHECK(ops::normalize_weights(Tensor::from_floats({2, 2}, {0, 0, 0, 0})).to_floats() ==
          std::vector<float>{0, 0, 0, 0});
    CHECK_ERROR(ops::normalize_weights(Tensor::from_ints({2}, {1, 1})), "normalize_weights: weights is i32[2] but must be f32");
  }

  TEST_CASE("weighted_accuracy: hits where w > 0.5 over sum w + eps; weights of another length refused") {
    CpuRuntime rt;
    const Tensor argmax = Tensor::from_ints({4}, {3, 1, 4, 1}), labels = Tensor::from_ints({4}, {3, 1, 5, 2});
    // Hits at 0 (w 1) and 1 (w 0.25, not counted: w <= 0.5); total weight 3, eps 1: 1 / 4.
    CHECK(ops::weighted_accuracy(argmax, labels, Tensor::from_floats({4}, {1, 0.25f, 1, 0.75f}), 1.0f).to_floats() ==
          std::vector<float>{0.25f});
    CHECK_ERROR(ops::weighted_accuracy(argmax, labels, Tensor::from_floats({3}, {1, 1, 1})),
                "weighted_accuracy: argmax i32[4], labels i32[4] and weights f32[3] must have the same number of elements");
    CHECK_ERROR(ops::weighted_accuracy(argmax, Tensor::from_ints({5}, {0, 0, 0, 0, 0}), Tensor::from_floats({4}, {1, 1, 1, 1})),
                "must have the same number of elements");
  }

  TEST_CASE("accumulate_ and copy_ refuse a source of another size or dtype") {
    CpuRuntime rt;
    const Tensor dst = Tensor::from_floats({2}, {1, 2});
    CHECK_ERROR(ops::accumulate_(dst, Tensor::from_floats({3}, {1, 1, 1})),
                "accumulate: destination f32[2] and source f32[3] differ in size");
    CHECK_ERROR(ops::accumulate_(Tensor::from_floats({3}, {1, 1, 1}), dst), "differ in size");
    ops::accumulate_(dst, Tensor::from_floats({1, 2}, {10, 20}));  // the element count decides, not the shape
    CHECK(dst.to_floats() == std::vector<float>{11, 22});
    // f32 and i32 of as many bytes: the bits would be copied unconverted.
    CHECK_ERROR(ops::copy_(dst, Tensor::from_ints({2}, {1, 2})),
                "copy: destination f32[2] and source i32[2] must have the same dtype and size");
    CHECK_ERROR(ops::copy_(dst, Tensor::from_floats({3}, {1, 2, 3})), "must have the same dtype and size");
  }

  TEST_CASE("mean is the sum over the count; the mean of an empty tensor is 0") {
    CpuRuntime rt;
    const Tensor x = Tensor::from_floats({2, 2}, {1, 2, 3, 6});
    CHECK(ops::sum(x).to_floats() == std::vector<float>{12});
    CHECK(ops::mean(x).to_floats() == std::vector<float>{3});
    const Tensor empty = Tensor::from_floats({0}, {});
    CHECK(ops::sum(empty).to_floats() == std::vector<float>{0});
    CHECK(ops::mean(empty).to_floats() == std::vector<float>{0});
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

  TEST_CASE("rope refuses a head dim of 0 and an inv_freq that is not f32") {
    CpuRuntime rt;
    const Tensor pos = Tensor::from_ints({3}, {0, 1, 2});
    CHECK_ERROR(ops::rope(Tensor::from_floats({3, 2, 0}, {}), pos, Tensor::from_floats({0}, {})),
                "rope: x f32[3,2,0] has head dim 0; rotate-half needs an even head dim >= 2");
    CHECK_ERROR(ops::rope(randn({3, 2, 8}, 1), pos, Tensor::from_ints({4}, {1, 1, 1, 1})),
                "rope: inv_freq is i32[4] but must be f32");
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

  TEST_CASE("concat backward adds to gradients its inputs already hold, each input in either place") {
    CpuRuntime rt;
    Tensor a = param({2, 3}, 1), b = param({2, 2}, 2);
    check_gradients([&] {
      // Recorded first, so its backward runs last: a's and b's gradients already hold the scaled path's.
      Tensor direct = ops::concat(a, b, 1);
      Tensor scaled = ops::concat(ops::scale(a, 2.0f), ops::scale(b, -0.5f), 1);
      return ops::add(direct, scaled);
    }, {a, b});
    check_gradients([&] {
      Tensor y = ops::scale(b, 1.5f);
      return ops::mul(ops::concat(y, y, 0), ops::concat(y, ops::scale(y, 2.0f), 0));
    }, {b});
  }

  TEST_CASE("gemm_f32 with K 0: beta 0 zeroes C, beta 1 keeps it") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float none[1] = {0};
    std::vector<float> c(6, nan);
    kernels::cpu::gemm_f32(2, 3, 0, none, 1, false, none, 3, false, c.data(), 3, 1.0f, 0.0f);
    CHECK(c == std::vector<float>(6, 0.0f));
    c.assign(6, 7.0f);
    kernels::cpu::gemm_f32(2, 3, 0, none, 1, false, none, 3, false, c.data(), 3, 1.0f, 1.0f);
    CHECK(c == std::vector<float>(6, 7.0f));
    // K 1, beta 1: C [1x2] += A [1x1] = 2 times B [1x2] = (3, 4).
    const float a[1] = {2}, b[2] = {3, 4};
    std::vector<float> d = {10, 20};
    kernels::cpu::gemm_f32(1, 2, 1, a, 1, false, b, 2, false, d.data(), 2, 1.0f, 1.0f);
    CHECK(d == std::vector<float>{16, 28});
  }

  TEST_CASE("fill_ and fill_zero set every element, the last included") {
    CpuRuntime rt;
    for (int64_t n : {1, 2, 7}) {
      Tensor t = Tensor::from_floats({n}, std::vector<float>(size_t(n), -1.0f));
      ops::fill_(t, 2.5f);
      CHECK(t.to_floats() == std::vector<float>(size_t(n), 2.5f));
      std::vector<float> z(size_t(n), -1.0f);
      kernels::cpu::fill_zero(z.data(), z.size() * sizeof(float));  // a byte count
      CHECK(z == std::vector<float>(size_t(n), 0.0f));
    }
  }
}
