// Screening a data set at load, before startup: the sequences that cannot train anything (no valid
// anchor once staged into their bucket: docs/MODEL.md, "Anchors and blocks") and how often
// drafter.mask_token_id occurs in the data (the drafter then cannot tell the mask from that token).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/data.h"
#include "graphs/buckets.h"

namespace dflash {

struct DataScreen {
  std::vector<uint8_t> no_anchor;  // per sequence: 1 when it has no valid anchor as staged
  int64_t no_anchor_count = 0;     // sequences without a valid anchor (too-long ones under "skip" excluded)
  int64_t shorter_than_block = 0;  // of those, the ones shorter than the block size
  int64_t mask_token_count = 0;    // occurrences of the mask token id in input_ids
  int64_t mask_token_sequences = 0;
  int64_t first_mask_sequence = -1;
};

// A sequence is staged whole into the smallest bucket that holds it; one longer than the largest
// bucket is cut to it under OverflowPolicy::truncate and not staged at all otherwise (such a
// sequence is never counted as without anchor). Reads every sequence once.
DataScreen screen_dataset(const Dataset& data, const std::vector<Bucket>& buckets, OverflowPolicy overflow,
                          int64_t block_size, int64_t mask_token_id);

// "without a valid anchor: N skipped (M shorter than the block size B)", for summary lines.
std::string no_anchor_summary(const DataScreen& screen, int64_t block_size);

// The warning when the mask token occurs in the data (nullopt when it does not); `what` names the
// data ("training data 'path'").
std::optional<std::string> mask_token_warning(const DataScreen& screen, int64_t mask_token_id, const std::string& what);

}  // namespace dflash
