// Tensor basics: dtypes (bf16 and f16 NaN and infinity by IEEE bit patterns), shapes, views, host copies and
// the mismatch messages; a context on a missing device.
#include <bit>
#include <cmath>
#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "tests/test_util.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

using namespace dflash;
using namespace dflash::test;

namespace {
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
}  // namespace

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

  TEST_CASE("bf16 from f32: NaN stays NaN with the quiet bit set, infinity stays infinity, FLT_MAX rounds to it") {
    CHECK(f32_to_bf16(from_bits(0x7f800001u)) == 0x7fc0);  // payload only in the dropped half
    CHECK(f32_to_bf16(from_bits(0xff800001u)) == 0xffc0);
    CHECK(f32_to_bf16(from_bits(0x7fa00000u)) == 0x7fe0);
    CHECK(f32_to_bf16(from_bits(0x7f800000u)) == 0x7f80);  // +inf
    CHECK(f32_to_bf16(from_bits(0xff800000u)) == 0xff80);  // -inf
    CHECK(f32_to_bf16(from_bits(0x7f7fffffu)) == 0x7f80);  // FLT_MAX lies above bf16's max + half an ulp
    CHECK(f32_to_bf16(from_bits(0x7f7f7fffu)) == 0x7f7f);  // just below the halfway point: bf16's max
  }

  TEST_CASE("f16 to f32: NaN stays NaN, infinities keep their sign") {
    CHECK(bits_of(f16_to_f32(0x7e00)) == 0x7fc00000u);  // the quiet NaN
    CHECK(std::isnan(f16_to_f32(0x7c01)));               // the smallest payload
    CHECK(std::isnan(f16_to_f32(0xfe00)));
    CHECK(bits_of(f16_to_f32(0xfc00)) == 0xff800000u);
  }

  TEST_CASE("shapes of different rank differ, even when one is the other's prefix") {
    CHECK_FALSE(Shape{2, 3} == Shape{2, 3, 4});
    CHECK(Shape{2, 3} != Shape{2, 3, 4});
    CHECK_FALSE(Shape{} == Shape{5});
    CHECK(Shape{2, 3} == Shape::of({2, 3}));
    CpuRuntime rt;
    Tensor t = Tensor::persistent({2, 3, 4}, DType::f32);
    CHECK_THROWS_WITH_AS(check_shape("op", t, {2, 3}, "x"), doctest::Contains("[2,3,4]"), Error);
  }

  TEST_CASE("data<T>() of another dtype is refused, naming the tensor") {
    CpuRuntime rt;
    Tensor t = Tensor::from_floats({2}, {1.0f, 2.0f});
    CHECK_THROWS_WITH_AS(t.data<int32_t>(), doctest::Contains("data<i32>() on f32[2]"), Error);
    CHECK_THROWS_WITH_AS(t.data<uint16_t>(), doctest::Contains("read it with its own dtype"), Error);
    CHECK(t.data<float>()[1] == 2.0f);
  }

  TEST_CASE("tensor host conversions: u8 values above 127 stay positive; item() of a bf16 scalar; a frozen leaf has no grad") {
    CpuRuntime rt;
    const uint8_t bytes[3] = {0, 200, 255};
    CHECK(Tensor::from_host({3}, DType::u8, bytes).to_ints() == std::vector<int32_t>{0, 200, 255});
    const uint16_t half = f32_to_bf16(-2.5f);
    CHECK(Tensor::from_host({1}, DType::bf16, &half).item() == -2.5f);
    CHECK(Tensor::from_ints({1}, {-7}).item() == -7.0f);
    Tensor w = Tensor::from_floats({2}, {1.0f, 2.0f});
    w.set_requires_grad(true);
    CHECK(w.grad().defined());
    w.set_requires_grad(false);
    CHECK_FALSE(w.requires_grad());
    CHECK_FALSE(w.grad().defined());
  }
}
