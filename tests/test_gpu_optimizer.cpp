// The fused CUDA optimizer update and the cuBLAS GEMM against their CPU definitions. Optimizer:
// one step from the same state (p, g, m, v, step) on both, over more elements than one round of
// every grid-stride loop and not a multiple of the vector width, at the schedule's edges (first
// step, end of warmup, last step, past the end, constant lr) with clipping binding, not binding
// and off: masters and moments within 2 ulp of the CPU, the bf16 copy exactly the
// round-to-nearest-even of the CUDA master, grads zeroed, step + 1, stats = {norm, lr}; the
// unaligned (scalar) path equal to the vector path bit for bit. GEMM: M, N, K not multiples of any
// tile, every transpose pair, bf16 (and f32) inputs into f32 and bf16 outputs with beta = 1 over a
// filled C, against a double reference from the same rounded inputs (tight enough to catch TF32).
// The update over ranks (optimizer_slices.cu: per-slice sums, the norm in rank order, AdamW on a
// span) on one GPU, W slices of one buffer as the unsharded multi-GPU update runs them, against the
// CPU branch of that update kernel for kernel: the same bounds and edges.
// Suite "gpu-optimizer": it needs a GPU and fails without one.
#ifdef DFLASH_CUDA
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/optimizer_slices.h"
#include "graphs/program.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/optimizer_slices.h"
#include "runtime/cuda/gemm_tuner.h"
#include "tests/gpu_test_util.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {

struct OptState {
  std::vector<float> p, g, m, v;
  int32_t step = 0;
};

// Gradients are small integers times 2^-10 so that every partial sum of (g * 0.5)^2 is exact in
// f32 on the GPU and in double on the CPU: both see the same norm, hence the same clip factor.
// m has the sign of g and v is positive (no cancellation: the 2-ulp bound is about rounding, not
// about the order of operands), |p| is in [0.25, 1] (the update never cancels p).
OptState make_state(int64_t n, int32_t step, uint64_t seed) {
  std::mt19937_64 rng(seed);
  OptState s;
  s.step = step;
  for (int64_t i = 0; i < n; ++i) {
    const float sign = rng() % 2 ? 1.0f : -1.0f;
    const float u = float(rng() % 1000) / 1000.0f;
    s.g.push_back(sign * float(1 + rng() % 3) / 1024.0f);
    s.m.push_back(sign * (0.5f + u) * 1e-4f);
    s.v.push_back((0.5f + float(rng() % 1000) / 1000.0f) * 1e-7f);
    s.p.push_back((rng() % 2 ? 1.0f : -1.0f) * (0.25f + 0.75f * u));
  }
  return s;
}

// Over 3 rounds of the norm pass (1024 x 256 threads x 4 elements) and of the AdamW grid, not a
// multiple of 4; the hyperparameters of both update tests.
constexpr int64_t kUpdateElements = 3 * 1048576 + 12345;
const kernels::cpu::AdamW kAdamW{0.9f, 0.95f, 1e-8f, 0.01f};
constexpr float kPeakLr = 1e-3f, kMinLr = 1e-4f;

struct OptCase {
  const char* name;
  int32_t step;
  int64_t warmup, total;
  float max_norm, grad_scale;
};

// The CPU branch of AdamWOptimizer::update, kernel for kernel. Returns {norm, lr}.
std::array<float, 2> cpu_update(OptState& s, const OptCase& c, const kernels::cpu::AdamW& h, float peak, float min_lr) {
  const int64_t n = int64_t(s.p.size());
  float norm = 0, lr = 0;
  kernels::cpu::scale_inplace(s.g.data(), n, c.grad_scale);
  kernels::cpu::grad_norm(s.g.data(), n, &norm);
  kernels::cpu::clip_by_norm(s.g.data(), n, &norm, c.max_norm);
  kernels::cpu::lr_schedule(&s.step, kernels::cpu::LrSchedule{peak, min_lr, c.warmup, c.total}, &lr);
  kernels::cpu::adamw(s.p.data(), s.g.data(), s.m.data(), s.v.data(), n, &s.step, &lr, h);
  std::fill(s.g.begin(), s.g.end(), 0.0f);
  kernels::cpu::increment_step(&s.step);
  return {norm, lr};
}

struct GpuResult {
  std::vector<float> p, g, m, v;
  std::vector<uint16_t> bf;
  int32_t step;
  std::vector<float> stats;
};

// One kernels::cuda::optimizer_update with every buffer `offset` elements into its allocation.
GpuResult gpu_update(Context& ctx, const OptState& s, const OptCase& c, const kernels::cpu::AdamW& h, float peak,
                     float min_lr, int64_t offset, bool zero_grads = true) {
  const int64_t n = int64_t(s.p.size());
  auto f32_buffer = [&](const std::vector<float>& v) {
    std::vector<float> padded(size_t(offset), 0.0f);
    padded.insert(padded.end(), v.begin(), v.end());
    return Tensor::from_floats({int64_t(padded.size())}, padded);
  };
  Tensor p = f32_buffer(s.p), g = f32_buffer(s.g), m = f32_buffer(s.m), v = f32_buffer(s.v);
  Tensor bf = Tensor::zeros({n + offset}, DType::bf16), step = Tensor::from_ints({1}, {s.step});
  Tensor lr = Tensor::persistent({1}, DType::f32), norm = Tensor::persistent({1}, DType::f32);
  Tensor partials = Tensor::persistent({1024}, DType::f32), stats = Tensor::persistent({2}, DType::f32);
  auto at = [&](const Tensor& t) { return t.data<float>() + offset; };
  kernels::cuda::OptimizerArgs a{at(p), at(g), at(m), at(v), static_cast<uint16_t*>(bf.raw()) + offset, n,
                                 step.data<int32_t>(), lr.data<float>(), norm.data<float>(), partials.data<float>(),
                                 stats.data<float>(), c.grad_scale, c.max_norm, peak, min_lr, c.warmup, c.total,
                                 h.beta1, h.beta2, h.eps, h.weight_decay, zero_grads};
  kernels::cuda::optimizer_update(a, ctx.cuda_stream());
  ctx.synchronize();
  auto tail = [&](const Tensor& t) {
    std::vector<float> all = t.to_floats();
    return std::vector<float>(all.begin() + offset, all.end());
  };
  GpuResult r{tail(p), tail(g), tail(m), tail(v), {}, step.to_ints()[0], stats.to_floats()};
  std::vector<uint16_t> bits(size_t(n + offset));
  bf.copy_to_host(bits.data(), bits.size() * 2);
  r.bf.assign(bits.begin() + offset, bits.end());
  return r;
}

// Distance in units in the last place between two finite floats of the same sign.
int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if ((ia < 0) != (ib < 0)) return a == b ? 0 : INT64_MAX;
  return std::llabs(int64_t(ia) - int64_t(ib));
}
int64_t max_ulps(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, ulps(a[i], b[i]));
  return worst;
}

// Row-major C (M, N) = alpha op(A) op(B) + beta C0 in double, op(A) (M, K), op(B) (K, N).
std::vector<double> gemm_reference(int64_t M, int64_t N, int64_t K, const std::vector<float>& A, bool ta,
                                   const std::vector<float>& B, bool tb, const std::vector<float>& C0, double alpha,
                                   double beta) {
  std::vector<double> C(size_t(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += double(A[size_t(ta ? k * M + i : i * K + k)]) * double(B[size_t(tb ? j * K + k : k * N + j)]);
      C[size_t(i * N + j)] = alpha * acc + beta * double(C0[size_t(i * N + j)]);
    }
  return C;
}

}  // namespace

TEST_SUITE("gpu-optimizer") {
  TEST_CASE("fused optimizer update: CUDA equals the CPU kernels (2 ulp), schedule and clip edges") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    const int64_t n = kUpdateElements;
    const kernels::cpu::AdamW h = kAdamW;
    const float peak = kPeakLr, min_lr = kMinLr;
    const std::vector<OptCase> cases = {
        {"first step, clipping binds", 0, 10, 100, 0.5f, 0.5f},
        {"last warmup step, clipping does not bind", 9, 10, 100, 1e6f, 1.0f / 3.0f},
        {"end of warmup, clipping off", 10, 10, 100, 0.0f, 0.5f},
        {"last step, clipping binds", 99, 10, 100, 0.5f, 0.5f},
        {"past the last step", 150, 10, 100, 1e6f, 0.5f},
        {"constant lr, later step", 41, 0, 0, 0.5f, 0.5f},
    };
    for (const OptCase& c : cases) {
      INFO("case: " << c.name);
      const OptState start = make_state(n, c.step, uint64_t(c.step) + 7);
      OptState cpu = start;
      const std::array<float, 2> cpu_stats = cpu_update(cpu, c, h, peak, min_lr);
      const GpuResult gpu = gpu_update(ctx, start, c, h, peak, min_lr, 0);
      if (c.max_norm == 0.5f) REQUIRE(cpu_stats[0] > 0.5f);  // clipping binds
      if (c.max_norm == 1e6f) REQUIRE(cpu_stats[0] < 1e6f);   // it does not
      CHECK(gpu.stats[0] == doctest::Approx(cpu_stats[0]).epsilon(1e-6));
      if (c.grad_scale == 0.5f) CHECK(gpu.stats[0] == cpu_stats[0]);  // exact sums: the same norm
      CHECK(gpu.stats[1] == doctest::Approx(cpu_stats[1]).epsilon(1e-6));
      CHECK(gpu.step == start.step + 1);
      CHECK(max_ulps(gpu.m, cpu.m) <= 2);
      CHECK(max_ulps(gpu.v, cpu.v) <= 2);
      CHECK(max_ulps(gpu.p, cpu.p) <= 2);
      CHECK(gpu.g == std::vector<float>(size_t(n), 0.0f));
      bool bf_exact = true;
      for (size_t i = 0; i < gpu.p.size(); ++i) bf_exact = bf_exact && gpu.bf[i] == f32_to_bf16(gpu.p[i]);
      CHECK(bf_exact);
      // zero_grads = false (the next backward overwrites them): the same update, g left as it was,
      // on the packed and on the scalar path.
      if (c.step == 0)
        for (int64_t offset : {0, 1}) {
          const GpuResult kept = gpu_update(ctx, start, c, h, peak, min_lr, offset, false);
          CHECK(bitwise_equal(kept.g, start.g));
          if (offset == 0) CHECK(bitwise_equal(kept.p, gpu.p));
        }
      // The scalar path (every pointer one element off 16-byte alignment) computes the same elements.
      if (c.max_norm != 0.5f) {  // (its norm sums in another order; with clipping off or loose the update ignores it)
        const GpuResult scalar = gpu_update(ctx, start, c, h, peak, min_lr, 1);
        CHECK(bitwise_equal(scalar.p, gpu.p));
        CHECK(bitwise_equal(scalar.m, gpu.m));
        CHECK(bitwise_equal(scalar.v, gpu.v));
        CHECK(scalar.bf == gpu.bf);
        CHECK(scalar.g == gpu.g);
        CHECK(scalar.stats[0] == doctest::Approx(gpu.stats[0]).epsilon(1e-6));
      }
    }
  }

  TEST_CASE("the update over ranks' CUDA kernels (1 and 3 slices) equal its CPU branch (2 ulp), schedule and clip edges") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    const int64_t n = kUpdateElements;
    const kernels::cpu::AdamW h = kAdamW;
    const float peak = kPeakLr, min_lr = kMinLr;
    const std::vector<OptCase> cases = {
        {"first step, clipping binds", 0, 10, 100, 0.5f, 0.5f},
        {"end of warmup, clipping off", 10, 10, 100, 0.0f, 0.5f},
        {"last step, clipping does not bind", 99, 10, 100, 1e6f, 0.5f},
        {"constant lr, later step", 41, 0, 0, 0.5f, 0.5f},
    };
    for (const int W : {1, 3})
      for (const OptCase& c : cases) {
        INFO(W << " slices, case: " << c.name);
        // Slices as dist/optimizer_distributed.cpp cuts a store not laid out for W ranks.
        const int64_t s = ((n + W - 1) / W + 15) / 16 * 16;
        auto begin_of = [&](int q) { return std::min(n, int64_t(q) * s); };
        auto len_of = [&](int q) { return std::min(n, int64_t(q + 1) * s) - begin_of(q); };
        const OptState start = make_state(n, c.step, uint64_t(c.step) + 11);
        OptState cpu = start;
        std::vector<double> sums(static_cast<size_t>(W));
        float norm = 0, lr = 0;
        kernels::cpu::scale_inplace(cpu.g.data(), n, c.grad_scale);
        for (int q = 0; q < W; ++q) kernels::cpu::sum_squares(cpu.g.data() + begin_of(q), len_of(q), &sums[size_t(q)]);
        kernels::cpu::norm_from_slice_sums(sums.data(), W, &norm);
        kernels::cpu::clip_by_norm(cpu.g.data(), n, &norm, c.max_norm);
        kernels::cpu::lr_schedule(&cpu.step, kernels::cpu::LrSchedule{peak, min_lr, c.warmup, c.total}, &lr);
        kernels::cpu::adamw(cpu.p.data(), cpu.g.data(), cpu.m.data(), cpu.v.data(), n, &cpu.step, &lr, h);
        kernels::cpu::increment_step(&cpu.step);
        if (c.max_norm == 0.5f) REQUIRE(norm > 0.5f);  // clipping binds
        if (c.max_norm == 1e6f) REQUIRE(norm < 1e6f);  // it does not

        Tensor p = Tensor::from_floats({n}, start.p), g = Tensor::from_floats({n}, start.g);
        Tensor m = Tensor::from_floats({n}, start.m), v = Tensor::from_floats({n}, start.v);
        Tensor bf = Tensor::zeros({n}, DType::bf16), step = Tensor::from_ints({1}, {start.step});
        Tensor tlr = Tensor::persistent({1}, DType::f32), tnorm = Tensor::persistent({1}, DType::f32);
        Tensor partials = Tensor::persistent({1024}, DType::f32), stats = Tensor::persistent({2}, DType::f32);
        Tensor slice_sums = Tensor::persistent({8 * int64_t(W)}, DType::u8);
        double* ds = static_cast<double*>(slice_sums.raw());
        void* st = ctx.cuda_stream();
        for (int q = 0; q < W; ++q)
          kernels::cuda::scale_and_sum_squares(g.data<float>() + begin_of(q), len_of(q), c.grad_scale,
                                               partials.data<float>(), ds + q, st);
        kernels::cuda::norm_and_lr(ds, W, tnorm.data<float>(), step.data<int32_t>(), tlr.data<float>(), peak, min_lr,
                                   c.warmup, c.total, st);
        kernels::cuda::SliceAdamW a{p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), bf.raw(), n,
                                    step.data<int32_t>(), tlr.data<float>(), tnorm.data<float>(), c.max_norm,
                                    h.beta1, h.beta2, h.eps, h.weight_decay};
        kernels::cuda::adamw_slice(a, st);
        kernels::cuda::finish_update(step.data<int32_t>(), tnorm.data<float>(), tlr.data<float>(), stats.data<float>(), st);
        ctx.synchronize();
        const std::vector<float> gs = stats.to_floats(), gp = p.to_floats();
        CHECK(gs[0] == norm);  // exact sums (make_state): the same norm, hence the same clip factor
        CHECK(gs[1] == doctest::Approx(lr).epsilon(1e-6));
        CHECK(step.to_ints()[0] == start.step + 1);
        CHECK(max_ulps(m.to_floats(), cpu.m) <= 2);
        CHECK(max_ulps(v.to_floats(), cpu.v) <= 2);
        CHECK(max_ulps(gp, cpu.p) <= 2);
        std::vector<uint16_t> bits(static_cast<size_t>(n));
        bf.copy_to_host(bits.data(), bits.size() * 2);
        bool bf_exact = true;
        for (size_t i = 0; i < gp.size(); ++i) bf_exact = bf_exact && bits[i] == f32_to_bf16(gp[i]);
        CHECK(bf_exact);
      }
  }

  TEST_CASE("GEMM: cuBLAS equals a double reference, odd sizes, every transpose, f32 and bf16 outputs, beta 1; "
            "also planned for fewer SMs (DFLASH_GEMM_SM_COUNT_TARGET), through cublasGemmEx and cuBLASLt's addend") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    const int64_t M = 77, N = 131, K = 203;
    for (const char* sms : {"", "66"})
    for (bool ab_bf16 : {true, false})
      for (bool c_bf16 : {false, true})
        for (bool ta : {false, true})
          for (bool tb : {false, true}) {
            if (!ab_bf16 && c_bf16) continue;  // f32 inputs only into f32 (the runtime's pairs)
            INFO("A,B " << (ab_bf16 ? "bf16" : "f32") << " C " << (c_bf16 ? "bf16" : "f32") << " trans_a " << ta
                        << " trans_b " << tb << " SM count target '" << sms << "'");
            std::unique_ptr<ScopedEnv> target = *sms ? std::make_unique<ScopedEnv>("DFLASH_GEMM_SM_COUNT_TARGET", sms) : nullptr;
            const DType dab = ab_bf16 ? DType::bf16 : DType::f32, dc = c_bf16 ? DType::bf16 : DType::f32;
            const std::vector<float> A = round_to(dab, random_floats(size_t(M * K), 1)),
                                     B = round_to(dab, random_floats(size_t(K * N), 2)),
                                     C0 = round_to(dc, random_floats(size_t(M * N), 3, 4.0f));
            Tensor tA = make_float({M * K}, A, dab), tB = make_float({K * N}, B, dab), tC = make_float({M * N}, C0, dc);
            const float alpha = 1.0f, beta = 1.0f;
            kernels::cuda::GemmArgs g{M, N, K, tA.raw(), ta ? M : K, ta, tB.raw(), tb ? K : N, tb, tC.raw(), N,
                                      alpha, beta, ab_bf16, c_bf16};
            Tensor addend = make_float({M * N}, C0, dc);
            if (*sms && ab_bf16 && c_bf16) {  // the same sum with C0 as cuBLASLt's addend into a fresh C
              g.addend = addend.raw();
              kernels::cuda::fill(tC.raw(), c_bf16, M * N, 1e30f, ctx.cuda_stream());
            }
            kernels::cuda::gemm(g, ctx.cublas(), ctx.cuda_stream());
            const std::vector<float> got = tC.to_floats();
            const std::vector<double> want = gemm_reference(M, N, K, A, ta, B, tb, C0, alpha, beta);
            double max_ref = 0, worst = 0, worst_bf16 = 0;
            for (double x : want) max_ref = std::max(max_ref, std::fabs(x));
            for (size_t i = 0; i < want.size(); ++i) {
              const double err = std::fabs(double(got[i]) - want[i]);
              worst = std::max(worst, err / max_ref);
              // One bf16 rounding of the f32 result: half an ulp of 8 significant bits, plus the f32 slack.
              worst_bf16 = std::max(worst_bf16, err - std::ldexp(std::fabs(want[i]), -8));
            }
            INFO("max |C - ref| / max |ref| = " << worst);
            if (c_bf16) CHECK(worst_bf16 <= 1e-5 * max_ref);
            else CHECK(worst <= 1e-5);
          }
  }

  TEST_CASE("GEMM tuning: the candidates judged to agree with cuBLAS equal the double reference and the refused ones "
            "do not; a table's choice survives its text; tuning decides every shape once; a tuned program replays bit "
            "for bit like eager") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    const int64_t M = 96, N = 136, K = 264;  // 16-byte aligned rows, as the runtime's GEMMs have
    for (bool c_bf16 : {false, true})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          INFO("C " << std::string(c_bf16 ? "bf16" : "f32") << " trans_a " << ta << " trans_b " << tb);
          const DType dc = c_bf16 ? DType::bf16 : DType::f32;
          const std::vector<float> A = round_to(DType::bf16, random_floats(size_t(M * K), 4)),
                                   B = round_to(DType::bf16, random_floats(size_t(K * N), 5)),
                                   C0 = round_to(dc, random_floats(size_t(M * N), 6, 4.0f));
          Tensor tA = make_float({M * K}, A, DType::bf16), tB = make_float({K * N}, B, DType::bf16),
                 tC = make_float({M * N}, C0, dc);
          kernels::cuda::GemmArgs g{M, N, K, tA.raw(), ta ? M : K, ta, tB.raw(), tb ? K : N, tb, tC.raw(), N,
                                    1.0f, 1.0f, true, c_bf16};
          const Tensor check = Tensor::persistent({int64_t(kernels::cuda::gemm_check_bytes(g))}, DType::u8);
          const kernels::cuda::GemmCandidates cands = time_gemm(ctx, g, 16, 1, check.raw());
          // C as it was before the timing (beta 1 reads it): the candidates' check restored it.
          CHECK(bitwise_equal(tC.to_floats(), C0));
          REQUIRE(!cands.candidates.empty());
          const std::vector<double> want = gemm_reference(M, N, K, A, ta, B, tb, C0, 1.0, 1.0);
          double max_ref = 0;
          for (double x : want) max_ref = std::max(max_ref, std::fabs(x));
          std::vector<float> first;
          size_t refused = 0;
          for (const kernels::cuda::GemmCandidate& c : cands.candidates) {
            INFO("candidate " << c.config);
            Tensor fresh = make_float({M * N}, C0, dc);
            kernels::cuda::GemmArgs h = g;
            h.C = fresh.raw();
            h.lt_config = c.config_values;
            h.workspace = ctx.cublas_workspace();
            h.workspace_bytes = ctx.cublas_workspace_bytes();
            kernels::cuda::gemm(h, ctx.cublas(), ctx.cuda_stream());
            const std::vector<float> got = fresh.to_floats();
            double worst = 0;
            // A bf16 C may be rounded twice (the product, then the sum with beta C, as a separate
            // bf16 add would): half a bf16 step of each.
            for (size_t i = 0; i < want.size(); ++i) {
              const double err = std::fabs(double(got[i]) - want[i]);
              const double twice = std::ldexp(std::fabs(want[i]), -8) + std::ldexp(std::fabs(want[i] - C0[i]), -8);
              worst = std::max(worst, c_bf16 ? err - twice : err);
            }
            // The tuner's verdict (against cuBLAS's own result) is the double reference's.
            if (c.agrees) CHECK(worst <= kernels::cuda::kMaxCandidateError * max_ref);
            else CHECK(worst > kernels::cuda::kMaxCandidateError * max_ref);
            CHECK(c.agrees == (c.ms > 0));  // only agreeing candidates are timed
            refused += c.agrees ? 0 : 1;
            if (first.empty()) first = got;
          }
          MESSAGE(refused << " of " << cands.candidates.size() << " candidates refused");
          // The first candidate's configuration through the table's text form runs the same algorithm.
          GemmTable table;
          const GemmKey key{M, N, K, ta ? M : K, tb ? K : N, N, ta, tb, true, c_bf16, true};
          GemmAlgoConfig cfg;
          std::copy(cands.candidates[0].config_values, cands.candidates[0].config_values + 9, cfg.begin());
          table.set(key, cfg);
          const GemmTable back = GemmTable::parse(table.to_text(), "test");
          REQUIRE(back.find(key));
          Tensor again = make_float({M * N}, C0, dc);
          kernels::cuda::GemmArgs h = g;
          h.C = again.raw();
          h.lt_config = back.find(key)->data();
          h.workspace = ctx.cublas_workspace();
          h.workspace_bytes = ctx.cublas_workspace_bytes();
          kernels::cuda::gemm(h, ctx.cublas(), ctx.cuda_stream());
          CHECK(bitwise_equal(again.to_floats(), first));
        }

    // A program of linears with tuning on: planning notes its shapes, tune_gemms times them, and
    // with a forced non-default choice the recording replays bit for bit like eager.
    ctx.set_gemm_tuning(true);
    const Tensor x = make_float({160, 256}, random_floats(160 * 256, 7), DType::bf16),
                 w = make_float({192, 256}, random_floats(192 * 256, 8, 0.1f), DType::bf16);
    const Tensor out = Tensor::persistent({160, 192}, DType::bf16);
    auto body = [&] { ops::copy_(out, ops::linear(x, w)); };
    ctx.reserve_arena(std::max(ctx.arena_bytes(), plan_program(ctx, "tuned", body).arena_bytes));
    const GemmKey key{160, 192, 256, 256, 256, 192, false, true, true, true, false};
    REQUIRE(std::find(ctx.planned_gemms().begin(), ctx.planned_gemms().end(), key) != ctx.planned_gemms().end());
    const Tensor scratch = Tensor::persistent({int64_t(8) << 20}, DType::u8);
    // A saved choice this cuBLAS cannot run (no such algorithm id) is dropped and the shape tuned again.
    ctx.gemm_table().set(key, GemmAlgoConfig{999999, 0, 0, 1, 0, 0, 0, 0, 0});
    const GemmTuning tuning = tune_gemms(ctx, scratch.raw(), size_t(8) << 20, 2);
    CHECK(tuning.shapes == ctx.planned_gemms().size());
    CHECK(tuning.timed == tuning.shapes);
    CHECK(tuning.dropped == 1);
    // Every shape is decided (a cuBLASLt candidate or cuBLAS's own), so tuning again times nothing.
    for (const GemmKey& k : ctx.planned_gemms()) CHECK(ctx.gemm_table().find(k) != nullptr);
    REQUIRE(ctx.gemm_table().find(key));
    CHECK((*ctx.gemm_table().find(key))[0] != 999999);
    const GemmTuning again = tune_gemms(ctx, scratch.raw(), size_t(8) << 20, 2);
    CHECK(again.timed == 0);
    CHECK(again.dropped == 0);
    // With no candidate fast enough (min_gain 1), every shape is still decided: cuBLAS's own
    // algorithm is recorded, and tuning again times nothing.
    for (const GemmKey& k : ctx.planned_gemms()) ctx.gemm_table().erase(k);
    const GemmTuning none = tune_gemms(ctx, scratch.raw(), size_t(8) << 20, 2, 1.0);
    CHECK(none.timed == none.shapes);
    CHECK(none.chosen == 0);
    for (const GemmKey& k : ctx.planned_gemms()) {
      REQUIRE(ctx.gemm_table().find(k));
      CHECK(is_cublas_default(*ctx.gemm_table().find(k)));
    }
    CHECK(tune_gemms(ctx, scratch.raw(), size_t(8) << 20, 2).timed == 0);
    kernels::cuda::GemmArgs probe{160, 192, 256, x.raw(), 256, false, w.raw(), 256, true, out.raw(), 192, 1.0f, 0.0f,
                                  true, true};
    const Tensor check = Tensor::persistent({int64_t(kernels::cuda::gemm_check_bytes(probe))}, DType::u8);
    const kernels::cuda::GemmCandidates cands = time_gemm(ctx, probe, 16, 1, check.raw());
    const kernels::cuda::GemmCandidate* last_agreeing = nullptr;
    for (const kernels::cuda::GemmCandidate& c : cands.candidates)
      if (c.agrees) last_agreeing = &c;
    REQUIRE(last_agreeing);
    GemmAlgoConfig last;
    std::copy(last_agreeing->config_values, last_agreeing->config_values + 9, last.begin());
    ctx.gemm_table().set(key, last);
    body();
    ctx.synchronize();
    const std::vector<float> eager = out.to_floats();
    Program p = record_program(ctx, "tuned", body);
    ops::fill_(out, NAN);
    p.replay();
    ctx.synchronize();
    CHECK(bitwise_equal(out.to_floats(), eager));
    const std::vector<float> xv = x.to_floats(), wv = w.to_floats();
    double worst = 0;
    for (int64_t i = 0; i < 160; ++i)
      for (int64_t j = 0; j < 192; ++j) {
        double r = 0;
        for (int64_t k = 0; k < 256; ++k) r += double(xv[size_t(i * 256 + k)]) * wv[size_t(j * 256 + k)];
        worst = std::max(worst, std::fabs(double(eager[size_t(i * 192 + j)]) - r) - std::ldexp(std::fabs(r), -8));
      }
    CHECK(worst <= 1e-3);
  }
}

// No GPU needed: the knob's values, read as each GEMM is launched.
TEST_SUITE("gemm-sm-target") {
  TEST_CASE("DFLASH_GEMM_SM_COUNT_TARGET: unset or 0 plans for every SM; a count is taken; anything else refused by name") {
    CHECK(kernels::cuda::gemm_sm_count_target() == 0);
    {
      ScopedEnv none("DFLASH_GEMM_SM_COUNT_TARGET", "0");
      CHECK(kernels::cuda::gemm_sm_count_target() == 0);
    }
    {
      ScopedEnv some("DFLASH_GEMM_SM_COUNT_TARGET", "124");
      CHECK(kernels::cuda::gemm_sm_count_target() == 124);
    }
    for (const char* bad : {"-1", "lots", "66 SMs", "2000"}) {
      INFO(bad);
      ScopedEnv env("DFLASH_GEMM_SM_COUNT_TARGET", bad);
      const std::string want = std::string("DFLASH_GEMM_SM_COUNT_TARGET=") + bad + ": give the number of SMs";
      CHECK_THROWS_WITH_AS(kernels::cuda::gemm_sm_count_target(), doctest::Contains(want.c_str()), std::runtime_error);
    }
  }
}

#endif  // DFLASH_CUDA
