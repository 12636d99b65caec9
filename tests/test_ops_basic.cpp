// matmul/linear, add, mul, scale, drop_group_heads: backward against central finite differences;
// matmul against a naive triple loop; drop/with_group_heads against index arithmetic.
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

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
}
