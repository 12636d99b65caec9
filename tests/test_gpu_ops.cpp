// CUDA ops against the CPU ops (forward and backward, f32 and bf16), determinism of repeated
// runs, a small model recorded as a CUDA Graph replaying bit for bit like eager, and the CUDA-only
// error messages. Suite "gpu-ops": it needs a GPU and fails without one.
#ifdef DFLASH_CUDA
#include <algorithm>
#include <cmath>
#include <limits>

#include "graphs/program.h"
#include "kernels/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/optimizer.h"
#include "tests/gpu_test_util.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {

std::vector<float> host_values(const Tensor& t) {
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
In rnd(Role role, const Shape& s, uint64_t seed, float scale = 1.0f) {
  return {s, role, random_floats(size_t(s.numel()), seed, scale), {}};
}
In ints(const Shape& s, std::vector<int32_t> v) { return {s, Role::ints, {}, std::move(v)}; }
In f32c(const Shape& s, std::vector<float> v) { return {s, Role::f32_frozen, std::move(v), {}}; }

using OpFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
struct Result {
  std::vector<std::vector<float>> outs, grads;  // every output; the gradient of every trainable input
};

// Runs f forward, then backward from seeded random gradients (in each output's dtype) for every
// output that requires grad. A nonleaf input is a trainable leaf seen through scale(x, 1), so the
// op's backward accumulates into a gradient of the input's own dtype.
Result run(Context& ctx, DType dt, const std::vector<In>& ins, const OpFn& f, uint64_t seed = 99) {
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

double tolerance(DType dt) { return dt == DType::f32 ? 1e-5 : 2e-2; }

void check_close(const Result& gpu, const Result& cpu, double tol) {
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
void check_parity(Backends& be, const std::vector<In>& ins, const OpFn& f) {
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO("dtype " << std::string(dtype_name(dt)));
    check_close(run(be.gpu, dt, ins, f), run(be.cpu, dt, ins, f), tolerance(dt));
  }
}

bool identical(const Result& a, const Result& b) {
  if (a.outs.size() != b.outs.size() || a.grads.size() != b.grads.size()) return false;
  for (size_t k = 0; k < a.outs.size(); ++k)
    if (!bitwise_equal(a.outs[k], b.outs[k])) return false;
  for (size_t k = 0; k < a.grads.size(); ++k)
    if (!bitwise_equal(a.grads[k], b.grads[k])) return false;
  return true;
}

std::vector<int32_t> random_ids(size_t n, int32_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = int32_t(rng() % uint64_t(V));
  return v;
}

std::vector<float> inv_freq(int64_t hd) {
  std::vector<float> f(size_t(hd / 2));
  for (int64_t i = 0; i < hd / 2; ++i) f[size_t(i)] = 1.0f / std::pow(10000.0f, float(2 * i) / float(hd));
  return f;
}

// Labels with every 7th row ignored (-1), weights with every 5th row 0, normalised.
std::pair<std::vector<int32_t>, std::vector<float>> ce_batch(int64_t R, int64_t V, uint64_t seed) {
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

OpFn ce_fn(int64_t chunk) {
  return [chunk](const std::vector<Tensor>& a) {
    ops::LinearCrossEntropy r = ops::linear_cross_entropy(a[0], a[1], a[2], a[3], chunk);
    return std::vector<Tensor>{r.loss, r.ce, r.argmax};
  };
}

// The GPU's bf16 logits are the GEMM's output rounded once, so its argmax may take any logit
// that rounds to the same bf16 value as the maximum: against logits in double from the same
// bf16 inputs, the pick must lie within one bf16 step of the maximum, and must be the maximum
// itself where the runner-up is more than two steps below.
void check_bf16_argmax(const std::vector<float>& argmax, const std::vector<float>& h, const std::vector<float>& w,
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

}  // namespace

TEST_SUITE("gpu-ops") {
  TEST_CASE("add, mul, scale: CUDA equals CPU, forward and backward") {
    REQUIRE_GPU();
    Backends be;
    for (int64_t n : {1, 7, 1000, 4099}) {
      for (Role role : {Role::trainable, Role::nonleaf}) {
        INFO("n " << n << (role == Role::nonleaf ? ", through a non-leaf" : ""));
        std::vector<In> in{rnd(role, {n}, 1), rnd(role, {n}, 2)};
        check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::add(a[0], a[1])}; });
        check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::mul(a[0], a[1])}; });
        check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::scale(a[0], -1.75f)}; });
      }
    }
    // Row views at odd offsets: addresses that are not 16-byte aligned take the scalar path.
    std::vector<In> in{rnd(Role::trainable, {5, 3}, 3), rnd(Role::frozen, {5, 3}, 4)};
    check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::mul(a[0].rows(1, 5), a[1].rows(0, 4))}; });
    check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::add(a[0].rows(1, 4), a[1].rows(2, 5))}; });
  }

  TEST_CASE("embedding: CUDA forward copies the CPU's rows exactly; backward sums repeated ids") {
    REQUIRE_GPU();
    Backends be;
    struct Case {
      int64_t V, H;
      Shape ids;
    };
    for (Case c : {Case{37, 8, {2, 7}}, Case{37, 5, {9}}, Case{5000, 3, {4, 16}}}) {
      INFO("V " << c.V << " H " << c.H);
      std::vector<int32_t> ids = random_ids(size_t(c.ids.numel()), int32_t(c.V), 5);
      ids[0] = ids[1] = ids[4] = int32_t(c.V - 1);  // repeats, and the last row
      ids[2] = 0;
      if (c.V > 4096) ids[3] = 4095, ids[5] = 4096;  // both sides of a backward block boundary
      std::vector<In> in{rnd(Role::trainable, {c.V, c.H}, 6), ints(c.ids, ids)};
      OpFn f = [](auto& a) { return std::vector<Tensor>{ops::embedding(a[0], a[1])}; };
      check_parity(be, in, f);
      for (DType dt : {DType::f32, DType::bf16})
        CHECK(bitwise_equal(run(be.gpu, dt, in, f).outs[0], run(be.cpu, dt, in, f).outs[0]));
    }
  }

  TEST_CASE("rmsnorm: CUDA equals CPU for dx and dw, per token and per head") {
    REQUIRE_GPU();
    Backends be;
    // (D = 1 is left out: there dx is 0 up to eps and only rounding noise remains.)
    for (Shape xs : {Shape{1, 3}, Shape{5, 7}, Shape{33, 64}, Shape{3, 4, 8}, Shape{130, 40}, Shape{2, 1000}}) {
      INFO("x " << xs.str());
      int64_t D = xs.last();
      std::vector<float> w = random_floats(size_t(D), 11, 0.2f);
      for (float& x : w) x += 1.0f;
      for (Role role : {Role::trainable, Role::nonleaf}) {
        std::vector<In> in{rnd(role, xs, 10), In{{D}, Role::trainable, w, {}}};
        check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::rmsnorm(a[0], a[1], 1e-6f)}; });
      }
    }
  }

  TEST_CASE("swiglu: CUDA equals CPU, large |gate| included") {
    REQUIRE_GPU();
    Backends be;
    for (int64_t n : {9, 1030}) {
      for (Role role : {Role::trainable, Role::nonleaf}) {
        std::vector<In> in{rnd(role, {n}, 20, 6.0f), rnd(role, {n}, 21)};
        check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::swiglu(a[0], a[1])}; });
      }
    }
  }

  TEST_CASE("rope: CUDA equals CPU, large positions included") {
    REQUIRE_GPU();
    Backends be;
    struct Case {
      int64_t B, L, heads, hd;
    };
    for (Case c : {Case{2, 5, 3, 8}, Case{1, 7, 2, 64}, Case{1, 3, 1, 2}}) {
      std::vector<int32_t> pos = random_ids(size_t(c.B * c.L), 32768, 30);
      pos[0] = 0;
      for (Role role : {Role::trainable, Role::nonleaf}) {
        std::vector<In> in{rnd(role, {c.B, c.L, c.heads, c.hd}, 31), ints({c.B, c.L}, pos),
                           f32c({c.hd / 2}, inv_freq(c.hd))};
        check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::rope(a[0], a[1], a[2])}; });
      }
    }
  }

  TEST_CASE("fused add_rmsnorm and rmsnorm_rope: the unfused CUDA ops' bits, and the CPU's values") {
    REQUIRE_GPU();
    Backends be;
    auto same_bits = [&](const std::vector<In>& in, const OpFn& fused, const OpFn& unfused) {
      for (DType dt : {DType::f32, DType::bf16}) {
        INFO("dtype " << std::string(dtype_name(dt)));
        const Result a = run(be.gpu, dt, in, fused), b = run(be.gpu, dt, in, unfused);
        REQUIRE(a.outs.size() == b.outs.size());
        for (size_t k = 0; k < a.outs.size(); ++k) CHECK(bitwise_equal(a.outs[k], b.outs[k]));
      }
      check_parity(be, in, fused);
    };
    // D = 4096: 16 packs a lane (bf16); 128, 64: one to four; 40: the unfused fallback (5 packs of 8);
    // 1000 rows: many blocks and a partial last one. f32 at 4096 (32 packs a lane) falls back too.
    for (Shape xs : {Shape{3, 4096}, Shape{5, 128}, Shape{1000, 64}, Shape{7, 40}, Shape{2, 3, 256}}) {
      INFO("x " << xs.str());
      const int64_t D = xs.last();
      std::vector<float> w = random_floats(size_t(D), 41, 0.2f);
      for (float& x : w) x += 1.0f;
      std::vector<In> in{rnd(Role::frozen, xs, 42), rnd(Role::frozen, xs, 43), In{{D}, Role::frozen, w, {}}};
      same_bits(
          in,
          [](auto& a) {
            ops::AddRmsnorm r = ops::add_rmsnorm(a[0], a[1], a[2], 1e-6f);
            return std::vector<Tensor>{r.sum, r.normed};
          },
          [](auto& a) {
            Tensor r = ops::add(a[0], a[1]);
            return std::vector<Tensor>{r, ops::rmsnorm(r, a[2], 1e-6f)};
          });
    }
    struct Case {
      int64_t B, L, hq, hk, hd;
    };
    // hd 128 / 64: fused (16 / 8 lanes a head in bf16); 40 heads: a partial last round of heads;
    // hd 96 (12 packs) and hd 8 in bf16 (one pack): the unfused fallback; hd 8 in f32: 2 lanes.
    for (Case c : {Case{2, 5, 4, 2, 128}, Case{1, 9, 32, 8, 128}, Case{1, 7, 3, 1, 64}, Case{1, 4, 2, 1, 96},
                   Case{2, 3, 2, 2, 8}}) {
      INFO("B " << c.B << " L " << c.L << " heads " << c.hq << "/" << c.hk << " hd " << c.hd);
      std::vector<int32_t> pos = random_ids(size_t(c.B * c.L), 32768, 44);
      pos[0] = 0;
      std::vector<float> wq = random_floats(size_t(c.hd), 45, 0.2f), wk = random_floats(size_t(c.hd), 46, 0.2f);
      for (float& x : wq) x += 1.0f;
      std::vector<In> in{rnd(Role::frozen, {c.B, c.L, c.hq, c.hd}, 47),
                         rnd(Role::frozen, {c.B, c.L, c.hk, c.hd}, 48),
                         In{{c.hd}, Role::frozen, wq, {}},
                         In{{c.hd}, Role::frozen, wk, {}},
                         ints({c.B, c.L}, pos),
                         f32c({c.hd / 2}, inv_freq(c.hd))};
      same_bits(
          in,
          [](auto& a) {
            ops::RopedQK r = ops::rmsnorm_rope(a[0], a[1], a[2], a[3], a[4], a[5], 1e-6f);
            return std::vector<Tensor>{r.q, r.k};
          },
          [](auto& a) {
            return std::vector<Tensor>{ops::rope(ops::rmsnorm(a[0], a[2], 1e-6f), a[4], a[5]),
                                       ops::rope(ops::rmsnorm(a[1], a[3], 1e-6f), a[4], a[5])};
          });
    }
  }

  TEST_CASE("swiglu_halves: CUDA swiglu's bits on the halves, and the CPU's values") {
    REQUIRE_GPU();
    Backends be;
    // I = 12288: the target's width (16-byte packs); 64 rows of 24: packs, many blocks; I = 5 and 4
    // (f32 packs of 4, bf16 one by one): the scalar path.
    for (Shape s : {Shape{3, 12288}, Shape{64, 24}, Shape{2, 3, 5}, Shape{7, 4}}) {
      INFO("gate and up " << s.str());
      std::vector<In> in{rnd(Role::frozen, s, 51), rnd(Role::frozen, s, 52)};
      const OpFn fused = [](auto& a) { return std::vector<Tensor>{ops::swiglu_halves(ops::concat(a[0], a[1], -1))}; };
      const OpFn unfused = [](auto& a) { return std::vector<Tensor>{ops::swiglu(a[0], a[1])}; };
      for (DType dt : {DType::f32, DType::bf16}) {
        INFO("dtype " << std::string(dtype_name(dt)));
        const Result a = run(be.gpu, dt, in, fused), b = run(be.gpu, dt, in, unfused);
        REQUIRE(a.outs.size() == 1);
        CHECK(bitwise_equal(a.outs[0], b.outs[0]));
      }
      check_parity(be, in, fused);
    }
  }

  TEST_CASE("concat: CUDA equals CPU along every dim, for f32, bf16 and i32") {
    REQUIRE_GPU();
    Backends be;
    for (int dim : {0, 1, -1}) {
      for (auto [a_len, b_len] : {std::pair{1, 1}, {3, 5}, {33, 7}}) {
        INFO("dim " << dim << " lengths " << a_len << ", " << b_len);
        Shape as{4, 3, 6}, bs{4, 3, 6};
        int d = dim < 0 ? dim + 3 : dim;
        as.d[d] = a_len;
        bs.d[d] = b_len;
        std::vector<In> in{rnd(Role::trainable, as, 40), rnd(Role::nonleaf, bs, 41)};
        check_parity(be, in, [dim](auto& a) { return std::vector<Tensor>{ops::concat(a[0], a[1], dim)}; });
      }
    }
    std::vector<In> in{ints({2, 3}, {1, 2, 3, 4, 5, 6}), ints({2, 1}, {-7, -8})};
    Result r = run(be.gpu, DType::f32, in, [](auto& a) { return std::vector<Tensor>{ops::concat(a[0], a[1], 1)}; });
    CHECK(r.outs[0] == std::vector<float>{1, 2, 3, -7, 4, 5, 6, -8});
    std::vector<In> empty{rnd(Role::trainable, {0, 3}, 42), rnd(Role::trainable, {2, 3}, 43)};
    check_parity(be, empty, [](auto& a) { return std::vector<Tensor>{ops::concat(a[0], a[1], 0)}; });
  }

  TEST_CASE("sum and mean: CUDA equals CPU, one and many partial blocks") {
    REQUIRE_GPU();
    Backends be;
    for (int64_t n : {1, 1000, 100000}) {
      INFO("n " << n);
      for (Role role : {Role::trainable, Role::nonleaf}) {
        std::vector<In> in{rnd(role, {n}, 50)};
        check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::sum(a[0])}; });
        check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::mean(a[0])}; });
      }
    }
  }

  TEST_CASE("linear_cross_entropy: CUDA equals CPU for loss, ce, argmax, dh and dweight") {
    REQUIRE_GPU();
    Backends be;
    struct Case {
      int64_t R, H, V, chunk;
      bool train_weight;
    };
    for (Case c : {Case{37, 16, 50, 8, false}, Case{5, 16, 320, 64, true}, Case{37, 8, 50, 1, true},
                   Case{64, 12, 321, 16, true}}) {
      INFO("R " << c.R << " H " << c.H << " V " << c.V << " chunk " << c.chunk);
      auto [labels, w] = ce_batch(c.R, c.V, 3);
      for (Role role : {Role::trainable, Role::nonleaf}) {
        std::vector<In> in{rnd(role, {c.R, c.H}, 1), rnd(c.train_weight ? Role::trainable : Role::frozen, {c.V, c.H}, 2, 0.5f),
                           ints({c.R}, labels), f32c({c.R}, w)};
        check_parity(be, in, ce_fn(c.chunk));
        for (DType dt : {DType::f32, DType::bf16}) {
          INFO("dtype " << std::string(dtype_name(dt)));
          Result g = run(be.gpu, dt, in, ce_fn(c.chunk)), cpu = run(be.cpu, dt, in, ce_fn(c.chunk));
          if (dt == DType::f32) CHECK(g.outs[2] == cpu.outs[2]);  // argmax, exactly
          else check_bf16_argmax(g.outs[2], round_to(dt, in[0].f), round_to(dt, in[1].f), c.R, c.H, c.V);
          for (int64_t r = 0; r < c.R; ++r)
            if (labels[size_t(r)] < 0) CHECK(g.outs[1][size_t(r)] == 0.0f);
        }
      }
    }
  }

  TEST_CASE("linear_cross_entropy on CUDA: first maximum on exact ties, NaN for labels outside [-1, V)") {
    REQUIRE_GPU();
    Backends be;
    // Small integers make every logit exact in f32 and bf16, whatever the summation order.
    const int64_t R = 40, H = 3, V = 9;
    std::mt19937_64 rng(5);
    std::vector<float> hv(size_t(R * H)), wv(size_t(V * H));
    for (float& x : hv) x = float(int(rng() % 5) - 2);
    for (float& x : wv) x = float(int(rng() % 3) - 1);
    for (int64_t k = 0; k < H; ++k) hv[size_t(k)] = 0.0f;  // row 0: every logit 0, argmax 0
    std::vector<int32_t> labels(size_t(R), 0);
    labels[1] = int32_t(V);
    labels[2] = -2;
    std::vector<In> in{{{R, H}, Role::trainable, hv, {}}, {{V, H}, Role::frozen, wv, {}}, ints({R}, labels),
                       f32c({R}, std::vector<float>(size_t(R), 1.0f / R))};
    for (DType dt : {DType::f32, DType::bf16}) {
      INFO("dtype " << std::string(dtype_name(dt)));
      Result g = run(be.gpu, dt, in, ce_fn(7)), cpu = run(be.cpu, dt, in, ce_fn(7));
      CHECK(g.outs[2] == cpu.outs[2]);
      CHECK(g.outs[2][0] == 0.0f);
      CHECK(std::isnan(g.outs[0][0]));
      for (int64_t r = 0; r < R; ++r) {
        INFO("row " << r);
        bool bad = r == 1 || r == 2;
        CHECK(std::isnan(g.outs[1][size_t(r)]) == bad);
        if (!bad) CHECK(g.outs[1][size_t(r)] == doctest::Approx(cpu.outs[1][size_t(r)]).epsilon(1e-6));
        for (int64_t k = 0; k < H; ++k) CHECK(std::isnan(g.grads[0][size_t(r * H + k)]) == bad);
      }
    }
  }

  TEST_CASE("CUDA ops are deterministic: the same call twice gives the same bits") {
    REQUIRE_GPU();
    Backends be;
    auto twice = [&](const std::vector<In>& in, const OpFn& f) {
      for (DType dt : {DType::f32, DType::bf16}) {
        INFO("dtype " << std::string(dtype_name(dt)));
        CHECK(identical(run(be.gpu, dt, in, f), run(be.gpu, dt, in, f)));
      }
    };
    twice({rnd(Role::nonleaf, {1000, 256}, 60), rnd(Role::trainable, {256}, 61)},
          [](auto& a) { return std::vector<Tensor>{ops::rmsnorm(a[0], a[1], 1e-6f)}; });
    std::vector<int32_t> ids = random_ids(4000, 50, 62);  // every id repeats ~80 times
    twice({rnd(Role::trainable, {50, 64}, 63), ints({4000}, ids)},
          [](auto& a) { return std::vector<Tensor>{ops::embedding(a[0], a[1])}; });
    twice({rnd(Role::nonleaf, {300000}, 64)}, [](auto& a) { return std::vector<Tensor>{ops::sum(a[0])}; });
    auto [labels, w] = ce_batch(300, 1000, 65);
    twice({rnd(Role::nonleaf, {300, 64}, 66), rnd(Role::trainable, {1000, 64}, 67, 0.5f), ints({300}, labels),
           f32c({300}, w)},
          ce_fn(128));
  }

  TEST_CASE("a small model recorded as a CUDA graph replays bit for bit like eager") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    const int64_t V = 64, H = 32, I = 48, R = 24, heads = 4, hd = 8, layers = 2;
    std::vector<ParamSpec> specs{{"mix", {H, 2 * H}}, {"final_norm", {H}}};
    for (int l = 0; l < layers; ++l)
      for (ParamSpec s : {ParamSpec{"norm", {H}}, ParamSpec{"gate", {I, H}}, ParamSpec{"up", {I, H}},
                          ParamSpec{"down", {H, I}}})
        specs.push_back({"l" + std::to_string(l) + "." + s.name, s.shape});
    ParameterStore params(specs);
    AdamWOptimizer opt(params, OptimizerConfig{});
    uint64_t seed = 100;
    for (const ParamSpec& s : specs) {
      bool norm = s.shape.ndim == 1;
      std::vector<float> v = random_floats(size_t(s.shape.numel()), ++seed, norm ? 0.1f : 0.2f);
      if (norm)
        for (float& x : v) x += 1.0f;
      params.master(s.name).copy_from_host(v.data(), v.size() * 4);
    }
    params.sync_compute_copy();
    const std::vector<float> master0 = params.flat_master().to_floats();
    Tensor embed = make_float({V, H}, random_floats(size_t(V * H), 1), DType::bf16);
    Tensor lm_head = make_float({V, H}, random_floats(size_t(V * H), 2, 0.5f), DType::bf16);
    Tensor ids = Tensor::from_ints({R}, random_ids(size_t(R), int32_t(V), 3));
    Tensor positions = Tensor::from_ints({R}, random_ids(size_t(R), 4096, 4));
    Tensor freq = Tensor::from_floats({hd / 2}, inv_freq(hd));
    auto [lv, wv] = ce_batch(R, V, 5);
    Tensor labels = Tensor::from_ints({R}, lv), row_weights = Tensor::from_floats({R}, wv);
    Tensor loss = Tensor::persistent({1}, DType::f32), ce = Tensor::persistent({R}, DType::f32);
    Tensor argmax = Tensor::persistent({R}, DType::i32), stats = Tensor::persistent({2}, DType::f32);

    auto P = [&](const std::string& name) { return params.get(name); };
    auto train_step = [&] {
      Tensor x = ops::embedding(embed, ids);  // (R, H) bf16, frozen table
      for (int l = 0; l < layers; ++l) {
        std::string p = "l" + std::to_string(l) + ".";
        Tensor h = ops::rmsnorm(x, P(p + "norm"), 1e-6f);
        Tensor a = ops::swiglu(ops::linear(h, P(p + "gate")), ops::linear(h, P(p + "up")));
        x = ops::add(x, ops::linear(a, P(p + "down")));
        if (l == 0) {
          Tensor q = ops::rope(x.reshape({R, heads, hd}), positions, freq).reshape({R, H});
          x = ops::add(x, ops::linear(ops::concat(q, x, 1), P("mix")));
        }
      }
      ops::LinearCrossEntropy res =
          ops::linear_cross_entropy(ops::rmsnorm(x, P("final_norm"), 1e-6f), lm_head, labels, row_weights, 10);
      ops::copy_(loss, res.loss);
      ops::copy_(ce, res.ce);
      ops::copy_(argmax, res.argmax);
      backward(res.loss);
    };
    auto update = [&] { opt.update(1.0f, stats); };
    auto reset = [&] {
      std::vector<float> zeros(size_t(params.padded_numel()), 0.0f), nan(size_t(R), NAN);
      params.flat_master().copy_from_host(master0.data(), master0.size() * 4);
      params.sync_compute_copy();
      params.flat_grads().copy_from_host(zeros.data(), zeros.size() * 4);
      opt.adam_m().copy_from_host(zeros.data(), zeros.size() * 4);
      opt.adam_v().copy_from_host(zeros.data(), zeros.size() * 4);
      int32_t zero_step = 0;
      opt.step_counter().copy_from_host(&zero_step, 4);
      loss.copy_from_host(nan.data(), 4);
      ce.copy_from_host(nan.data(), nan.size() * 4);
    };
    struct State {
      std::vector<float> loss, ce, grads, master, compute, stats;
      std::vector<int32_t> argmax;
    };
    auto read_train = [&](State& s) {
      ctx.synchronize();
      s.loss = loss.to_floats();
      s.ce = ce.to_floats();
      s.argmax = argmax.to_ints();
      s.grads = params.flat_grads().to_floats();
    };
    auto read_update = [&](State& s) {
      ctx.synchronize();
      s.master = params.flat_master().to_floats();
      s.compute = params.flat_compute().to_floats();
      s.stats = stats.to_floats();
    };

    State eager;
    train_step();
    read_train(eager);
    update();
    read_update(eager);
    REQUIRE(std::isfinite(eager.loss[0]));
    REQUIRE(max_abs(eager.grads) > 0);
    REQUIRE(eager.master != master0);

    reset();
    size_t arena = std::max(plan_program(ctx, "train", train_step).arena_bytes, plan_program(ctx, "update", update).arena_bytes);
    ctx.reserve_arena(arena);
    Program train = record_program(ctx, "train", train_step);
    Program upd = record_program(ctx, "update", update);
    ctx.synchronize();
    CHECK(std::isnan(loss.item()));  // recording ran nothing
    for (int round = 0; round < 2; ++round) {
      INFO("replay round " << round);
      reset();
      State replay;
      train.replay();
      read_train(replay);
      upd.replay();
      read_update(replay);
      CHECK(bitwise_equal(replay.loss, eager.loss));
      CHECK(bitwise_equal(replay.ce, eager.ce));
      CHECK(replay.argmax == eager.argmax);
      CHECK(bitwise_equal(replay.grads, eager.grads));
      CHECK(bitwise_equal(replay.master, eager.master));
      CHECK(bitwise_equal(replay.compute, eager.compute));
      CHECK(bitwise_equal(replay.stats, eager.stats));
    }
  }

  TEST_CASE("CUDA-only errors name the op, the tensors and the fix") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    Tensor x = make_float({3, 8}, random_floats(24, 1), DType::bf16);
    Tensor iv = Tensor::from_ints({1, 2}, {1, 2});
    CHECK_THROWS_WITH_AS(ops::rmsnorm(iv, Tensor::from_ints({2}, {1, 1}), 1e-6f),
                         doctest::Contains("rmsnorm: x is i32[1,2] but must be f32 or bf16"), Error);
    CHECK_THROWS_WITH_AS(ops::add(iv, iv), doctest::Contains("add: a is i32[1,2] but must be f32 or bf16"), Error);
    CHECK_THROWS_WITH_AS(ops::linear_cross_entropy(x, make_float({5, 8}, random_floats(40, 2), DType::f32),
                                                   Tensor::from_ints({3}, {0, 1, 2}), Tensor::from_floats({3}, {1, 1, 1})),
                         doctest::Contains("both must have the same dtype (bf16 on a GPU)"), Error);
    Tensor ia = Tensor::from_ints({2}, {1, 2});
    ia.set_requires_grad(true);
    CHECK_THROWS_WITH_AS(ops::concat(ia, Tensor::from_ints({1}, {3}), 0),
                         doctest::Contains("only f32 or bf16 concatenation is differentiable"), Error);
    // The loss gradient of the fused CE must be f32 (the loss is f32 on every device).
    Tensor h = make_float({3, 8}, random_floats(24, 3), DType::bf16);
    h.set_requires_grad(true);
    ops::LinearCrossEntropy res = ops::linear_cross_entropy(h, make_float({5, 8}, random_floats(40, 4), DType::bf16),
                                                            Tensor::from_ints({3}, {0, 1, 2}),
                                                            Tensor::from_floats({3}, {1, 1, 1}));
    CHECK_THROWS_WITH_AS(run_backward({res.loss}, {make_float({1}, {1.0f}, DType::bf16)}),
                         doctest::Contains("the loss gradient is bf16[1]; it must be f32"), Error);
    ctx.tape().clear();  // the failed backward left its nodes (and their CUDA temporaries) on the tape
    // A GEMM on a stream other than the one the context bound its cuBLAS handle to is refused.
    void* other = cuda_backend::create_stream(0);
    Tensor c = Tensor::persistent({3, 3}, DType::f32);
    kernels::cuda::GemmArgs g{3, 3, 8, x.raw(), 8, false, x.raw(), 8, true, c.raw(), 3, 1.0f, 0.0f, true, false};
    CHECK_THROWS_WITH_AS(kernels::cuda::gemm(g, ctx.cublas(), other), doctest::Contains("bound to another stream"),
                         std::runtime_error);
    cuda_backend::destroy_stream(other);
  }
}

#endif  // DFLASH_CUDA
