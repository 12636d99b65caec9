// linear_cross_entropy's training rows on CUDA read once (ce_rows_slice_kernel: a cluster of C CTAs
// keeps each row in shared memory) at every cluster size the slice budget picks, 1 to 8 (small
// budgets through the test seam), against the CPU, against the kernel that reads the rows twice,
// bit for bit run to run, and on exact ties and bad labels across the CTAs of a cluster; NaN logits
// on every row kernel against the CPU's scan. Suite "gpu-ops" (needs a GPU and fails without one);
// the cluster size's rule: tests/test_heuristics.cpp.
#ifdef DFLASH_CUDA
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/test_seams.h"
#include "tests/gpu_op_harness.h"

using namespace dflash;
using namespace dflash::test;
using namespace dflash::test::gpu_ops;

namespace {
void* aligned_address(uintptr_t a) { return reinterpret_cast<void*>(a); }

// The rows' slice budget for a scope (nullptr: the rule's); the previous seams come back at its end.
class Budget {
 public:
  explicit Budget(const char* bytes) {
    if (bytes) kernels::cuda::test_seams().ce_slice_bytes = size_t(std::stoull(bytes));
    else kernels::cuda::test_seams().ce_slice_bytes.reset();
  }

 private:
  kernels::cuda::TestSeamsScope saved_;
};
}  // namespace

TEST_SUITE("gpu-ops") {
  TEST_CASE(
      "ce rows read once by clusters of 1 to 8 CTAs: the CPU's values, the twice-reading kernel's, the same bits") {
    REQUIRE_GPU();
    REQUIRE_HOPPER();
    Backends be;
    struct Case {
      int64_t V;
      const char* budget;  // nullptr: the default
      int clusters;
    };
    const int64_t R = 37, H = 16, chunk = 8;  // the last chunk partial
    for (Case c : {Case{320, "640", 1}, Case{320, "320", 2}, Case{120, "80", 3}, Case{320, "160", 4},
                   Case{200, "80", 5}, Case{320, "80", 8}, Case{151936, "98304", 4}, Case{151936, nullptr, 8}}) {
      INFO("V " << c.V << ", budget " << std::string(c.budget ? c.budget : "default") << ", " << c.clusters
                << " CTAs a row");
      auto [labels, w] = ce_batch(R, c.V, 7);
      const std::vector<In> in{rnd(Role::trainable, {R, H}, 1), rnd(Role::frozen, {c.V, H}, 2, 0.5f),
                               ints({R}, labels), f32c({R}, w)};
      Result twice;
      {
        Budget off("0");
        twice = run(be.gpu, DType::bf16, in, ce_fn(chunk));
      }
      const Budget budget(c.budget);
      REQUIRE(kernels::cuda::ce_rows_cluster(aligned_address(4096), aligned_address(8192), true, c.V) == c.clusters);
      const Result once = run(be.gpu, DType::bf16, in, ce_fn(chunk));
      // Against the CPU: loss, ce and dh within bf16's tolerance; argmax within the rounding of the
      // bf16 logits (check_bf16_argmax).
      const Result cpu = run(be.cpu, DType::bf16, in, ce_fn(chunk));
      for (int k : {0, 1}) CHECK(rel_err(once.outs[size_t(k)], cpu.outs[size_t(k)]) <= tolerance(DType::bf16));
      CHECK(rel_err(once.grads[0], cpu.grads[0]) <= tolerance(DType::bf16));
      check_bf16_argmax(once.outs[2], round_to(DType::bf16, in[0].f), round_to(DType::bf16, in[1].f), R, H, c.V);
      // The same bf16 logits, other f32 sums: loss, ce and dh within f32 and bf16 rounding.
      CHECK(once.outs[2] == twice.outs[2]);  // argmax: the first maximum in both
      check_close(once, twice, 1e-2);
      CHECK(rel_err(once.outs[0], twice.outs[0]) <= 1e-5);
      CHECK(identical(once, run(be.gpu, DType::bf16, in, ce_fn(chunk))));
    }
  }

  TEST_CASE("ce rows read once: exact ties across a cluster's CTAs give the first maximum, bad labels NaN") {
    REQUIRE_GPU();
    REQUIRE_HOPPER();
    Backends be;
    // Small integers make every logit exact in bf16 whatever the order of the sums; 16-byte slices
    // put one pack in each CTA (V = 24: 3 CTAs, 40: 5), so the ties and labels fall across CTAs.
    const Budget budget("16");
    for (const int64_t V : {24, 40}) {
      INFO("V " << V);
      REQUIRE(kernels::cuda::ce_rows_cluster(aligned_address(4096), aligned_address(8192), true, V) == V / 8);
      const int64_t R = 40, H = 3;
      std::mt19937_64 rng(11);
      const auto [hv, wv] = integer_ce_weights(R, H, V, rng);  // row 0: every logit 0, argmax 0
      std::vector<int32_t> labels(static_cast<size_t>(R), 0);
      for (int64_t r = 0; r < R; ++r) labels[size_t(r)] = int32_t(rng() % uint64_t(V));
      labels[1] = int32_t(V);
      labels[2] = -2;
      labels[3] = -1;
      std::vector<In> in{{{R, H}, Role::trainable, hv, {}}, {{V, H}, Role::frozen, wv, {}}, ints({R}, labels),
                         f32c({R}, std::vector<float>(size_t(R), 1.0f / R))};
      const Result g = run(be.gpu, DType::bf16, in, ce_fn(7)), cpu = run(be.cpu, DType::bf16, in, ce_fn(7));
      CHECK(g.outs[2] == cpu.outs[2]);
      CHECK(g.outs[2][0] == 0.0f);
      CHECK(std::isnan(g.outs[0][0]));
      for (int64_t r = 0; r < R; ++r) {
        INFO("row " << r << ", label " << labels[size_t(r)]);
        const bool bad = r == 1 || r == 2;
        CHECK(std::isnan(g.outs[1][size_t(r)]) == bad);
        if (!bad) CHECK(g.outs[1][size_t(r)] == doctest::Approx(cpu.outs[1][size_t(r)]).epsilon(1e-6));
        if (r == 3) CHECK(g.outs[1][size_t(r)] == 0.0f);
        for (int64_t k = 0; k < H; ++k) {
          CHECK(std::isnan(g.grads[0][size_t(r * H + k)]) == bad);
          if (r == 3) CHECK(g.grads[0][size_t(r * H + k)] == 0.0f);
        }
      }
    }
  }

  TEST_CASE("ce rows with NaN logits: the CPU's argmax (0 when column 0 is NaN; NaN never a maximum), NaN lse and ce") {
    REQUIRE_GPU();
    REQUIRE_HOPPER();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    struct Kernel {
      DType dt;
      int64_t V;
      const char* budget;
      int clusters;  // 0: the kernel that reads each row twice
    };
    // f32 in packs of 4 and one logit at a time (V odd); bf16 in packs of 8 and one at a time; bf16
    // read once by 8 CTAs a row (40 logits each).
    for (const Kernel k : {Kernel{DType::f32, 320, "0", 0}, Kernel{DType::f32, 321, "0", 0},
                           Kernel{DType::bf16, 320, "0", 0}, Kernel{DType::bf16, 321, "0", 0},
                           Kernel{DType::bf16, 320, "80", 8}}) {
      INFO(dtype_name(k.dt) << ", V " << k.V << ", " << k.clusters << " CTAs a row");
      const Budget budget(k.budget);
      const int64_t R = 7, V = k.V;
      // Integers in [-11, 11] (exact in bf16); the maximum 11 recurs along every row (ties).
      std::vector<float> x(size_t(R * V));
      for (int64_t r = 0; r < R; ++r)
        for (int64_t v = 0; v < V; ++v) x[size_t(r * V + v)] = float((v * 7 + r * 5) % 23) - 11.0f;
      auto at = [&](int64_t r, int64_t v) -> float& { return x[size_t(r * V + v)]; };
      auto first_max = [&](int64_t r) {
        for (int64_t v = 0;; ++v)
          if (!std::isnan(at(r, v)) && at(r, v) == 11.0f) return int32_t(v);
      };
      // Row 0: column 0 NaN (argmax 0 though 11 comes later); 1: NaN just before the first maximum;
      // 2: NaN just after it; 3: NaN in the last column; 4: -inf in column 0, NaN in 1; 5: every
      // logit NaN (argmax 0); 6: no NaN.
      REQUIRE(first_max(1) > 0);
      at(0, 0) = nan;
      at(1, first_max(1) - 1) = nan;
      at(2, first_max(2) + 1) = nan;
      at(3, V - 1) = nan;
      at(4, 0) = -inf;
      at(4, 1) = nan;
      for (int64_t v = 0; v < V; ++v) at(5, v) = nan;
      const std::vector<int32_t> want = {0, first_max(1), first_max(2), first_max(3), first_max(4), 0, first_max(6)};
      REQUIRE(want[4] > 1);
      const std::vector<int32_t> labels(size_t(R), 1);
      const std::vector<float> weights(size_t(R), 1.0f), xs = round_to(k.dt, x);
      const Tensor logits = make_float({R, V}, xs, k.dt), dlogits = make_float({R, V}, std::vector<float>(x.size()), k.dt);
      const Tensor tl = Tensor::from_ints({R}, labels), tw = Tensor::from_floats({R}, weights);
      Tensor lse = Tensor::zeros({R}, DType::f32), ce = Tensor::zeros({R}, DType::f32),
             argmax = Tensor::zeros({R}, DType::i32);
      const bool bf16 = k.dt == DType::bf16;
      REQUIRE(kernels::cuda::ce_rows_cluster(logits.raw(), dlogits.raw(), bf16, V) == k.clusters);
      kernels::cuda::ce_rows_forward(logits.raw(), bf16, tl.data<int32_t>(), tw.data<float>(), R, V, lse.data<float>(),
                                     ce.data<float>(), argmax.data<int32_t>(), dlogits.raw(), ctx.cuda_stream());
      const size_t rows = static_cast<size_t>(R);
      std::vector<float> cpu_lse(rows), cpu_ce(rows);
      std::vector<int32_t> cpu_argmax(rows);
      float cpu_loss = 0.0f;
      kernels::cpu::ce_chunk_forward(xs.data(), labels.data(), weights.data(), R, V, cpu_lse.data(), cpu_ce.data(),
                                     cpu_argmax.data(), &cpu_loss);
      CHECK(cpu_argmax == want);
      CHECK(argmax.to_ints() == want);
      const std::vector<float> g_lse = lse.to_floats(), g_ce = ce.to_floats();
      for (int64_t r = 0; r < R; ++r) {
        INFO("row " << r);
        CHECK(std::isnan(g_lse[size_t(r)]) == (r != 6));
        CHECK(std::isnan(g_ce[size_t(r)]) == (r != 6));
      }
      CHECK(g_lse[6] == doctest::Approx(cpu_lse[6]).epsilon(1e-6));
      CHECK(g_ce[6] == doctest::Approx(cpu_ce[6]).epsilon(1e-6));
    }
  }
}
#endif
