// screen_dataset: one pass over the sequences for anchors and the mask token.
#include "data/screen.h"

#include <algorithm>

namespace dflash {

DataScreen screen_dataset(const Dataset& data, const std::vector<Bucket>& buckets, OverflowPolicy overflow,
                          int64_t block_size, int64_t mask_token_id) {
  DataScreen r;
  int64_t largest = 0;
  for (const Bucket& b : buckets) largest = std::max(largest, b.seq);
  r.no_anchor.assign(size_t(data.size()), 0);
  for (int64_t i = 0; i < data.size(); ++i) {
    const Sequence s = data.get(i);
    const int64_t count = int64_t(std::count(s.input_ids.begin(), s.input_ids.end(), int32_t(mask_token_id)));
    if (count > 0) {
      r.mask_token_count += count;
      ++r.mask_token_sequences;
      if (r.first_mask_sequence < 0) r.first_mask_sequence = i;
    }
    if (s.length() > largest && overflow != OverflowPolicy::truncate) continue;  // never staged
    const int64_t staged = std::min(s.length(), largest);
    bool anchor = false;
    for (int64_t p = 0; p <= staged - block_size && !anchor; ++p) anchor = s.loss_mask[size_t(p)] == 1;
    if (!anchor) {
      r.no_anchor[size_t(i)] = 1;
      ++r.no_anchor_count;
      if (staged < block_size) ++r.shorter_than_block;
    }
  }
  return r;
}

std::string no_anchor_summary(const DataScreen& screen, int64_t block_size) {
  return "without a valid anchor: " + std::to_string(screen.no_anchor_count) + " skipped (" +
         std::to_string(screen.shorter_than_block) + " shorter than the block size " + std::to_string(block_size) + ")";
}

std::optional<std::string> mask_token_warning(const DataScreen& screen, int64_t mask_token_id, const std::string& what) {
  if (screen.mask_token_count == 0) return std::nullopt;
  return "drafter.mask_token_id = " + std::to_string(mask_token_id) + " occurs " +
         std::to_string(screen.mask_token_count) + " time" + (screen.mask_token_count == 1 ? "" : "s") + " in " +
         std::to_string(screen.mask_token_sequences) + " sequence" + (screen.mask_token_sequences == 1 ? "" : "s") +
         " of the " + what + " (first in sequence " + std::to_string(screen.first_mask_sequence) +
         "): the drafter cannot tell the mask from that token; fix: choose an id the target's tokenizer never "
         "emits (an unused id of its vocabulary)";
}

}  // namespace dflash
