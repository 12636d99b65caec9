// matmul/linear, add, mul, scale, drop_group_heads: backward against central finite differences;
// matmul against a naive triple loop; drop/with_group_heads against index arithmetic; mean and the
// loss weights' helpers (normalize_weights, weighted_accuracy) by hand; the size checks of add, mul,
// accumulate_ and copy_.
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

TEST_SUITE("ops") {
  TEST_CASE("matmul forward equals a naive product for every transpose combination") {
    CpuRuntime rt;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        int64_t M = 5, K = 7, N = 3;
        Tensor a = randn(ta ? Shape{K, M} : Shape{M, K}, 1), b = randn(tb ? Shape{N, K} : Shape{K, N}, 2);
        std::vector<float> av = a.to_floats(), bv = b.to_floats(), c = ops::matmul(a, b, ta, tb).to_floats();
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k)
              s += double(av[size_t(ta ? k * M + i : i * K + k)]) * bv[size_t(tb ? j * K + k : k * N + j)];
            CHECK(c[size_t(i * N + j)] == doctest::Approx(s).epsilon(1e-5));
          }
      }
  }

  TEST_CASE("matmul backward, all transposes, several shapes") {
    CpuRuntime rt;
    for (auto [M, K, N] : {std::tuple{1, 1, 1}, {3, 5, 2}, {17, 9, 33}, {64, 70, 8}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          Tensor a = param(ta ? Shape{K, M} : Shape{M, K}, 11);
          Tensor b = param(tb ? Shape{N, K} : Shape{K, N}, 12);
          check_gradients([&] { return ops::matmul(a, b, ta, tb); }, {a, b});
        }
  }

  TEST_CASE("linear backward with 3-D input") {
    CpuRuntime rt;
    Tensor x = param({2, 5, 6}, 1), w = param({4, 6}, 2);
    Tensor y = ops::linear(x, w);
    CHECK(y.shape() == Shape{2, 5, 4});
    check_gradients([&] { return ops::linear(x, w); }, {x, w});
  }

  TEST_CASE("add, mul, scale backward") {
    CpuRuntime rt;
    for (int64_t n : {1, 7, 300}) {
      Tensor a = param({n}, 1), b = param({n}, 2);
      check_gradients([&] { return ops::add(a, b); }, {a, b});
      check_gradients([&] { return ops::mul(a, b); }, {a, b});
      check_gradients([&] { return ops::scale(a, -0.75f); }, {a});
    }
    Tensor a = param({3, 4, 5}, 3), b = param({3, 4, 5}, 4);
    check_gradients([&] { return ops::mul(ops::add(a, b), b); }, {a, b});
  }

  TEST_CASE("drop_group_heads keeps rows r % period != 0; with_group_heads puts them back with the fill") {
    CpuRuntime rt;
    std::vector<float> v(6 * 2);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
    Tensor x = Tensor::from_floats({6, 2}, v);  // two groups of 3 rows
    CHECK(ops::drop_group_heads(x, 3).to_floats() == std::vector<float>{2, 3, 4, 5, 8, 9, 10, 11});
    Tensor ids = Tensor::from_ints({4}, {7, 8, 9, 10});
    Tensor kept = ops::drop_group_heads(ids, 2);
    CHECK(kept.to_ints() == std::vector<int32_t>{8, 10});
    CHECK(ops::with_group_heads(kept, 2, 0xFF).to_ints() == std::vector<int32_t>{-1, 8, -1, 10});
    CHECK(ops::with_group_heads(ops::drop_group_heads(x, 3), 3, 0).to_floats() ==
          std::vector<float>{0, 0, 2, 3, 4, 5, 0, 0, 8, 9, 10, 11});
    CHECK_THROWS_WITH_AS(ops::drop_group_heads(x, 4), doctest::Contains("whole groups of 4 rows"), Error);
    CHECK_THROWS_WITH_AS(ops::drop_group_heads(x, 1), doctest::Contains("at least 2"), Error);
    // The gradient: the dropped rows get 0, fresh or accumulated into an existing one.
    Tensor a = param({6, 3}, 5);
    check_gradients([&] { return ops::drop_group_heads(a, 2); }, {a});
    check_gradients([&] { return ops::add(ops::drop_group_heads(ops::scale(a, 2.0f), 3), ops::drop_group_heads(a, 3)); },
                    {a});
  }

  TEST_CASE("sum and mean backward add to what a tensor's gradient already holds") {
    CpuRuntime rt;
    Tensor x = param({5}, 1);
    // d/dx (sum x + mean x + sum x) = 1 + 1/5 + 1 for every element, whatever order the paths arrive in.
    backward(ops::add(ops::add(ops::sum(x), ops::mean(x)), ops::sum(x)));
    for (float g : x.grad().to_floats()) CHECK(g == doctest::Approx(2.2).epsilon(1e-6));
    // A second backward adds to the leaf's gradient.
    backward(ops::mean(x));
    for (float g : x.grad().to_floats()) CHECK(g == doctest::Approx(2.4).epsilon(1e-6));
  }

  TEST_CASE("add and mul refuse shapes that differ but hold as many elements") {
    CpuRuntime rt;
    const Tensor a = randn({2, 3}, 1), b = randn({3, 2}, 2), c = randn({6}, 3);
    CHECK_ERROR(ops::add(a, b), "add: shapes differ: f32[2,3] and f32[3,2]");
    CHECK_ERROR(ops::add(a, c), "add: shapes differ: f32[2,3] and f32[6]");
    CHECK_ERROR(ops::mul(a, b), "mul: shapes differ: f32[2,3] and f32[3,2]");
  }

  TEST_CASE("drop_group_heads backward adds to a gradient that already holds one") {
    CpuRuntime rt;
    // Rows 0 and 2 of x (period 2) are dropped: sum(drop(x)) has gradient 1 on rows 1 and 3, 0 on 0 and 2.
    Tensor x = param({4, 2}, 1);
    for (int pass = 1; pass <= 2; ++pass) {
      backward(ops::sum(ops::drop_group_heads(x, 2)));  // a leaf's gradient accumulates across backward calls
      CHECK(x.grad().to_floats() == std::vector<float>{0, 0, float(pass), float(pass), 0, 0, float(pass), float(pass)});
    }
    // a used twice: one path's gradient reaches it first, the other's must be added to it.
    Tensor a = param({6, 3}, 5);
    check_gradients([&] { return ops::add(ops::drop_group_heads(a, 3), ops::drop_group_heads(ops::scale(a, 2.0f), 3)); },
                    {a});
  }

  TEST_CASE("with_group_heads refuses a tensor that requires grad (it records no backward)") {
    CpuRuntime rt;
    const Tensor y = param({4, 2}, 1);
    CHECK_ERROR(ops::with_group_heads(y, 2, 0), "with_group_heads: f32[4,2] requires grad");
    NoGrad no_grad;
    CHECK(ops::with_group_heads(y, 2, 0).shape() == Shape{8, 2});  // 4 groups of one kept row, heads back
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
}
