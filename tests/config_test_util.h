// The config tests' shared pieces: the smallest valid file, a parse from text, and the refusal check.
#pragma once
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "runtime/error.h"
#include "train/config.h"

namespace dflash::test::config {

// The smallest valid file: the required keys and one bucket.
inline const std::string kMinimal = R"(
[target]
path = "models/t"
[drafter]
mask_token_id = 5
[data]
train = "d/train.jsonl"
[[buckets]]
seq = 64
anchors = 4
batch = 2
)";

inline Config parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_config(text, "cfg/x.toml", overrides);
}

}  // namespace dflash::test::config

#define REFUSED(expr, text) CHECK_THROWS_WITH_AS(expr, doctest::Contains(std::string(text).c_str()), Error)
