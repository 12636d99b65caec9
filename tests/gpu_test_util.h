// Helpers shared by the GPU test suites ("gpu-*"): the no-GPU guard, a CPU and a CUDA context
// side by side, and float tensors of a chosen dtype made from host values.
#pragma once
#ifdef DFLASH_CUDA
#include <vector>

#include "runtime/cuda/cuda_backend.h"
#include "tests/test_util.h"

// A GPU suite fails (never silently passes) where no GPU is visible; the CPU command excludes it.
#define REQUIRE_GPU()                                                                                  \
  if (::dflash::cuda_backend::device_count() == 0)                                                    \
  FAIL("no CUDA device visible: the gpu suites run only on a GPU host (exclude them with -tse='gpu*')")

namespace dflash::test {

struct Backends {
  Context cpu{Device::cpu()};
  Context gpu{Device::cuda(0)};
};

// v rounded to dt's precision (so both backends see the same values).
inline std::vector<float> round_to(DType dt, std::vector<float> v) {
  if (dt == DType::bf16)
    for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

// A persistent tensor of dtype dt on the current context holding v (rounded when bf16).
inline Tensor make_float(const Shape& s, const std::vector<float>& v, DType dt) {
  if (dt == DType::f32) return Tensor::from_floats(s, v);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
  return Tensor::from_host(s, DType::bf16, h.data());
}

}  // namespace dflash::test
#endif
