// Memory: storage blocks, the raw device allocators, the deterministic best-fit offset planner
// behind every arena, and counters that tests use to prove replay allocates nothing.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "runtime/device.h"

namespace dflash {

// Every buffer is 64-byte aligned in every mode: vectorised reductions depend on alignment,
// and replay must equal eager bit for bit.
constexpr size_t kAlignment = 64;
inline size_t align_up(size_t n, size_t a = kAlignment) { return (n + a - 1) / a * a; }

// A block of memory on one device. When the last handle dies it goes back to whoever made it.
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  bool in_arena = false;
  std::function<void(Storage&)> release;
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (release) release(*this);
  }
};

// Allocations made by the runtime's allocators, by kind, since process start.
struct AllocCounters {
  uint64_t host = 0;    // host heap blocks (CPU tensors, staging buffers)
  uint64_t device = 0;  // device memory blocks (cudaMalloc / cudaMallocAsync)
  uint64_t arena = 0;   // blocks placed in an arena or a planning pass
  uint64_t total() const { return host + device + arena; }
};
AllocCounters alloc_counters();
void count_alloc_host();
void count_alloc_device();
void count_alloc_arena();

// Raw memory of a device, 64-byte aligned. CPU memory comes from the heap; CUDA memory from
// cudaMalloc. pinned = page-locked host memory (staging for a CUDA device).
void* raw_alloc(Device device, size_t bytes);
void raw_free(Device device, void* p);
void* raw_alloc_pinned(size_t bytes);
void raw_free_pinned(void* p);

// Deterministic best-fit placement of blocks at offsets in [0, inf). A freed block merges with
// free neighbours; the same sequence of requests always lands on the same offsets, which is what
// lets a planning pass size an arena that a later recording pass fills exactly.
class OffsetPlanner {
 public:
  size_t allocate(size_t bytes);  // returns the offset; bytes are rounded up to kAlignment
  void release(size_t offset, size_t bytes);
  size_t peak() const { return peak_; }
  size_t live_blocks() const { return live_; }
  size_t live_bytes() const { return live_bytes_; }
  void reset();

 private:
  std::map<size_t, size_t> free_;  // offset -> size, below top_
  size_t top_ = 0;
  size_t peak_ = 0;
  size_t live_ = 0;
  size_t live_bytes_ = 0;
};

}  // namespace dflash
