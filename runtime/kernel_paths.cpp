// The process's runtime.kernels: held here, and handed to the CUDA launchers in a CUDA build.
#include "runtime/kernel_paths.h"

#include <atomic>

#include "runtime/error.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace dflash {

namespace {
std::atomic<bool> g_portable{false};
}  // namespace

const char* kernel_paths_name(KernelPaths k) { return k == KernelPaths::portable ? "portable" : "auto"; }

bool hopper_kernels_built() { return kernels::heuristics::kSm90KernelsBuilt; }

KernelPaths parse_kernel_paths(const std::string& value) {
  DF_CHECK(value == "auto" || value == "portable",
           "runtime.kernels = \"" << value
                                  << "\" is not a choice of kernels: use \"auto\" (the Hopper kernels on compute "
                                     "capability 9.0 where the build has them, the portable kernels elsewhere) or "
                                     "\"portable\" (the portable kernels on any GPU)");
  return value == "portable" ? KernelPaths::portable : KernelPaths::automatic;
}

KernelPaths kernel_paths() { return g_portable.load() ? KernelPaths::portable : KernelPaths::automatic; }

void set_kernel_paths(KernelPaths k) {
  g_portable.store(k == KernelPaths::portable);
#ifdef DFLASH_CUDA
  cuda_backend::set_portable_kernels(k == KernelPaths::portable);
#endif
}

KernelPathsScope::KernelPathsScope(KernelPaths k) : previous_(kernel_paths()) { set_kernel_paths(k); }
KernelPathsScope::~KernelPathsScope() { set_kernel_paths(previous_); }

kernels::heuristics::Device rules_device(kernels::heuristics::Device hw) {
  hw.sm90_built = hopper_kernels_built();
  hw.portable = kernel_paths() == KernelPaths::portable;
  return hw;
}

}  // namespace dflash
