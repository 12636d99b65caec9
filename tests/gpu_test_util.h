// Helpers shared by the GPU test suites ("gpu-*"): the no-GPU guard, a CPU and a CUDA context
// side by side, float tensors of a chosen dtype made from host values, and a case's run per
// runtime.kernels choice.
#pragma once
#ifdef DFLASH_CUDA
#include <vector>

#include "kernels/cuda/device_traits.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/kernel_paths.h"
#include "tests/test_util.h"

// A GPU suite fails (never silently passes) where no GPU is visible; the CPU command excludes it.
#define REQUIRE_GPU()                                                                                  \
  if (::dflash::cuda_backend::device_count() == 0)                                                    \
  FAIL("no CUDA device visible: the gpu suites run only on a GPU host (exclude them with -tse='gpu*')")

// A case of the Hopper kernels themselves (wgmma, TMA, clusters) fails, saying why, where they do
// not run: another compute capability than 9.0, a build without 90a, runtime.kernels = "portable".
#define REQUIRE_HOPPER()                                                                              \
  if (const char* no_hopper = ::dflash::kernels::cuda::device_traits().sm90_unavailable())           \
  FAIL("this case tests the Hopper kernels, which do not run here: " << no_hopper)

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

// The runtime.kernels choice of this run of the enclosing test case, which runs once per choice
// (doctest subcases): "auto" (the Hopper kernels where the rules choose them: on an H100 or H200),
// then "portable" (the portable kernels on any GPU). The case sets it for its run with a
// KernelPathsScope (or, through a job, the key) and checks it with expect_kernel_paths.
inline KernelPaths each_kernel_paths() {
  KernelPaths k = KernelPaths::automatic;
  SUBCASE("runtime.kernels = auto") {}
  SUBCASE("runtime.kernels = portable") { k = KernelPaths::portable; }
  return k;
}

// The launchers see the choice k (and say which kernels run on this GPU).
inline void expect_kernel_paths(KernelPaths k) {
  const kernels::heuristics::Device d = kernels::cuda::device_traits();
  CHECK(d.portable == (k == KernelPaths::portable));
  MESSAGE("runtime.kernels = \"" << std::string(kernel_paths_name(k)) << "\" on compute capability " << d.major << "."
                                  << d.minor << ": " << kernels::heuristics::describe(d));
}

}  // namespace dflash::test
#endif
