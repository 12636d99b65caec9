// What the drafter benchmarks share: the models of ../shared/BENCH.md, random fills and anchors.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "graphs/buckets.h"
#include "model/drafter_spec.h"
#include "runtime/tensor.h"

namespace dflash {

DrafterSpec bench_spec(const std::string& model);  // "small" or "qwen3-8b"
// N(0, std^2) values, tiling one random block (fast for 10^9 elements; never zeros).
void fill_random(const Tensor& t, uint64_t seed, float std);
// Sorted distinct anchors for every sequence of the batch (all kept), seeded.
std::vector<int32_t> random_anchors(const Bucket& b, int64_t bs, uint64_t seed);

}  // namespace dflash
