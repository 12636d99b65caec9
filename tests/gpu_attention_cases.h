// Test cases of the DFlash attention GPU suites (tests/test_gpu_attention*.cpp): a problem's
// geometry, anchors and kept blocks, the host data both backends start from, anchor layouts.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace dflash::test {

struct Case {
  int64_t B, S, N, bs, nh, nkv, hd, key_tile;
  std::vector<int32_t> anchors, keep;  // [B, N]
  int64_t T() const { return N * bs; }
  int64_t keys() const { return S + T(); }
  float scale() const { return float(1.0 / std::sqrt(double(hd))); }
  Shape q_shape() const { return {B, T(), nh, hd}; }
  Shape kv_shape() const { return {B, keys(), nkv, hd}; }
  // The dims a failing check names (INFO(c.describe())).
  std::string describe() const {
    return "B " + std::to_string(B) + ", S " + std::to_string(S) + ", N " + std::to_string(N) + ", bs " +
           std::to_string(bs) + ", nh " + std::to_string(nh) + ", nkv " + std::to_string(nkv) + ", hd " +
           std::to_string(hd);
  }
};

// What the mask of docs/MODEL.md ("The attention mask") gives: per kept block, its context tiles
// before the anchor (clamped to [0, S]) plus its own tile.
inline int32_t expected_tiles(const Case& c) {
  int64_t n = 0;
  for (size_t i = 0; i < c.keep.size(); ++i) {
    if (c.keep[i] == 0) continue;
    const int64_t a = std::clamp<int64_t>(c.anchors[i], 0, c.S);
    n += (a + c.key_tile - 1) / c.key_tile + 1;
  }
  return int32_t(n);
}

// Host values both backends start from: inputs, the output gradient, gradient prefills (small,
// non-zero: the backward must accumulate).
struct Data {
  std::vector<float> q, k, v, dout, gq, gk, gv;
};
inline Data make_data(const Case& c, uint64_t seed) {
  const size_t nq = size_t(c.q_shape().numel()), nkv = size_t(c.kv_shape().numel());
  return {random_floats(nq, seed),           random_floats(nkv, seed + 1),        random_floats(nkv, seed + 2),
          random_floats(nq, seed + 3),       random_floats(nq, seed + 4, 0.05f), random_floats(nkv, seed + 5, 0.05f),
          random_floats(nkv, seed + 6, 0.05f)};
}

inline bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

// N anchors per sequence spread over [0, S - bs], sorted, first at 0 and last at S - bs.
inline std::vector<int32_t> spread_anchors(int64_t B, int64_t N, int64_t S, int64_t bs) {
  std::vector<int32_t> a;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < N; ++i) a.push_back(int32_t(N > 1 ? i * (S - bs) / (N - 1) : 0));
  return a;
}

// N anchors per sequence drawn in random order from [0, S - bs] (fixed seed), with a repeat, an
// anchor at 0 and one at S (clamped: it sees every context key) placed at random slots.
inline std::vector<int32_t> shuffled_anchors(int64_t B, int64_t N, int64_t S, int64_t bs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> a;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < N; ++i) a.push_back(int32_t(rng() % uint32_t(S - bs + 1)));
  for (int64_t b = 0; b < B && N >= 3; ++b) {
    int32_t* row = a.data() + b * N;
    row[rng() % N] = 0;
    row[rng() % N] = int32_t(S);
    row[N - 1] = row[0];
  }
  return a;
}

}  // namespace dflash::test
