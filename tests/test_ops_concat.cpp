// concat and concat_all (runtime/ops/concat.cpp): forward indexed element by element, backward against
// finite differences and adding to gradients the inputs already hold, and every refusal with its message.
#include <vector>

#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

TEST_SUITE("ops") {
  // ---- concat ----

  TEST_CASE("concat forward along dims 0, 1 and -1, f32 and i32") {
    CpuRuntime rt;
    // a [2, 3, 4] and b with one dim changed; the reference indexes every output element.
    for (int dim : {0, 1, -1, 2, -3}) {
      int d = dim < 0 ? dim + 3 : dim;
      Shape as{2, 3, 4}, bs{2, 3, 4};
      bs.d[d] = 5;
      Tensor a = randn(as, 70), b = randn(bs, 71);
      Tensor y = ops::concat(a, b, dim);
      Shape want = as;
      want.d[d] = as.d[d] + bs.d[d];
      REQUIRE(y.shape() == want);
      std::vector<float> av = a.to_floats(), bv = b.to_floats(), yv = y.to_floats();
      for (int64_t i = 0; i < want.d[0]; ++i)
        for (int64_t j = 0; j < want.d[1]; ++j)
          for (int64_t k = 0; k < want.d[2]; ++k) {
            int64_t idx[3] = {i, j, k};
            bool from_a = idx[d] < as.d[d];
            if (!from_a) idx[d] -= as.d[d];
            const Shape& src = from_a ? as : bs;
            float v = (from_a ? av : bv)[size_t((idx[0] * src.d[1] + idx[1]) * src.d[2] + idx[2])];
            CHECK(yv[size_t((i * want.d[1] + j) * want.d[2] + k)] == v);
          }
    }
    // i32 along the last dim.
    Tensor a = Tensor::from_ints({2, 2}, {1, 2, 3, 4}), b = Tensor::from_ints({2, 1}, {-5, -6});
    Tensor y = ops::concat(a, b, -1);
    CHECK(y.dtype() == DType::i32);
    CHECK(y.shape() == Shape{2, 3});
    CHECK(y.to_ints() == std::vector<int32_t>{1, 2, -5, 3, 4, -6});
    // i32 along dim 0 (context positions then draft positions).
    CHECK(ops::concat(Tensor::from_ints({3}, {0, 1, 2}), Tensor::from_ints({2}, {7, 8}), 0).to_ints() ==
          std::vector<int32_t>{0, 1, 2, 7, 8});
    // An empty part.
    CHECK(ops::concat(randn({0, 3}, 1), randn({2, 3}, 2), 0).shape() == Shape{2, 3});
  }

  TEST_CASE("concat backward against finite differences") {
    CpuRuntime rt;
    for (int dim : {0, 1, -1}) {
      INFO("dim " << dim);
      for (auto [a_len, b_len] : {std::pair{1, 1}, {3, 5}, {33, 7}}) {
        Shape as{4, 3, 6}, bs{4, 3, 6};
        int d = dim < 0 ? dim + 3 : dim;
        as.d[d] = a_len;
        bs.d[d] = b_len;
        Tensor a = param(as, 80), b = param(bs, 81);
        check_gradients([&] { return ops::concat(a, b, dim); }, {a, b});
      }
    }
    // Only one side trainable, either side.
    Tensor a = param({5, 2}, 82), b_frozen = randn({5, 3}, 83);
    check_gradients([&] { return ops::concat(a, b_frozen, 1); }, {a});
    check_gradients([&] { return ops::concat(b_frozen, a, -1); }, {a});
  }

  TEST_CASE("concat errors name the op, the tensors and the fix") {
    CpuRuntime rt;
    Tensor a = randn({2, 3}, 1);
    CHECK_THROWS_WITH_AS(ops::concat(a, randn({4, 3}, 2), 1),
                         doctest::Contains("differ in dim 0; they must agree on every dim except the concatenated one (1)"),
                         Error);
    CHECK_THROWS_WITH_AS(ops::concat(a, randn({2, 3, 1}, 2), 0), doctest::Contains("must have the same number of dims"),
                         Error);
    CHECK_THROWS_WITH_AS(ops::concat(a, randn({2, 3}, 2), 2), doctest::Contains("use a dim in [-2, 1]"), Error);
    CHECK_THROWS_WITH_AS(ops::concat(a, Tensor::from_ints({2, 3}, {0, 0, 0, 0, 0, 0}), 0),
                         doctest::Contains("both must have the same dtype"), Error);
    Tensor ia = Tensor::from_ints({2}, {1, 2});
    ia.set_requires_grad(true);
    CHECK_THROWS_WITH_AS(ops::concat(ia, Tensor::from_ints({1}, {3}), 0),
                         doctest::Contains("only f32 concatenation is differentiable"), Error);
  }

  TEST_CASE("concat refuses inputs that differ in a dim after the concatenated one") {
    CpuRuntime rt;
    const Tensor a = randn({2, 3}, 1);
    CHECK_ERROR(ops::concat(a, randn({2, 2}, 2), 0), "differ in dim 1; they must agree on every dim except the concatenated one (0)");
    CHECK_ERROR(ops::concat(randn({2, 3, 4}, 3), randn({2, 5, 2}, 4), 1), "differ in dim 2");
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

  // ---- concat_all ----

  TEST_CASE("concat_all: many parts along dims 0, 1 and -1, indexed element by element; its refusals") {
    CpuRuntime rt;
    // Three parts of [2, 3, 4] with the concatenated dim 1, 4 and 2 long; the reference indexes every
    // output element back to its part.
    for (int dim : {0, 1, -1, -3}) {
      INFO("dim " << dim);
      const int d = dim < 0 ? dim + 3 : dim;
      const int64_t lens[3] = {1, 4, 2};
      std::vector<Tensor> parts;
      std::vector<std::vector<float>> vals;
      for (int i = 0; i < 3; ++i) {
        Shape sh{2, 3, 4};
        sh.d[d] = lens[i];
        parts.push_back(randn(sh, 90 + uint64_t(i)));
        vals.push_back(parts.back().to_floats());
      }
      Tensor y = ops::concat_all(parts, dim);
      Shape want{2, 3, 4};
      want.d[d] = 7;
      REQUIRE(y.shape() == want);
      const std::vector<float> yv = y.to_floats();
      for (int64_t i = 0; i < want.d[0]; ++i)
        for (int64_t j = 0; j < want.d[1]; ++j)
          for (int64_t k = 0; k < want.d[2]; ++k) {
            int64_t idx[3] = {i, j, k}, part = 0;
            while (idx[d] >= lens[part]) idx[d] -= lens[part++];
            Shape src{2, 3, 4};
            src.d[d] = lens[part];
            CHECK(yv[size_t((i * want.d[1] + j) * want.d[2] + k)] ==
                  vals[size_t(part)][size_t((idx[0] * src.d[1] + idx[1]) * src.d[2] + idx[2])]);
          }
    }
    // i32, one part, and an empty part.
    CHECK(ops::concat_all({Tensor::from_ints({2, 1}, {1, 2}), Tensor::from_ints({2, 0}, {}),
                           Tensor::from_ints({2, 2}, {3, 4, 5, 6})}, 1).to_ints() == std::vector<int32_t>{1, 3, 4, 2, 5, 6});
    CHECK(ops::concat_all({Tensor::from_ints({3}, {7, 8, 9})}, 0).to_ints() == std::vector<int32_t>{7, 8, 9});

    CHECK_THROWS_WITH_AS(ops::concat_all({}, 0), doctest::Contains("concat_all: no parts"), Error);
    CHECK_THROWS_WITH_AS(ops::concat_all({randn({2, 3}, 1), Tensor::from_ints({2, 1}, {1, 2})}, 1),
                         doctest::Contains("concat_all: part 1 is i32[2,1] and part 0 is f32[2,3]"), Error);
    CHECK_THROWS_WITH_AS(ops::concat_all({randn({2, 3}, 1), randn({3, 3}, 2)}, 1),
                         doctest::Contains("differ in dim 0; they must agree on every dim except the concatenated "
                                           "one (1)"),
                         Error);
    CHECK_THROWS_WITH_AS(ops::concat_all({randn({2, 3}, 1)}, 2),
                         doctest::Contains("concat_all: dim 2 is out of range"), Error);
    Tensor w = param({2, 3}, 3);
    CHECK_THROWS_WITH_AS(ops::concat_all({randn({2, 3}, 1), w}, 1),
                         doctest::Contains("concat_all: gradient requested through its parts; it is forward-only"),
                         Error);
    NoGrad no_grad;
    CHECK(ops::concat_all({randn({2, 3}, 1), w}, 1).shape() == Shape{2, 6});
    // A destination of the result's size is written and returned; another size is refused.
    Tensor dst = Tensor::persistent({3, 2}, DType::i32, "dst");
    Tensor got = ops::concat_all({Tensor::from_ints({3, 1}, {1, 2, 3}), Tensor::from_ints({3, 1}, {4, 5, 6})}, 1, dst);
    CHECK(got.raw() == dst.raw());
    CHECK(dst.to_ints() == std::vector<int32_t>{1, 4, 2, 5, 3, 6});
    CHECK_THROWS_WITH_AS(ops::concat_all({Tensor::from_ints({3, 1}, {1, 2, 3})}, 1, dst),
                         doctest::Contains("concat_all: the destination i32[3,2] 'dst' on cpu:0 must have the dtype, size "
                                           "and device of the result i32[3,1] on cpu:0"),
                         Error);
  }

  // ---- split_columns ----

  TEST_CASE("split_columns: each part holds its columns of every row, element by element; its refusals") {
    CpuRuntime rt;
    // [2, 3, 9] cut into widths 4, 1 and 4 (the q, k and v of one packed GEMM, in miniature).
    Tensor x = randn({2, 3, 9}, 95);
    const std::vector<float> xv = x.to_floats();
    const std::vector<int64_t> widths = {4, 1, 4};
    const std::vector<Tensor> parts = ops::split_columns(x, widths);
    REQUIRE(parts.size() == 3);
    int64_t start = 0;
    for (size_t p = 0; p < 3; ++p) {
      INFO("part " << p);
      REQUIRE(parts[p].shape() == Shape{2, 3, widths[p]});
      const std::vector<float> pv = parts[p].to_floats();
      for (int64_t r = 0; r < 6; ++r)
        for (int64_t c = 0; c < widths[p]; ++c) CHECK(pv[size_t(r * widths[p] + c)] == xv[size_t(r * 9 + start + c)]);
      start += widths[p];
    }
    // i32 and one part (a copy).
    const std::vector<Tensor> ints = ops::split_columns(Tensor::from_ints({2, 3}, {1, 2, 3, 4, 5, 6}), {2, 1});
    CHECK(ints[0].to_ints() == std::vector<int32_t>{1, 2, 4, 5});
    CHECK(ints[1].to_ints() == std::vector<int32_t>{3, 6});
    CHECK(ops::split_columns(Tensor::from_ints({3}, {7, 8, 9}), {3})[0].to_ints() == std::vector<int32_t>{7, 8, 9});

    CHECK_THROWS_WITH_AS(ops::split_columns(x, {4, 4}),
                         doctest::Contains("split_columns: the widths add up to 8 but f32[2,3,9] has 9 columns"), Error);
    CHECK_THROWS_WITH_AS(ops::split_columns(x, {9, 0}),
                         doctest::Contains("split_columns: a part of width 0 asked of f32[2,3,9]; every width must be >= 1"),
                         Error);
    CHECK_THROWS_WITH_AS(ops::split_columns(x, {}), doctest::Contains("split_columns: 0 parts asked"), Error);
    CHECK_THROWS_WITH_AS(ops::split_columns(x, {1, 1, 1, 1, 5}),
                         doctest::Contains("split_columns: 5 parts asked of f32[2,3,9]; give 1 to 4"), Error);
    Tensor w = param({2, 3}, 3);
    CHECK_THROWS_WITH_AS(ops::split_columns(w, {1, 2}),
                         doctest::Contains("split_columns: gradient requested through"), Error);
    NoGrad no_grad;
    CHECK(ops::split_columns(w, {1, 2})[1].shape() == Shape{2, 2});
  }
}
