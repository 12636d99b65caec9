// Startup GEMM tuning on the GPU (runtime/cuda/gemm_tuner.h).
#include "runtime/cuda/gemm_tuner.h"

#include <chrono>
#include <cstdio>

#include "kernels/cuda/gemm_candidates.h"
#include "runtime/context.h"

namespace dflash {

std::string GemmTuning::summary() const {
  char s[256];
  std::snprintf(s, sizeof s,
                "GEMM tuning: %zu shapes, %zu timed, %zu run by a cuBLASLt candidate (%.3f ms less per call of each, "
                "timed alone); %zu saved choices this GPU cannot run, tuned again; %.2f s",
                shapes, timed, chosen, saved_ms, dropped, seconds);
  return s;
}

GemmTuning tune_gemms(Context& ctx, void* scratch, size_t scratch_bytes, int reps) {
  const auto t0 = std::chrono::steady_clock::now();
  GemmTuning r;
  r.shapes = ctx.planned_gemms().size();
  char* base = static_cast<char*>(scratch);
  auto aligned = [](size_t b) { return (b + 255) & ~size_t(255); };
  for (const GemmKey& k : ctx.planned_gemms()) {
    if (const GemmAlgoConfig* kept = ctx.gemm_table().find(k)) {
      const kernels::cuda::GemmArgs shape{k.M, k.N, k.K, nullptr, k.lda, k.ta, nullptr, k.ldb, k.tb, nullptr, k.ldc,
                                          1.0f, k.accumulate ? 1.0f : 0.0f, k.ab_bf16, k.c_bf16};
      if (kernels::cuda::lt_config_runs(shape, kept->data())) continue;
      ctx.gemm_table().erase(k);
      ++r.dropped;
    }
    const size_t ab = k.ab_bf16 ? 2 : 4, cb = k.c_bf16 ? 2 : 4;
    const size_t a_bytes = aligned(size_t((k.ta ? k.K - 1 : k.M - 1) * k.lda + (k.ta ? k.M : k.K)) * ab);
    const size_t b_bytes = aligned(size_t((k.tb ? k.N - 1 : k.K - 1) * k.ldb + (k.tb ? k.K : k.N)) * ab);
    const size_t c_bytes = aligned(size_t((k.M - 1) * k.ldc + k.N) * cb);
    if (a_bytes + b_bytes + c_bytes > scratch_bytes) continue;
    void *A = base, *B = base + a_bytes, *C = base + a_bytes + b_bytes;
    kernels::cuda::fill_hashed(A, k.ab_bf16, int64_t(a_bytes / ab), 1, ctx.cuda_stream());
    kernels::cuda::fill_hashed(B, k.ab_bf16, int64_t(b_bytes / ab), 2, ctx.cuda_stream());
    kernels::cuda::fill_hashed(C, k.c_bf16, int64_t(c_bytes / cb), 3, ctx.cuda_stream());
    const kernels::cuda::GemmArgs g{k.M, k.N, k.K, A, k.lda, k.ta, B, k.ldb, k.tb, C, k.ldc,
                                    1.0f, k.accumulate ? 1.0f : 0.0f, k.ab_bf16, k.c_bf16};
    const kernels::cuda::GemmCandidates t = kernels::cuda::time_gemm_candidates(
        g, ctx.cublas(), ctx.cublas_workspace(), ctx.cublas_workspace_bytes(), ctx.cuda_stream(), 16, reps);
    ++r.timed;
    const kernels::cuda::GemmCandidate* best = nullptr;
    for (const kernels::cuda::GemmCandidate& c : t.candidates)
      if (!best || c.ms < best->ms) best = &c;
    if (best && best->ms < 0.98 * t.default_ms) {
      GemmAlgoConfig cfg;
      for (int i = 0; i < 9; ++i) cfg[size_t(i)] = best->config_values[i];
      ctx.gemm_table().set(k, cfg);
      ++r.chosen;
      r.saved_ms += t.default_ms - best->ms;
    }
  }
  ctx.synchronize();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace dflash
