// Evaluation over every valid anchor of a data set (docs/MODEL.md, "Loss weights and the loss"): each
// sequence's anchors in passes of its bucket's N, the target run online, and every figure a ratio
// of sums over all blocks of the whole set, so the result does not depend on batching or buckets.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "data/data.h"
#include "train/replica.h"

namespace dflash {

struct EvalResult {
  double loss = 0, accuracy = 0, tau = 0;
  int64_t blocks = 0, tokens = 0, sequences = 0;
  int64_t skipped = 0;    // sequences not evaluated: too long under overflow "skip", or without a valid anchor
  int64_t no_anchor = 0;  // of those, the ones without a valid anchor
  nlohmann::json to_json() const;  // {"loss", "accuracy", "tau", "blocks", "tokens", ...}
};

// Runs replica's eval programs over `data` (sequences longer than the largest bucket follow
// `overflow`). progress(done, total) is called after each micro-batch.
EvalResult evaluate(Replica& replica, const Dataset& data, OverflowPolicy overflow,
                    const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace dflash
