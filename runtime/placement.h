// Offline placement of one program's temporaries in its arena: the planning pass logs every
// block's size and lifetime, and the blocks are then placed knowing all lifetimes at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dflash {

// A temporary of a planning pass: its size (a multiple of kAlignment) and its lifetime
// [start, end) counted in the pass's allocation and release events.
struct ArenaBlock {
  size_t bytes = 0;
  uint64_t start = 0, end = 0;
};

// Offsets of the blocks in allocation order; blocks alive at the same time never overlap.
// arena_bytes = the highest offset + bytes. peak_at: for reports, the op (phase) at which the
// most bytes were live (place_blocks leaves it empty; the planning pass fills it in).
struct Placement {
  std::vector<size_t> offsets, bytes;
  size_t arena_bytes = 0;
  std::string peak_at;
};

// Largest blocks first (ties: earlier first), each in the smallest gap that holds it among the
// blocks already placed whose lifetimes meet its own, else just above them. The online best fit
// of OffsetPlanner must place a block without knowing when the others die; this packs tighter
// where lifetimes interleave (a recomputed layer's temporaries). Deterministic.
Placement place_blocks(const std::vector<ArenaBlock>& blocks);

}  // namespace dflash
