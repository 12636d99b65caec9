// The startup table's kernel lines: what kernels/heuristics.h chooses for the job's device and
// shapes, one line per op family (the drafter's attention forward, its backward per bucket, the
// lm_head + cross-entropy rows, the target's attention), after the device and its kernels (the
// Hopper kernels or the portable ones: the build and runtime.kernels).
#pragma once
#include <string>
#include <vector>

#include "graphs/buckets.h"
#include "kernels/heuristics.h"
#include "model/drafter_spec.h"
#include "runtime/device.h"

namespace dflash {

// The lines for a GPU `device` (compute capability, SMs, the build's Hopper kernels and
// runtime.kernels); `target_attention` is runtime.target_attention and `cudnn_built` whether the
// build has the cuDNN path.
std::vector<std::string> kernel_choice_lines(const kernels::heuristics::Device& device, const DrafterSpec& drafter,
                                             const std::vector<Bucket>& buckets, const std::string& target_attention,
                                             bool cudnn_built);

// The same for the job's first device as the launchers see it (runtime/kernel_paths.h's
// rules_device: this build and the process's runtime.kernels); none on the CPU (its kernels have
// no variants).
std::vector<std::string> kernel_choice_lines(const Device& device, const DrafterSpec& drafter,
                                             const std::vector<Bucket>& buckets, const std::string& target_attention);

}  // namespace dflash
