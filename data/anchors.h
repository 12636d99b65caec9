// Anchors (docs/MODEL.md, "Anchors and blocks"): the positions whose draft blocks are trained,
// sampled per sequence with a seeded RNG, and the staging of a micro-batch into a program's static input arrays.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "data/data.h"
#include "graphs/buckets.h"

namespace dflash {

// N slots; the kept anchors come first, sorted ascending; unused slots are anchor 0, keep 0.
struct AnchorSet {
  std::vector<int32_t> anchors;
  std::vector<uint8_t> keep;
};

// Every p with p <= length - block_size and loss_mask[p] == 1, ascending. The length is the
// sequence's own, so padding into a bucket never adds anchors.
std::vector<int32_t> valid_anchor_positions(const Sequence& s, int64_t block_size);

// min(N, #valid) distinct valid positions, uniformly without replacement (partial Fisher-Yates
// over raw mt19937_64 output, so the result is the same with every standard library), sorted.
AnchorSet sample_anchors(const Sequence& s, int64_t N, int64_t block_size, std::mt19937_64& rng);

// Every valid anchor exactly once, in ascending order, in passes of N; the last pass is padded
// with keep 0. A sequence without valid anchors has no passes.
std::vector<AnchorSet> eval_anchor_passes(const Sequence& s, int64_t N, int64_t block_size);

// A program's static inputs for one micro-batch of bucket (S, N, B), all row-major i32.
struct BatchArrays {
  std::span<int32_t> input_ids;  // (B, S), padding id 0
  std::span<int32_t> loss_mask;  // (B, S), padding 0
  std::span<int32_t> anchors;    // (B, N), unused slots 0
  std::span<int32_t> keep;       // (B, N), unused slots 0
};

// Stages sequences (at most B; each truncated to S when longer, which the planner allows only
// under the truncate policy) with the given anchor sets, which must be valid for the truncated
// sequences. Rows past the sequences are all padding. Returns the real (unpadded) tokens.
int64_t fill_batch(std::span<const Sequence> sequences, std::span<const AnchorSet> anchors, const Bucket& bucket,
                   int64_t block_size, const BatchArrays& out);

// The same, sampling each truncated sequence's anchors from rng in order (training).
int64_t fill_batch(std::span<const Sequence> sequences, const Bucket& bucket, int64_t block_size, std::mt19937_64& rng,
                   const BatchArrays& out);

}  // namespace dflash
