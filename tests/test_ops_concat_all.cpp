// concat_all (runtime/ops/concat.cpp): many parts in one pass, indexed element by element against
// the parts, into a destination, and every refusal with its message.
#include <vector>

#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

TEST_SUITE("ops") {
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
}
