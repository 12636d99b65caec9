// Startup GEMM tuning on the GPU: each GEMM shape noted while planning (Context::planned_gemms)
// is timed with cublasGemmEx's own algorithm and with cuBLASLt's deterministic candidates, on
// scratch operands; a candidate at least 2 % faster becomes the shape's entry in the context's
// GEMM table, used by every launch of that shape afterwards.
#pragma once
#include <cstddef>
#include <string>

namespace dflash {

class Context;

struct GemmTuning {
  size_t shapes = 0;   // noted while planning
  size_t timed = 0;    // whose operands fitted the scratch memory
  size_t chosen = 0;   // now run by a cuBLASLt candidate
  size_t dropped = 0;  // choices already in the table that this cuBLAS and GPU cannot run (tuned again)
  double saved_ms = 0;  // sum over shapes timed alone of (cuBLAS's ms - chosen ms); one call each
  double seconds = 0;   // the tuning's wall time
  std::string summary() const;
};

// scratch: device memory nothing else uses during the call (the arena, before recording).
// Shapes already in the table keep their choice when this cuBLAS and GPU can run it (a table
// saved elsewhere may hold one they cannot: it is dropped and the shape tuned again).
GemmTuning tune_gemms(Context& ctx, void* scratch, size_t scratch_bytes, int reps = 5);

}  // namespace dflash
