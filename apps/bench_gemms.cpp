// dflash-bench gemms: for every distinct GEMM shape of a recorded drafter step (calls counted),
// cuBLAS's own algorithm against each of cuBLASLt's deterministic candidates, timed alone on
// scratch operands: what tuning the GEMMs at startup could save per step, before building it.
#include <algorithm>
#include <cstdio>

#include "apps/bench.h"
#include "runtime/context.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/gemm_tuner.h"
#endif

namespace dflash {

std::vector<std::pair<GemmShape, int64_t>> gemm_shapes_of(const ProfileLog& log, const std::string& program) {
  std::vector<std::pair<GemmShape, int64_t>> shapes;
  for (const ProfiledCall& c : log.calls()) {
    if (c.program != program || c.cost.gemm.M == 0) continue;
    auto it = std::find_if(shapes.begin(), shapes.end(), [&](const auto& s) { return s.first == c.cost.gemm; });
    if (it == shapes.end()) shapes.push_back({c.cost.gemm, 1});
    else ++it->second;
  }
  return shapes;
}

int time_gemm_shapes(Context& ctx, const std::vector<std::pair<GemmShape, int64_t>>& shapes, int reps, int candidates,
                     const std::string& title) {
#ifndef DFLASH_CUDA
  DF_FAIL("dflash-bench gemms: this build has no CUDA backend");
#else
  DF_CHECK(ctx.device().is_cuda(), "dflash-bench gemms times cuBLAS algorithms on the GPU: run it with --cuda");
  std::printf("%s\n", title.c_str());
  std::printf("%-34s %6s %10s %10s %10s %10s %10s  %s\n", "gemm (bf16 in)", "calls", "cublas ms", "again ms",
              "lt#0 ms", "best ms", "save ms", "best candidate");
  double total = 0, saved = 0;
  const int dev = ctx.device().index;
  for (const auto& [s, calls] : shapes) {
    const GemmKey key{s.M, s.N, s.K, s.ta ? s.M : s.K, s.tb ? s.K : s.N, s.N, s.ta, s.tb, true, s.c_bf16, false};
    void* scratch = cuda_backend::alloc(dev, gemm_scratch_bytes(key));
    const kernels::cuda::GemmCandidates t = time_gemm_on_scratch(ctx, key, scratch, candidates, reps);
    ctx.synchronize();
    cuda_backend::free(dev, scratch);
    const kernels::cuda::GemmCandidate* best = kernels::cuda::fastest_agreeing(t);
    const double best_ms = best ? std::min(best->ms, t.default_ms) : t.default_ms;
    const double save = double(calls) * (t.default_ms - best_ms);
    size_t refused = 0;
    for (const kernels::cuda::GemmCandidate& c : t.candidates) {
      if (c.agrees) continue;
      ++refused;
      std::printf("  refused (results unlike cuBLAS's, error %.3g): %s\n", c.error, c.config.c_str());
    }
    total += double(calls) * t.default_ms;
    saved += save;
    char name[64];
    std::snprintf(name, sizeof name, "M=%lld N=%lld K=%lld %c%c ->%s", (long long)s.M, (long long)s.N, (long long)s.K,
                  s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.c_bf16 ? "bf16" : "f32");
    std::printf("%-34s %6lld %10.4f %10.4f %10.4f %10.4f %10.4f  %s (%zu candidates, %zu refused)\n", name,
                (long long)calls, t.default_ms, t.default_after_ms, t.candidates.empty() ? 0.0 : t.candidates[0].ms, best_ms, save,
                best && best->ms < t.default_ms ? best->config.c_str() : "cublasGemmEx's own", t.candidates.size(),
                refused);
    std::printf("{\"gemm\":{\"shape\":\"%s\",\"calls\":%lld,\"cublas_ms\":%.6f,\"cublas_again_ms\":%.6f,\"lt0_ms\":%.6f,\"best_ms\":%.6f,"
                "\"candidates\":%zu,\"refused\":%zu,\"best\":\"%s\"}}\n",
                name, (long long)calls, t.default_ms, t.default_after_ms, t.candidates.empty() ? 0.0 : t.candidates[0].ms,
                best_ms, t.candidates.size(), refused, best ? best->config.c_str() : "");
  }
  std::printf("GEMMs alone: %.3f ms per step with cuBLAS's own algorithms; the best candidates would save %.3f ms "
              "(%.1f %%)\n",
              total, saved, total > 0 ? 100.0 * saved / total : 0.0);
  return 0;
#endif
}

}  // namespace dflash
