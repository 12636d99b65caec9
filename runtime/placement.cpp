// Offline placement of a program's arena blocks (greedy by size, best-fitting gap).
#include "runtime/placement.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace dflash {

Placement place_blocks(const std::vector<ArenaBlock>& blocks) {
  const size_t n = blocks.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (blocks[a].bytes != blocks[b].bytes) return blocks[a].bytes > blocks[b].bytes;
    return blocks[a].start < blocks[b].start;
  });
  Placement p;
  p.offsets.assign(n, 0);
  p.bytes.resize(n);
  for (size_t i = 0; i < n; ++i) p.bytes[i] = blocks[i].bytes;
  std::vector<size_t> placed;
  placed.reserve(n);
  std::vector<std::pair<size_t, size_t>> busy;  // [offset, offset + bytes) of placed blocks alive with this one
  for (size_t i : order) {
    const ArenaBlock& b = blocks[i];
    busy.clear();
    for (size_t j : placed)
      if (blocks[j].start < b.end && b.start < blocks[j].end) busy.emplace_back(p.offsets[j], p.offsets[j] + blocks[j].bytes);
    std::sort(busy.begin(), busy.end());
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (const auto& [lo, hi] : busy) {
      if (lo > cursor && lo - cursor >= b.bytes && lo - cursor < best_gap) {
        best_gap = lo - cursor;
        best = cursor;
      }
      cursor = std::max(cursor, hi);
    }
    p.offsets[i] = best != SIZE_MAX ? best : cursor;
    placed.push_back(i);
    p.arena_bytes = std::max(p.arena_bytes, p.offsets[i] + b.bytes);
  }
  return p;
}

}  // namespace dflash
