// The current CUDA device as kernels/heuristics.h sees it: compute capability and SM count, asked
// once per device and cached (a launch asks at every call), with whether this build holds the
// Hopper kernels and the process's runtime.kernels. A device that cannot be asked reads as 0.0 with
// no SMs, which chooses the portable kernels.
#pragma once
#include <atomic>

#include <cuda_runtime_api.h>

#include "kernels/heuristics.h"

namespace dflash::kernels::cuda {

// runtime.kernels = "portable" for the whole process (runtime/kernel_paths.h sets it from a job's
// config; tests and benchmarks through its scope): every launch then takes the portable kernels.
// Set it between steps, not while programs are being recorded.
inline std::atomic<bool>& portable_kernels() {
  static std::atomic<bool> portable{false};
  return portable;
}

inline heuristics::Device device_traits() {
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices];  // 0: not asked yet, else 1 + (major * 16 + minor) * 4096 + sms
  int dev = 0;
  const bool portable = portable_kernels().load(std::memory_order_relaxed);
  if (cudaGetDevice(&dev) != cudaSuccess) return {0, 0, 0, heuristics::kSm90KernelsBuilt, portable};
  auto ask = [dev] {
    int major = 0, minor = 0, sms = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0 || sms >= 4096)
      return 1;
    return 1 + (major * 16 + minor) * 4096 + sms;
  };
  int v = dev >= 0 && dev < kDevices ? known[dev].load(std::memory_order_relaxed) : 0;
  if (v == 0) {
    v = ask();
    if (dev >= 0 && dev < kDevices) known[dev].store(v, std::memory_order_relaxed);
  }
  const int cc = (v - 1) / 4096;
  return {cc / 16, cc % 16, (v - 1) % 4096, heuristics::kSm90KernelsBuilt, portable};
}

}  // namespace dflash::kernels::cuda
