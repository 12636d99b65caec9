// The memory check before startup: a lower bound of what a worker's persistent tensors take (the
// target's weights, the drafter's parameters, gradients and Adam moments, every bucket's static
// inputs and their host staging), computed from the config alone with checked arithmetic, so a
// bucket set that cannot fit (batch 1e7, or 2^62 whose byte count does not fit in 64 bits) is
// refused with the numbers before anything is allocated. The arena is checked later, once planned
// (graphs/engine.h).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graphs/buckets.h"
#include "model/drafter_spec.h"
#include "model/hf_config.h"

namespace dflash {

struct PersistentNeed {
  struct Part {
    std::string what;
    std::optional<uint64_t> bytes;  // nullopt: more than 2^64 - 1
  };
  std::vector<Part> parts;
  std::optional<uint64_t> total;  // nullopt: more than 2^64 - 1
};

struct WorkerShape {
  TargetSpec target;
  DrafterSpec drafter;
  std::vector<Bucket> buckets;
  bool cuda = false;    // bf16 target and compute copy; staging lives in host memory
  bool train = true;    // gradients are always kept; Adam moments only when training
  bool online = true;   // the target runs in the step (else hidden states are staged as f32)
};

PersistentNeed persistent_need(const WorkerShape& w);

// Refuses when the need exceeds `available` (bytes per worker), with every part, the total, the
// available bytes, `available_source` (where that figure comes from) and the fix.
void check_persistent_fit(const WorkerShape& w, uint64_t available, const std::string& device,
                          const std::string& available_source);

// `dflash-train generate`: the target's weights, the KV caches of `slots` slots of `capacity`
// positions, and the programs' static inputs and outputs (decode step and prefill chunk), from
// the dims alone.
struct GenerateShape {
  TargetSpec target;
  int64_t slots = 1, capacity = 1, prefill_chunk = 1;
  bool cuda = false;  // bf16 weights and caches
};
PersistentNeed generate_need(const GenerateShape& g);

// Refuses, before anything is allocated, when generate_need exceeds `available`: with every part,
// the total, the available bytes and their source, and the largest batch (slots) that fits.
void check_generate_fit(const GenerateShape& g, uint64_t available, const std::string& device,
                        const std::string& available_source);

}  // namespace dflash
