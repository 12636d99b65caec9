// Tensor basics: dtypes, shapes, views, host copies and the mismatch messages; a context on a missing device.
#include "tests/test_util.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

using namespace dflash;
using namespace dflash::test;

TEST_SUITE("tensor") {
  TEST_CASE("a context on a CUDA device that is not there names what is visible and the way out") {
#ifdef DFLASH_CUDA
    const int visible = cuda_backend::device_count();
    const Device missing = Device::cuda(visible);  // one past the last
    CHECK_THROWS_WITH_AS(Context{missing},
                         doctest::Contains(visible == 0 ? "no CUDA device is visible (no GPU, or no driver)"
                                                        : "CUDA device(s) are visible (cuda:0..cuda:"),
                         Error);
    CHECK_THROWS_WITH_AS(Context{missing}, doctest::Contains("runtime.devices = \"cpu\"; dflash-bench without --cuda"),
                         Error);
#else
    CHECK_THROWS_WITH_AS(Context{Device::cuda(0)}, doctest::Contains("this build has no CUDA backend"), Error);
#endif
  }

  TEST_CASE("dtype sizes, names and bf16 rounding") {
    CHECK(dtype_size(DType::f32) == 4);
    CHECK(dtype_size(DType::bf16) == 2);
    CHECK(dtype_size(DType::i32) == 4);
    CHECK(dtype_size(DType::u8) == 1);
    CHECK(std::string(dtype_name(DType::bf16)) == "bf16");
    CHECK(bf16_to_f32(f32_to_bf16(1.0f)) == 1.0f);
    // 1 + 2^-8 is halfway between two bf16 values: ties go to even (1.0).
    CHECK(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)) == 1.0f);
    CHECK(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
    CHECK(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
    CHECK(f16_to_f32(0x3c00) == 1.0f);
    CHECK(f16_to_f32(0xc000) == -2.0f);
    CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
    CHECK(f16_to_f32(0x7bff) == 65504.0f);
    CHECK(std::isinf(f16_to_f32(0x7c00)));
  }

  TEST_CASE("shapes hold up to four dims and refuse more") {
    Shape s{2, 3, 4, 5};
    CHECK(s.numel() == 120);
    CHECK(s.rows() == 24);
    CHECK(s.str() == "[2,3,4,5]");
    CHECK_THROWS_WITH_AS(Shape({1, 2, 3, 4, 5}), doctest::Contains("at most 4"), Error);
  }

  TEST_CASE("storage is 64-byte aligned in eager mode") {
    CpuRuntime rt;
    for (int64_t n : {1, 3, 17, 1000}) {
      Tensor t = Tensor::empty({n}, DType::f32);
      CHECK(reinterpret_cast<uintptr_t>(t.raw()) % 64 == 0);
    }
  }

  TEST_CASE("views share storage: reshape and row ranges") {
    CpuRuntime rt;
    std::vector<float> v(12);
    for (int i = 0; i < 12; ++i) v[size_t(i)] = float(i);
    Tensor t = Tensor::from_floats({4, 3}, v);
    Tensor r = t.reshape({2, 6});
    CHECK(r.raw() == t.raw());
    CHECK(r.shape() == Shape{2, 6});
    Tensor rows = t.rows(1, 3);
    CHECK(rows.shape() == Shape{2, 3});
    CHECK(rows.to_floats() == std::vector<float>{3, 4, 5, 6, 7, 8});
    CHECK_THROWS_WITH_AS(t.reshape({5, 3}), doctest::Contains("has 12 elements"), Error);
    CHECK_THROWS_WITH_AS(t.rows(2, 5), doctest::Contains("need 0 <= begin <= end <= 4"), Error);
  }

  TEST_CASE("host copies convert and check sizes") {
    CpuRuntime rt;
    Tensor t = Tensor::from_ints({3}, {1, -2, 3});
    CHECK(t.to_ints() == std::vector<int32_t>{1, -2, 3});
    CHECK_THROWS_WITH_AS(t.to_floats(), doctest::Contains("use to_ints"), Error);
    std::vector<float> small(2);
    CHECK_THROWS_WITH_AS(Tensor::from_floats({3}, small), doctest::Contains("2 values for shape [3]"), Error);
    uint16_t b[2] = {f32_to_bf16(1.5f), f32_to_bf16(-2.0f)};
    Tensor h = Tensor::from_host({2}, DType::bf16, b);
    CHECK(h.to_floats() == std::vector<float>{1.5f, -2.0f});
  }

  TEST_CASE("dtype, shape and device mismatches name the op, the shapes and the fix") {
    CpuRuntime rt;
    Tensor a = randn({2, 3}, 1), b = randn({4, 5}, 2);
    CHECK_THROWS_WITH_AS(ops::matmul(a, b), doctest::Contains("matmul: inner dimensions differ"), Error);
    CHECK_THROWS_WITH_AS(ops::matmul(a, b), doctest::Contains("f32[2,3]"), Error);
    CHECK_THROWS_WITH_AS(ops::add(a, b), doctest::Contains("add: shapes differ: f32[2,3] and f32[4,5]"), Error);
    Tensor ids = Tensor::from_ints({2, 3}, {0, 1, 2, 3, 4, 5});
    CHECK_THROWS_WITH_AS(ops::add(a, ids), doctest::Contains("dtypes differ"), Error);
    CHECK_THROWS_WITH_AS(ops::linear(a, b), doctest::Contains("weights are [out, in]"), Error);
    CHECK_THROWS_WITH_AS(a.data<int32_t>(), doctest::Contains("read it with its own dtype"), Error);
    // A tensor of another worker's device.
    Context other(Device::cpu(1));
    Tensor elsewhere;
    {
      ContextScope scope(other);
      elsewhere = randn({2, 3}, 3);
    }
    CHECK_THROWS_WITH_AS(ops::add(a, elsewhere),
                         doctest::Contains("add: f32[2,3] is on cpu:1 but the op runs on cpu:0; move the tensor"), Error);
  }

  TEST_CASE("allocation counters count every eager allocation") {
    CpuRuntime rt;
    uint64_t before = alloc_counters().total();
    Tensor t = Tensor::empty({16}, DType::f32);
    Tensor u = Tensor::zeros({16}, DType::f32);
    CHECK(alloc_counters().total() - before == 2);
  }
}
