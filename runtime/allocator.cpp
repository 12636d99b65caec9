// Raw allocation, counters and the best-fit offset planner.
#include "runtime/allocator.h"

#include <cstdlib>

#include "runtime/error.h"

namespace dflash {

namespace {
std::atomic<uint64_t> g_host{0}, g_device{0}, g_arena{0};
}

AllocCounters alloc_counters() { return {g_host.load(), g_device.load(), g_arena.load()}; }
void count_alloc_host() { g_host.fetch_add(1, std::memory_order_relaxed); }
void count_alloc_device() { g_device.fetch_add(1, std::memory_order_relaxed); }
void count_alloc_arena() { g_arena.fetch_add(1, std::memory_order_relaxed); }

#ifndef DFLASH_CUDA
void* raw_alloc_pinned(size_t bytes) { return raw_alloc(Device::cpu(), bytes); }
void raw_free_pinned(void* p) { raw_free(Device::cpu(), p); }
#endif

void* raw_alloc(Device device, size_t bytes) {
  if (device.is_cpu()) {
    count_alloc_host();
    void* p = std::aligned_alloc(kAlignment, align_up(bytes ? bytes : 1));
    DF_CHECK(p, "host allocation of " << bytes << " bytes failed: the machine is out of memory; "
                                      << "use smaller buckets or fewer workers");
    return p;
  }
#ifdef DFLASH_CUDA
  extern void* cuda_raw_alloc(int index, size_t bytes);
  count_alloc_device();
  return cuda_raw_alloc(device.index, bytes);
#else
  DF_FAIL("allocation on " << device.str() << ": this build has no CUDA backend; rebuild where nvcc is found");
#endif
}

void raw_free(Device device, void* p) {
  if (!p) return;
  if (device.is_cpu()) {
    std::free(p);
    return;
  }
#ifdef DFLASH_CUDA
  extern void cuda_raw_free(int index, void* p);
  cuda_raw_free(device.index, p);
#endif
}

size_t OffsetPlanner::allocate(size_t bytes) {
  bytes = align_up(bytes ? bytes : 1);
  count_alloc_arena();
  // Best fit: the smallest free block that holds the request; the lowest offset among equals.
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->second >= bytes && (best == free_.end() || it->second < best->second)) best = it;
  size_t offset;
  if (best != free_.end()) {
    offset = best->first;
    size_t rest = best->second - bytes;
    free_.erase(best);
    if (rest) free_[offset + bytes] = rest;
  } else if (!free_.empty() && std::prev(free_.end())->first + std::prev(free_.end())->second == top_) {
    // The last free block touches the top: grow it rather than leave a hole.
    auto last = std::prev(free_.end());
    offset = last->first;
    free_.erase(last);
    top_ = offset + bytes;
  } else {
    offset = top_;
    top_ += bytes;
  }
  if (top_ > peak_) peak_ = top_;
  ++live_;
  live_bytes_ += bytes;
  return offset;
}

void OffsetPlanner::release(size_t offset, size_t bytes) {
  bytes = align_up(bytes ? bytes : 1);
  --live_;
  live_bytes_ -= bytes;
  auto [it, inserted] = free_.emplace(offset, bytes);
  DF_CHECK(inserted, "OffsetPlanner: block at " << offset << " freed twice (a runtime bug)");
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
      it = prev;
    }
  }
  if (it->first + it->second == top_) {
    top_ = it->first;
    free_.erase(it);
  }
}

void OffsetPlanner::reset() {
  free_.clear();
  top_ = peak_ = live_ = live_bytes_ = 0;
}

}  // namespace dflash
