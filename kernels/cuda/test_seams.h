// Test-only seams of the CUDA kernels: what a test sets to reach a kept variant at a shape whose
// rules (kernels/heuristics.h) choose another, or to make a failure happen on purpose. Production
// code never writes them; by default nothing is forced. Process-wide: set them between launches,
// not while another thread launches.
#pragma once
#include <cstddef>
#include <optional>

#include "kernels/heuristics.h"

namespace dflash::kernels::cuda {

struct TestSeams {
  heuristics::AttentionForcing attention;  // the DFlash attention's kernels, modes and loads
  double dq_wait_s = 0;   // > 0: the fused dq's wait for a turn before the kernel stops with an error
  bool dq_stall = false;  // every fused dq turn waits for one that never comes (the wait's test)
  std::optional<size_t> ce_slice_bytes;  // the lm_head + CE rows' slice budget (0: never read once)
};

inline TestSeams& test_seams() {
  static TestSeams seams;
  return seams;
}

// Restores the seams as they were at construction when the scope ends.
class TestSeamsScope {
 public:
  TestSeamsScope() : saved_(test_seams()) {}
  ~TestSeamsScope() { test_seams() = saved_; }
  TestSeamsScope(const TestSeamsScope&) = delete;
  TestSeamsScope& operator=(const TestSeamsScope&) = delete;

 private:
  TestSeams saved_;
};

}  // namespace dflash::kernels::cuda
