// Startup GEMM tuning on the GPU (runtime/cuda/gemm_tuner.h).
#include "runtime/cuda/gemm_tuner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "runtime/context.h"
#include "runtime/cuda/cuda_backend.h"

namespace dflash {

std::string GemmTuning::summary() const {
  char s[256];
  std::snprintf(s, sizeof s,
                "GEMM tuning: %zu shapes, %zu timed, %zu run by a cuBLASLt candidate (%.3f ms less per call of each, "
                "timed alone); %zu candidates refused (results unlike cuBLAS's); %zu saved choices this GPU cannot "
                "run, tuned again; %.2f s",
                shapes, timed, chosen, saved_ms, wrong, dropped, seconds);
  return s;
}

namespace {
size_t aligned(size_t bytes) { return (bytes + 255) & ~size_t(255); }
size_t a_bytes(const GemmKey& k) {
  return aligned(size_t((k.ta ? k.K - 1 : k.M - 1) * k.lda + (k.ta ? k.M : k.K)) * (k.ab_bf16 ? 2 : 4));
}
size_t b_bytes(const GemmKey& k) {
  return aligned(size_t((k.tb ? k.N - 1 : k.K - 1) * k.ldb + (k.tb ? k.K : k.N)) * (k.ab_bf16 ? 2 : 4));
}
size_t c_bytes(const GemmKey& k) { return aligned(size_t((k.M - 1) * k.ldc + k.N) * (k.c_bf16 ? 2 : 4)); }
kernels::cuda::GemmArgs args_of(const GemmKey& k, const void* A, const void* B, void* C) {
  return {k.M, k.N, k.K, A, k.lda, k.ta, B, k.ldb, k.tb, C, k.ldc, 1.0f, k.accumulate ? 1.0f : 0.0f, k.ab_bf16, k.c_bf16};
}
}  // namespace

kernels::cuda::GemmCandidates time_gemm(Context& ctx, const kernels::cuda::GemmArgs& g, int candidates, int reps,
                                        void* check) {
  void* stream = ctx.cuda_stream();
  return kernels::cuda::time_gemm_candidates(
      g, ctx.cublas(), ctx.cublas_workspace(), ctx.cublas_workspace_bytes(), stream, candidates, reps,
      [stream](const std::function<void()>& submit) { return cuda_backend::time_ms(stream, submit); }, check);
}

size_t gemm_scratch_bytes(const GemmKey& k) {
  return a_bytes(k) + b_bytes(k) + c_bytes(k) + kernels::cuda::gemm_check_bytes(args_of(k, nullptr, nullptr, nullptr));
}

kernels::cuda::GemmCandidates time_gemm_on_scratch(Context& ctx, const GemmKey& k, void* scratch, int candidates,
                                                   int reps) {
  char* A = static_cast<char*>(scratch);
  char* B = A + a_bytes(k);
  char* C = B + b_bytes(k);
  const size_t ab = k.ab_bf16 ? 2 : 4, cb = k.c_bf16 ? 2 : 4;
  kernels::cuda::fill_hashed(A, k.ab_bf16, int64_t(a_bytes(k) / ab), 1, ctx.cuda_stream());
  kernels::cuda::fill_hashed(B, k.ab_bf16, int64_t(b_bytes(k) / ab), 2, ctx.cuda_stream());
  kernels::cuda::fill_hashed(C, k.c_bf16, int64_t(c_bytes(k) / cb), 3, ctx.cuda_stream());
  return time_gemm(ctx, args_of(k, A, B, C), candidates, reps, C + c_bytes(k));
}

GemmTuning tune_gemms(Context& ctx, void* scratch, size_t scratch_bytes, int reps, double min_gain) {
  const auto t0 = std::chrono::steady_clock::now();
  GemmTuning r;
  r.shapes = ctx.planned_gemms().size();
  for (const GemmKey& k : ctx.planned_gemms()) {
    if (const GemmAlgoConfig* kept = ctx.gemm_table().find(k)) {
      if (is_cublas_default(*kept) || kernels::cuda::lt_config_runs(args_of(k, nullptr, nullptr, nullptr), kept->data()))
        continue;
      ctx.gemm_table().erase(k);
      ++r.dropped;
    }
    if (gemm_scratch_bytes(k) > scratch_bytes) continue;
    const kernels::cuda::GemmCandidates t = time_gemm_on_scratch(ctx, k, scratch, 16, reps);
    ++r.timed;
    const kernels::cuda::GemmCandidate* best = kernels::cuda::fastest_agreeing(t);
    for (const kernels::cuda::GemmCandidate& c : t.candidates) r.wrong += c.agrees ? 0 : 1;
    if (best && best->ms < (1.0 - min_gain) * t.default_ms) {
      GemmAlgoConfig cfg;
      std::copy(best->config_values, best->config_values + 9, cfg.begin());
      ctx.gemm_table().set(k, cfg);
      ++r.chosen;
      r.saved_ms += t.default_ms - best->ms;
    } else {
      ctx.gemm_table().set(k, kCublasDefault);  // decided: a resumed run keeps it without timing again
    }
  }
  ctx.synchronize();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace dflash
