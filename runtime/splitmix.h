// splitmix64: the counter-based 64-bit mixer behind the project's seeded streams (data shuffles,
// generated weights): the same input always gives the same output, on every platform.
#pragma once
#include <cstdint>

namespace dflash {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace dflash
