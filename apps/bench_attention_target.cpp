// dflash-bench causal-attention: the frozen target's causal attention forward (B=1, 32 query and
// 8 kv heads, head_dim 128, bf16) on dflash's own kernel and on cuDNN's fused flash attention,
// each captured alone in a CUDA graph and timed with events over its replays (median), with
// TFLOP/s counted as 2 * 2 * S(S+1)/2 * hd * nh and the largest difference between the outputs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/context.h"
#include "runtime/error.h"
#include "runtime/target_attention.h"
#include "runtime/tensor.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cudnn_attention.h"
#endif
#ifdef DFLASH_CUDNN
#include "kernels/cuda/cudnn_sdpa.h"
#endif

namespace dflash {

namespace {
constexpr int64_t kHeads = 32, kKvHeads = 8, kHeadDim = 128;

#ifdef DFLASH_CUDA
// A persistent bf16 tensor of N(0, 1) values: one random block of 2^22 values, tiled.
Tensor random_bf16(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> block(size_t(1) << 22);
  for (uint16_t& x : block) x = f32_to_bf16(normal(rng));
  std::vector<uint16_t> all(size_t(s.numel()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = block[(i * 7919 + i / block.size()) % block.size()];
  return Tensor::from_host(s, DType::bf16, all.data());
}

struct Timing {
  double median_ms = 0, min_ms = 0;
};

// `submit` captured alone into a CUDA graph, replayed `warmup` times, then timed `reps` times.
Timing time_graph(Context& ctx, const std::function<void()>& submit, int reps) {
  void* stream = ctx.cuda_stream();
  cuda_backend::begin_capture(stream);
  try {
    submit();
  } catch (...) {
    try {
      cuda_backend::graph_destroy(cuda_backend::end_capture_and_instantiate(stream));
    } catch (...) {
    }
    throw;
  }
  void* exec = cuda_backend::end_capture_and_instantiate(stream);
  for (int i = 0; i < 3; ++i) cuda_backend::graph_launch(exec, stream);
  cuda_backend::synchronize(stream);
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) ms.push_back(cuda_backend::time_ms(stream, [&] { cuda_backend::graph_launch(exec, stream); }));
  cuda_backend::graph_destroy(exec);
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_floats(), y = b.to_floats();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, double(std::fabs(x[i] - y[i])));
  return m;
}

#ifdef DFLASH_CUDNN
// Every plan cuDNN lists for the shape, built and timed alone like the default, its output
// compared with dflash's kernel's: whether another plan than cuDNN's default would pay.
void time_plans(Context& ctx, const kernels::cuda::CausalAttentionArgs& args, const Tensor& out_own,
                const Tensor& out, double flop, double default_ms, int reps) {
  std::string why;
  void* handle = kernels::cuda::cudnn_create(&why);
  DF_CHECK(handle, "causal-attention --plans: " << why);
  const kernels::cuda::CudnnSdpaDims d{args.B, args.S, args.nh, args.nkv, args.hd, args.scale};
  const auto plans = kernels::cuda::CudnnSdpa::list_plans(handle, d, &why);
  if (!why.empty()) std::printf("  (cuDNN: %s)\n", why.c_str());
  for (const auto& c : plans) {
    std::string why_not;
    auto sdpa = kernels::cuda::CudnnSdpa::build(handle, d, &why_not, c);
    if (!sdpa) {
      std::printf("  plan %s:%s does not build: %s\n", c.implementation.c_str(), c.engine.c_str(), why_not.c_str());
      continue;
    }
    void* ws = sdpa->workspace_bytes() ? cuda_backend::alloc(0, sdpa->workspace_bytes()) : nullptr;
    try {
      const Timing t = time_graph(
          ctx, [&] { sdpa->forward(handle, args.q, args.k, args.v, args.out, ws, ctx.cuda_stream()); }, reps);
      ctx.synchronize();
      const double diff = max_abs_diff(out_own, out);
      std::printf("  plan %-10s %-40s %10.3f ms %8.1f TFLOP/s  %6.3f of the default  max |diff| %.6g\n",
                  c.implementation.c_str(), c.engine.c_str(), t.median_ms, flop / (t.median_ms * 1e-3) / 1e12,
                  t.median_ms / default_ms, diff);
      std::printf("{\"bench\":\"causal_attention_plan\",\"seq\":%lld,\"implementation\":\"%s\",\"engine\":\"%s\","
                  "\"ms\":%.4f,\"min_ms\":%.4f,\"default_ms\":%.4f,\"max_abs_diff\":%.6g}\n",
                  (long long)args.S, c.implementation.c_str(), c.engine.c_str(), t.median_ms, t.min_ms, default_ms, diff);
    } catch (const std::exception& e) {
      std::printf("  plan %s:%s does not run: %s\n", c.implementation.c_str(), c.engine.c_str(), e.what());
    }
    std::fflush(stdout);
    cuda_backend::free(0, ws);
  }
  kernels::cuda::cudnn_destroy(handle);
}
#endif

int run(const std::vector<int64_t>& seqs, int reps, bool plans) {
  DF_CHECK(cuda_backend::device_count() > 0, "causal-attention: no CUDA device visible; run it on the GPU host");
  Context ctx(Device::cuda(0));
  ContextScope scope(ctx);
  const float scale = float(1.0 / std::sqrt(double(kHeadDim)));
  std::printf("target causal attention forward: B=1, heads %lld/%lld, head_dim %lld, bf16, scale hd^-0.5; "
              "median of %d graph replays (CUDA events); %s on %s\n",
              (long long)kHeads, (long long)kKvHeads, (long long)kHeadDim, reps, cudnn_attention::versions().c_str(),
              cuda_backend::device_name(0));
  std::printf("%8s %12s %12s %12s %12s %10s %14s %10s\n", "seq", "own ms", "own TFLOP/s", "cudnn ms", "cudnn TFLOP/s",
              "own/cudnn", "max |diff|", "max |out|");
  for (int64_t S : seqs) {
    const Tensor q = random_bf16({1, S, kHeads, kHeadDim}, uint64_t(S) * 3 + 1);
    const Tensor k = random_bf16({1, S, kKvHeads, kHeadDim}, uint64_t(S) * 3 + 2);
    const Tensor v = random_bf16({1, S, kKvHeads, kHeadDim}, uint64_t(S) * 3 + 3);
    const Tensor out_own = Tensor::persistent(q.shape(), DType::bf16, "out_own");
    const Tensor out_cudnn = Tensor::persistent(q.shape(), DType::bf16, "out_cudnn");
    auto args = [&](const Tensor& out) {
      return kernels::cuda::CausalAttentionArgs{q.raw(), k.raw(), v.raw(), out.raw(), true,
                                                1,       S,       kHeads,  kKvHeads,  kHeadDim, scale};
    };
    const double flop = 2.0 * 2.0 * double(S) * double(S + 1) / 2.0 * double(kHeadDim) * double(kHeads);
    const Timing own = time_graph(
        ctx, [&] { kernels::cuda::causal_attention_forward(args(out_own), ctx.cuda_stream()); }, reps);
    bool have_cudnn = false;
    if (cudnn_attention_built()) {
      TargetAttentionScope want(TargetAttention::cudnn);
      have_cudnn = cudnn_attention::use(ctx, args(out_cudnn));  // builds and warms the plan, outside capture
    }
    Timing cud;
    double max_diff = NAN, max_out = 0;
    if (have_cudnn) {
      cud = time_graph(ctx, [&] { cudnn_attention::forward(ctx, args(out_cudnn), ctx.cuda_stream()); }, reps);
      ctx.synchronize();
      max_diff = max_abs_diff(out_own, out_cudnn);
      for (float x : out_own.to_floats()) max_out = std::max(max_out, double(std::fabs(x)));
    }
    const double own_tf = flop / (own.median_ms * 1e-3) / 1e12;
    const double cud_tf = have_cudnn ? flop / (cud.median_ms * 1e-3) / 1e12 : NAN;
    std::printf("%8lld %12.3f %12.1f %12.3f %12.1f %10.3f %14.6g %10.4g\n", (long long)S, own.median_ms, own_tf,
                have_cudnn ? cud.median_ms : NAN, cud_tf, have_cudnn ? own.median_ms / cud.median_ms : NAN, max_diff,
                max_out);
    std::printf("{\"bench\":\"causal_attention\",\"seq\":%lld,\"heads\":%lld,\"kv_heads\":%lld,\"head_dim\":%lld,"
                "\"own_ms\":%.4f,\"own_min_ms\":%.4f,\"own_tflops\":%.2f,\"cudnn\":%s,\"cudnn_ms\":%.4f,"
                "\"cudnn_min_ms\":%.4f,\"cudnn_tflops\":%.2f,\"max_abs_diff\":%.6g,\"max_abs_out\":%.6g}\n",
                (long long)S, (long long)kHeads, (long long)kKvHeads, (long long)kHeadDim, own.median_ms, own.min_ms,
                own_tf, have_cudnn ? "true" : "false", have_cudnn ? cud.median_ms : -1.0,
                have_cudnn ? cud.min_ms : -1.0, have_cudnn ? cud_tf : -1.0, have_cudnn ? max_diff : -1.0, max_out);
    std::fflush(stdout);
#ifdef DFLASH_CUDNN
    if (plans && have_cudnn) time_plans(ctx, args(out_cudnn), out_own, out_cudnn, flop, cud.median_ms, reps);
#endif
  }
  return 0;
}
#endif
}  // namespace

// The value of --name=VALUE as a positive integer, or an error naming the option.
static int64_t positive(const std::string& option, const std::string& value) {
  const bool digits = !value.empty() && value.size() <= 12 && value.find_first_not_of("0123456789") == std::string::npos;
  DF_CHECK(digits && std::stoll(value) >= 1,
           "causal-attention: " << option << "=" << value << " must be a positive whole number");
  return std::stoll(value);
}

// dflash-bench causal-attention [--seq=N ...] [--reps=N] [--plans]; argv holds only these options.
int bench_causal_attention(int argc, char** argv) {
  std::vector<int64_t> seqs;
  int reps = 30;
  [[maybe_unused]] bool plans = false;  // read by the CUDA build only
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--seq=", 0) == 0) seqs.push_back(positive("--seq", a.substr(6)));
    else if (a.rfind("--reps=", 0) == 0) reps = int(std::min<int64_t>(positive("--reps", a.substr(7)), 100000));
    else if (a == "--plans") plans = true;
    else {
      std::fprintf(stderr, "dflash-bench causal-attention: unknown argument '%s'; use --seq=N (repeatable), "
                           "--reps=N and --plans\n", a.c_str());
      return 2;
    }
  }
  if (seqs.empty()) seqs = {4096, 16384, 32768};
  DF_CHECK(reps >= 20, "causal-attention: --reps=" << reps << "; use at least 20 (the median of >= 20 replays)");
#ifdef DFLASH_CUDA
  return run(seqs, reps, plans);
#else
  DF_FAIL("causal-attention: this build has no CUDA backend; build on a host where nvcc is found");
#endif
}

}  // namespace dflash
