// The CPU kernels under the ops (kernels/cpu/cpu_kernels.h) at their edges: a GEMM with K 0 under beta 0
// and 1, and fills that must reach the last element (fill_zero takes a byte count).
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

TEST_SUITE("cpu-kernels") {
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
