// Helpers shared by the data test files: literal and seeded random sequences.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "data/data.h"

namespace dflash::test {

inline Sequence seq(std::vector<int32_t> ids, std::vector<uint8_t> mask) { return {std::move(ids), std::move(mask)}; }

// n sequences of lengths in [min_len, max_len], ids below vocab, about two thirds of the mask 1.
inline std::vector<Sequence> random_sequences(size_t n, uint64_t seed, int64_t vocab, int64_t min_len, int64_t max_len) {
  std::mt19937_64 rng(seed);
  std::vector<Sequence> out(n);
  for (Sequence& s : out) {
    int64_t len = min_len + int64_t(rng() % uint64_t(max_len - min_len + 1));
    for (int64_t i = 0; i < len; ++i) {
      s.input_ids.push_back(int32_t(rng() % uint64_t(vocab)));
      s.loss_mask.push_back(uint8_t(rng() % 3 != 0));
    }
  }
  return out;
}

}  // namespace dflash::test
