// Startup GEMM tuning on the GPU: each GEMM shape noted while planning (Context::planned_gemms)
// is timed with cublasGemmEx's own algorithm and with cuBLASLt's deterministic candidates that
// give cuBLAS's results, on scratch operands; a candidate at least 2 % faster becomes the shape's
// entry in the context's GEMM table, used by every launch of that shape afterwards, and otherwise
// the entry says cublasGemmEx (so a run that reuses the table times nothing).
#pragma once
#include <cstddef>
#include <string>

#include "kernels/cuda/gemm_candidates.h"
#include "runtime/gemm_tuning.h"

namespace dflash {

class Context;

struct GemmTuning {
  size_t shapes = 0;   // noted while planning
  size_t timed = 0;    // whose operands fitted the scratch memory
  size_t chosen = 0;   // now run by a cuBLASLt candidate
  size_t wrong = 0;    // candidates refused: their results differ from cuBLAS's own (never chosen)
  size_t dropped = 0;  // choices already in the table that this cuBLAS and GPU cannot run (tuned again)
  double saved_ms = 0;  // sum over shapes timed alone of (cuBLAS's ms - chosen ms); one call each
  double seconds = 0;   // the tuning's wall time
  std::string summary() const;
};

// g (valid device operands) timed on the context's stream, handle and workspace: cuBLAS's own
// algorithm and cuBLASLt's first `candidates` deterministic ones, `reps` launches each, each
// candidate checked against cuBLAS's result first; `check` holds kernels::cuda::gemm_check_bytes(g).
kernels::cuda::GemmCandidates time_gemm(Context& ctx, const kernels::cuda::GemmArgs& g, int candidates, int reps,
                                        void* check);
// The same for shape k on hashed operands laid out from `scratch`, which must hold
// gemm_scratch_bytes(k) bytes.
size_t gemm_scratch_bytes(const GemmKey& k);
kernels::cuda::GemmCandidates time_gemm_on_scratch(Context& ctx, const GemmKey& k, void* scratch, int candidates,
                                                   int reps);
// The fastest candidate that agrees with cuBLAS: kernels::cuda::fastest_agreeing (plain C++, tested
// on the CPU).

// scratch: device memory nothing else uses during the call (the arena, before recording).
// Shapes already in the table keep their choice when this cuBLAS and GPU can run it (a table
// saved elsewhere may hold one they cannot: it is dropped and the shape tuned again). A candidate
// is chosen only when it takes less than (1 - min_gain) of cuBLAS's time; min_gain 1 chooses none.
GemmTuning tune_gemms(Context& ctx, void* scratch, size_t scratch_bytes, int reps = 5, double min_gain = 0.02);

}  // namespace dflash
