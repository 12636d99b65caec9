// CUDA ops against the CPU ops (forward and backward, f32 and bf16), determinism of repeated
// runs, a small model recorded as a CUDA Graph replaying bit for bit like eager (with
// runtime.kernels "auto" and "portable"), and the CUDA-only error messages. Suite "gpu-ops": it
// needs a GPU and fails without one.
#ifdef DFLASH_CUDA
#include <algorithm>
#include <cmath>
#include <limits>

#include "graphs/program.h"
#include "kernels/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/optimizer.h"
#include "tests/gpu_op_harness.h"

using namespace dflash;
using namespace dflash::test;
using namespace dflash::test::gpu_ops;

namespace {

}  // namespace

TEST_SUITE("gpu-ops") {
  TEST_CASE("add, mul, scale: CUDA equals CPU, forward and backward, a tensor used twice") {
    REQUIRE_GPU();
    Backends be;
    for (int64_t n : {1, 7, 1000, 4099}) {
      for (Role role : {Role::trainable, Role::nonleaf}) {
        INFO("n " << n << (role == Role::nonleaf ? ", through a non-leaf" : ""));
        std::vector<In> in{rnd(role, {n}, 1), rnd(role, {n}, 2)};
        check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::add(a[0], a[1])}; });
        check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::mul(a[0], a[1])}; });
        check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::scale(a[0], -1.75f)}; });
        // One tensor on both sides, or twice in a sum: its gradient is two terms added in place.
        check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::mul(a[0], a[0])}; });
        check_parity(be, in, [](auto& a) { return std::vector<Tensor>{ops::add(ops::mul(a[0], a[1]), a[0])}; });
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

  TEST_CASE("concat_all: CUDA equals CPU, the target's five layers, ragged and odd widths, f32, bf16 and i32") {
    REQUIRE_GPU();
    Backends be;
    // (rows, widths): the target's features at small H (16-byte rows), widths of 3 and 5 (1- and
    // 4-byte units), and parts along dim 0.
    for (auto [rows, widths] : {std::pair<int64_t, std::vector<int64_t>>{64, {256, 256, 256, 256, 256}},
                                {5, {3, 8, 5}},
                                {3, {1}}}) {
      std::vector<In> in;
      for (size_t i = 0; i < widths.size(); ++i) in.push_back(rnd(Role::frozen, {1, rows, widths[i]}, 60 + i));
      INFO("rows " << rows << ", " << widths.size() << " parts");
      // The CPU's bits, and the bits of chained two-part concats.
      for (DType dt : {DType::f32, DType::bf16}) {
        INFO("dtype " << std::string(dtype_name(dt)));
        const Result cpu = run(be.cpu, dt, in, [](auto& a) { return std::vector<Tensor>{ops::concat_all(a, 2)}; });
        const Result all = run(be.gpu, dt, in, [](auto& a) { return std::vector<Tensor>{ops::concat_all(a, -1)}; });
        const Result chained = run(be.gpu, dt, in, [](auto& a) {
          Tensor f = a[0];
          for (size_t i = 1; i < a.size(); ++i) f = ops::concat(f, a[i], -1);
          return std::vector<Tensor>{f};
        });
        CHECK(bitwise_equal(all.outs[0], cpu.outs[0]));
        CHECK(bitwise_equal(all.outs[0], chained.outs[0]));
      }
    }
    std::vector<In> rows{rnd(Role::frozen, {2, 6}, 70), rnd(Role::frozen, {3, 6}, 71)};
    const OpFn by_rows = [](auto& a) { return std::vector<Tensor>{ops::concat_all(a, 0)}; };
    CHECK(bitwise_equal(run(be.gpu, DType::bf16, rows, by_rows).outs[0], run(be.cpu, DType::bf16, rows, by_rows).outs[0]));
    std::vector<In> in{ints({2, 1}, {1, 2}), ints({2, 2}, {3, 4, 5, 6})};
    Result r = run(be.gpu, DType::f32, in, [](auto& a) { return std::vector<Tensor>{ops::concat_all(a, 1)}; });
    CHECK(r.outs[0] == std::vector<float>{1, 3, 4, 2, 5, 6});
  }

  TEST_CASE("split_columns: CUDA equals CPU, the packed q, k and v of a decode step, odd widths, f32, bf16 and i32") {
    REQUIRE_GPU();
    Backends be;
    // (rows, widths): Qwen3-8B's q, k and v at 32 rows (16-byte units), odd widths (2- and 4-byte
    // units), and four parts.
    for (auto [rows, widths] : {std::pair<int64_t, std::vector<int64_t>>{32, {4096, 1024, 1024}},
                                {5, {3, 8, 5}},
                                {3, {1, 2, 1, 4}}}) {
      int64_t W = 0;
      for (int64_t w : widths) W += w;
      std::vector<In> in{rnd(Role::frozen, {rows, W}, 80)};
      INFO("rows " << rows << ", " << widths.size() << " parts");
      const OpFn split = [w = widths](auto& a) { return ops::split_columns(a[0], w); };
      for (DType dt : {DType::f32, DType::bf16}) {
        INFO("dtype " << std::string(dtype_name(dt)));
        const Result cpu = run(be.cpu, dt, in, split), gpu = run(be.gpu, dt, in, split);
        REQUIRE(gpu.outs.size() == widths.size());
        for (size_t p = 0; p < widths.size(); ++p) CHECK(bitwise_equal(gpu.outs[p], cpu.outs[p]));
      }
    }
    std::vector<In> in{ints({2, 3}, {1, 2, 3, 4, 5, 6})};
    Result r = run(be.gpu, DType::f32, in, [](auto& a) { return ops::split_columns(a[0], {2, 1}); });
    CHECK(r.outs[0] == std::vector<float>{1, 2, 4, 5});
    CHECK(r.outs[1] == std::vector<float>{3, 6});
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

  TEST_CASE("drop_group_heads and with_group_heads: CUDA equals CPU bit for bit, rows of 16, 20, 6 and 4 bytes") {
    REQUIRE_GPU();
    Backends be;
    // Row widths pick the strided copy's and fill's unit (16, 4, 2 bytes) and a view one row in
    // gives unaligned starts; the backward fills the dropped rows' gradient with zeros.
    struct Case {
      Shape shape;
      int64_t period;
      DType dt;
    };
    for (Case c : {Case{{12, 8}, 3, DType::bf16}, Case{{12, 5}, 4, DType::f32}, Case{{8, 3}, 2, DType::bf16},
                   Case{{10, 4}, 5, DType::f32}}) {
      INFO("x " << c.shape.str() << " period " << c.period << " " << std::string(dtype_name(c.dt)));
      for (Role role : {Role::trainable, Role::nonleaf}) {
        std::vector<In> in{rnd(role, c.shape, 80)};
        const int64_t p = c.period;
        const OpFn drop = [p](auto& a) { return std::vector<Tensor>{ops::drop_group_heads(a[0], p)}; };
        CHECK(identical(run(be.gpu, c.dt, in, drop), run(be.cpu, c.dt, in, drop)));
      }
      // Fill byte 0 (the float tensors' head rows): the same value in f32 (the CPU's) and bf16.
      const Shape wider{c.shape[0] + 1, c.shape[1]};
      std::vector<In> in{rnd(Role::frozen, wider, 81)};
      const int64_t p = c.period, rows = c.shape[0] / c.period * (c.period - 1);
      const OpFn put = [p, rows](auto& a) {
        return std::vector<Tensor>{ops::with_group_heads(a[0].rows(1, 1 + rows), p, 0)};
      };
      CHECK(identical(run(be.gpu, c.dt, in, put), run(be.cpu, c.dt, in, put)));
    }
    // i32 labels, as the drafter's loss puts them back (fill 0xFF: -1 in the head rows), and dropped.
    std::vector<In> ids{ints({6}, {4, 5, 6, 7, 8, 9})};
    const OpFn put_ids = [](auto& a) { return std::vector<Tensor>{ops::with_group_heads(a[0], 3, 0xFF)}; };
    Result r = run(be.gpu, DType::f32, ids, put_ids);
    CHECK(r.outs[0] == std::vector<float>{-1, 4, 5, -1, 6, 7, -1, 8, 9});
    CHECK(identical(r, run(be.cpu, DType::f32, ids, put_ids)));
    std::vector<In> labels{ints({9}, {-1, 4, 5, -1, 6, 7, -1, 8, 9})};
    const OpFn drop_ids = [](auto& a) { return std::vector<Tensor>{ops::drop_group_heads(a[0], 3)}; };
    CHECK(run(be.gpu, DType::f32, labels, drop_ids).outs[0] == std::vector<float>{4, 5, 6, 7, 8, 9});
  }

  TEST_CASE("linear_cross_entropy: CUDA equals CPU for loss, ce, argmax, dh and dweight") {
    REQUIRE_GPU();
    Backends be;
    struct Case {
      int64_t R, H, V, chunk;
      bool train_weight;
    };
    // Wide rows with a frozen lm_head (training writes dlogits over the logits): many packs a
    // thread at 40000, and the qwen3 vocabulary, 151936.
    for (Case c : {Case{37, 16, 50, 8, false}, Case{5, 16, 320, 64, true}, Case{37, 8, 50, 1, true},
                   Case{64, 12, 321, 16, true}, Case{9, 8, 40000, 4, false}, Case{6, 16, 151936, 4, false}}) {
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
    // Small integers make every logit exact in f32 and bf16, whatever the summation order. V = 9:
    // one logit at a time; V = 24: packs (of 8 bf16, 4 f32), ties between packs.
    for (const int64_t V : {9, 24}) {
      INFO("V " << V);
      const int64_t R = 40, H = 3;
      std::mt19937_64 rng(5);
      const auto [hv, wv] = integer_ce_weights(R, H, V, rng);  // row 0: every logit 0, argmax 0
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
    const KernelPaths paths = each_kernel_paths();  // on an H100: the CE rows read once by clusters, then twice
    KernelPathsScope chosen(paths);
    expect_kernel_paths(paths);
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
