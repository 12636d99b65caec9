// Which kernels the GPU runs: the config key runtime.kernels (docs/config.md), "auto" (the rules of
// kernels/heuristics.h: the Hopper kernels on compute capability 9.0 where the build has them, the
// portable kernels elsewhere) or "portable" (the portable kernels on any GPU). The CPU has one set of
// kernels; the choice only reaches the CUDA launchers (kernels/cuda/device_traits.h).
#pragma once
#include <string>

#include "kernels/heuristics.h"

namespace dflash {

enum class KernelPaths { automatic, portable };

const char* kernel_paths_name(KernelPaths k);  // "auto", "portable"

// Whether this build holds the Hopper kernels (CMake's DFLASH_CUDA_ARCHS lists 90a).
bool hopper_kernels_built();

// The choice runtime.kernels names. Throws, naming the key, the value and the choices, on another value.
KernelPaths parse_kernel_paths(const std::string& value);

// The process-wide choice ("auto" until set) and its setter (a job's config at setup; benchmarks and
// tests); the CUDA launchers read it at every launch. Set it between steps, not while programs are
// being recorded.
KernelPaths kernel_paths();
void set_kernel_paths(KernelPaths k);

// Sets the choice for a scope and restores the previous one.
class KernelPathsScope {
 public:
  explicit KernelPathsScope(KernelPaths k);
  ~KernelPathsScope();
  KernelPathsScope(const KernelPathsScope&) = delete;
  KernelPathsScope& operator=(const KernelPathsScope&) = delete;

 private:
  KernelPaths previous_;
};

// The device `hw` (compute capability and SMs) as the rules see it in this process, as the CUDA
// launchers do: with this build's Hopper kernels and the process's choice.
kernels::heuristics::Device rules_device(kernels::heuristics::Device hw);

}  // namespace dflash
