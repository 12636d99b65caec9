// The harness of the gpu-ops suites (test_gpu_ops.cpp, test_gpu_fused_ops.cpp, test_gpu_ce_rows.cpp): an op run on a
// context from seeded inputs (forward, then backward from seeded gradients), CUDA against the CPU
// within a dtype's tolerance, and bit-for-bit comparison of two runs. CUDA builds only.
#pragma once
#ifdef DFLASH_CUDA
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "runtime/ops.h"
#include "tests/gpu_test_util.h"
#include "tests/test_util.h"

namespace dflash::test::gpu_ops {

inline std::vector<float> host_values(const Tensor& t) {
  if (t.dtype() == DType::f32 || t.dtype() == DType::bf16) return t.to_floats();
  std::vector<int32_t> iv = t.to_ints();
  return std::vector<float>(iv.begin(), iv.end());
}

// One input of an op under test. Float inputs are rounded to the dtype under test first, so both
// backends see the same values; on the CPU they are f32, on CUDA of that dtype.
enum class Role { frozen, trainable, nonleaf, ints, f32_frozen };
struct In {
  Shape shape;
  Role role;
  std::vector<float> f;
  std::vector<int32_t> i;
};
inline In rnd(Role role, const Shape& s, uint64_t seed, float scale = 1.0f) {
  return {s, role, random_floats(size_t(s.numel()), seed, scale), {}};
}
inline In ints(const Shape& s, std::vector<int32_t> v) { return {s, Role::ints, {}, std::move(v)}; }
inline In f32c(const Shape& s, std::vector<float> v) { return {s, Role::f32_frozen, std::move(v), {}}; }

using OpFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
struct Result {
  std::vector<std::vector<float>> outs, grads;  // every output; the gradient of every trainable input
};

// Runs f forward, then backward from seeded random gradients (in each output's dtype) for every
// output that requires grad. A nonleaf input is a trainable leaf seen through scale(x, 1), so the
// op's backward accumulates into a gradient of the input's own dtype.
inline Result run(Context& ctx, DType dt, const std::vector<In>& ins, const OpFn& f, uint64_t seed = 99) {
  ContextScope scope(ctx);
  DType float_dtype = ctx.device().is_cpu() ? DType::f32 : dt;
  std::vector<Tensor> leaves, args;
  for (const In& in : ins) {
    Tensor t = in.role == Role::ints         ? Tensor::from_ints(in.shape, in.i)
               : in.role == Role::f32_frozen ? Tensor::from_floats(in.shape, in.f)
                                             : make_float(in.shape, round_to(dt, in.f), float_dtype);
    if (in.role == Role::trainable || in.role == Role::nonleaf) t.set_requires_grad(true);
    leaves.push_back(t);
    args.push_back(in.role == Role::nonleaf ? ops::scale(t, 1.0f) : t);
  }
  std::vector<Tensor> ys = f(args);
  Result r;
  std::vector<Tensor> with_grad, seeds;
  for (size_t k = 0; k < ys.size(); ++k) {
    r.outs.push_back(host_values(ys[k]));
    if (!ys[k].requires_grad()) continue;
    with_grad.push_back(ys[k]);
    seeds.push_back(make_float(ys[k].shape(), round_to(dt, random_floats(size_t(ys[k].numel()), seed + k)), ys[k].dtype()));
  }
  if (!with_grad.empty()) run_backward(with_grad, seeds);
  for (const Tensor& t : leaves)
    if (t.requires_grad()) r.grads.push_back(t.grad().to_floats());
  return r;
}

inline double tolerance(DType dt) { return dt == DType::f32 ? 1e-5 : 2e-2; }

inline void check_close(const Result& gpu, const Result& cpu, double tol) {
  REQUIRE(gpu.outs.size() == cpu.outs.size());
  REQUIRE(gpu.grads.size() == cpu.grads.size());
  for (size_t k = 0; k < gpu.outs.size(); ++k) {
    INFO("output " << k << ": relative error " << rel_err(gpu.outs[k], cpu.outs[k]));
    CHECK(rel_err(gpu.outs[k], cpu.outs[k]) <= tol);
  }
  for (size_t k = 0; k < gpu.grads.size(); ++k) {
    INFO("gradient of trainable input " << k << ": relative error " << rel_err(gpu.grads[k], cpu.grads[k]));
    CHECK(rel_err(gpu.grads[k], cpu.grads[k]) <= tol);
  }
}

// CUDA against CPU in f32 (tolerance 1e-5) and bf16 (2e-2), relative to the largest magnitude.
inline void check_parity(Backends& be, const std::vector<In>& ins, const OpFn& f) {
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO("dtype " << std::string(dtype_name(dt)));
    check_close(run(be.gpu, dt, ins, f), run(be.cpu, dt, ins, f), tolerance(dt));
  }
}

inline bool identical(const Result& a, const Result& b) {
  if (a.outs.size() != b.outs.size() || a.grads.size() != b.grads.size()) return false;
  for (size_t k = 0; k < a.outs.size(); ++k)
    if (!bitwise_equal(a.outs[k], b.outs[k])) return false;
  for (size_t k = 0; k < a.grads.size(); ++k)
    if (!bitwise_equal(a.grads[k], b.grads[k])) return false;
  return true;
}

inline std::vector<int32_t> random_ids(size_t n, int32_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = int32_t(rng() % uint64_t(V));
  return v;
}

// Labels with every 7th row ignored (-1), weights with every 5th row 0, normalised.
inline std::pair<std::vector<int32_t>, std::vector<float>> ce_batch(int64_t R, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> labels;
  std::vector<float> w;
  double total = 0;
  for (int64_t r = 0; r < R; ++r) {
    labels.push_back(r % 7 == 3 ? -1 : int32_t(rng() % uint64_t(V)));
    w.push_back(r % 5 == 1 ? 0.0f : 0.25f + float(rng() % 1000) / 1000.0f);
    total += w.back();
  }
  for (float& x : w) x = float(x / total);
  return {labels, w};
}

inline OpFn ce_fn(int64_t chunk) {
  return [chunk](const std::vector<Tensor>& a) {
    ops::LinearCrossEntropy r = ops::linear_cross_entropy(a[0], a[1], a[2], a[3], chunk);
    return std::vector<Tensor>{r.loss, r.ce, r.argmax};
  };
}

// The GPU's bf16 logits are the GEMM's output rounded once, so its argmax may take any logit
// that rounds to the same bf16 value as the maximum: against logits in double from the same
// bf16 inputs, the pick must lie within one bf16 step of the maximum, and must be the maximum
// itself where the runner-up is more than two steps below.
inline void check_bf16_argmax(const std::vector<float>& argmax, const std::vector<float>& h, const std::vector<float>& w,
                       int64_t R, int64_t H, int64_t V) {
  for (int64_t r = 0; r < R; ++r) {
    std::vector<double> x(static_cast<size_t>(V), 0.0);
    for (int64_t v = 0; v < V; ++v)
      for (int64_t k = 0; k < H; ++k) x[size_t(v)] += double(h[size_t(r * H + k)]) * double(w[size_t(v * H + k)]);
    const int64_t best = std::max_element(x.begin(), x.end()) - x.begin();
    double second = -INFINITY;
    for (int64_t v = 0; v < V; ++v)
      if (v != best) second = std::max(second, x[size_t(v)]);
    const double top = x[size_t(best)], step = std::ldexp(1.0, std::ilogb(std::max(std::fabs(top), 1e-30)) - 7);
    const int64_t got = int64_t(argmax[size_t(r)]);
    INFO("row " << r << ": argmax " << got << ", maximum " << top << " at " << best << ", runner-up " << second
                << ", bf16 step " << step);
    REQUIRE((got >= 0 && got < V));
    CHECK(x[size_t(got)] >= top - step);
    if (top - second > 2 * step) CHECK(got == best);
  }
}

// h [R, H] and an lm_head [V, H] of small integers, so every logit is exact in f32 and bf16 whatever
// the order of the sums (ties stay exact); row 0 of h is zero (every logit 0: argmax 0).
inline std::pair<std::vector<float>, std::vector<float>> integer_ce_weights(int64_t R, int64_t H, int64_t V,
                                                                           std::mt19937_64& rng) {
  std::vector<float> hv(size_t(R * H)), wv(size_t(V * H));
  for (float& x : hv) x = float(int(rng() % 5) - 2);
  for (float& x : wv) x = float(int(rng() % 3) - 1);
  for (int64_t k = 0; k < H; ++k) hv[size_t(k)] = 0.0f;
  return {hv, wv};
}

inline std::vector<float> inv_freq(int64_t hd) {
  std::vector<float> f(size_t(hd / 2));
  for (int64_t i = 0; i < hd / 2; ++i) f[size_t(i)] = 1.0f / std::pow(10000.0f, float(2 * i) / float(hd));
  return f;
}

}  // namespace dflash::test::gpu_ops
#endif
