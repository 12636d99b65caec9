// CUDA causal attention (dflash's kernel), dflash_prepare / dflash_metrics and cast against their CPU
// definitions, normalize_weights / weighted_accuracy against their documented sums: attention within
// tolerance (every kernel path), prepare and metrics and cast bit for bit,
// determinism, a recorded attention program replaying like eager, and the CUDA-only refusals.
// Suite "gpu-misc": it needs a GPU and fails without one.
#ifdef DFLASH_CUDA
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <random>

#include "graphs/program.h"
#include "model/dflash_ops.h"
#include "runtime/ops/common.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/target_attention.h"
#include "tests/gpu_test_util.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {

std::vector<uint32_t> f32_bits(const Tensor& t) {
  std::vector<uint32_t> b(size_t(t.numel()));
  t.copy_to_host(b.data(), b.size() * 4);
  return b;
}
std::vector<uint16_t> bf16_bits(const Tensor& t) {
  std::vector<uint16_t> b(size_t(t.numel()));
  t.copy_to_host(b.data(), b.size() * 2);
  return b;
}
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

// ---- causal attention ----

struct AttnCase {
  int64_t B, S, nh, nkv, hd;
};

struct AttnInputs {
  std::vector<float> q, k, v;
};
AttnInputs attn_inputs(const AttnCase& c, uint64_t seed) {
  return {random_floats(size_t(c.B * c.S * c.nh * c.hd), seed), random_floats(size_t(c.B * c.S * c.nkv * c.hd), seed + 1),
          random_floats(size_t(c.B * c.S * c.nkv * c.hd), seed + 2)};
}

// The op on ctx with inputs rounded to dt (f32 on the CPU); offset_elems > 0 puts every tensor at
// that many elements into a larger buffer (unaligned views take the CUDA-core path).
std::vector<float> run_attention(Context& ctx, DType dt, const AttnCase& c, const AttnInputs& in,
                                 int64_t offset_elems = 0) {
  ContextScope scope(ctx);
  const DType type = ctx.device().is_cpu() ? DType::f32 : dt;
  auto make = [&](const Shape& s, const std::vector<float>& v) {
    if (offset_elems == 0) return make_float(s, round_to(dt, v), type);
    std::vector<float> padded(size_t(offset_elems), 0.0f);
    std::vector<float> r = round_to(dt, v);
    padded.insert(padded.end(), r.begin(), r.end());
    return make_float({int64_t(padded.size())}, padded, type).rows(offset_elems, int64_t(padded.size())).reshape(s);
  };
  const Tensor q = make({c.B, c.S, c.nh, c.hd}, in.q), k = make({c.B, c.S, c.nkv, c.hd}, in.k),
               v = make({c.B, c.S, c.nkv, c.hd}, in.v);
  const Tensor out = ops::causal_attention(q, k, v, float(1.0 / std::sqrt(double(c.hd))));
  REQUIRE(out.shape() == q.shape());
  REQUIRE(out.dtype() == type);
  return out.to_floats();
}

double attention_tolerance(DType dt) { return dt == DType::f32 ? 1e-4 : 2e-2; }

void check_attention(Backends& be, const AttnCase& c, int64_t offset_elems = 0) {
  INFO("B " << c.B << " S " << c.S << " nh " << c.nh << " nkv " << c.nkv << " hd " << c.hd << " offset "
            << offset_elems);
  const AttnInputs in = attn_inputs(c, uint64_t(c.S * 1000 + c.hd * 10 + c.nh));
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO("dtype " << std::string(dtype_name(dt)));
    const std::vector<float> gpu = run_attention(be.gpu, dt, c, in, offset_elems);
    const std::vector<float> cpu = run_attention(be.cpu, dt, c, in);
    const double err = rel_err(gpu, cpu);
    INFO("relative error " << err);
    CHECK(err <= attention_tolerance(dt));
  }
}

// ---- dflash_prepare / dflash_metrics ----

struct Batch {
  int64_t B, S, N, bs;
  std::vector<int32_t> ids, mask, anchors, keep;
};

// Random ids and loss mask; anchors anywhere in [0, S), several within bs of the end (so slots run
// past S), every third block dropped (keep = 0).
Batch random_batch(int64_t B, int64_t S, int64_t N, int64_t bs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Batch b{B, S, N, bs, {}, {}, {}, {}};
  for (int64_t i = 0; i < B * S; ++i) {
    b.ids.push_back(int32_t(rng() % 1000));
    b.mask.push_back(rng() % 4 != 0 ? 1 : 0);
  }
  for (int64_t i = 0; i < B * N; ++i) {
    const int64_t near_end = S - 1 - int64_t(rng() % uint64_t(std::max<int64_t>(bs - 1, 1)));  // its last slot >= S
    const int64_t a = i % 4 == 1 ? near_end : int64_t(rng() % uint64_t(S));
    b.anchors.push_back(int32_t(a));
    b.keep.push_back(i % 3 == 2 ? 0 : 1);
  }
  return b;
}

struct PreparedHost {
  std::vector<int32_t> noise_ids, q_pos, k_pos, labels;
  std::vector<uint32_t> w, lw;  // bits
};

PreparedHost prepare_on(Context& ctx, const Batch& b, double gamma) {
  ContextScope scope(ctx);
  DFlashPrepared p = dflash_prepare(Tensor::from_ints({b.B, b.S}, b.ids), Tensor::from_ints({b.B, b.S}, b.mask),
                                    Tensor::from_ints({b.B, b.N}, b.anchors), Tensor::from_ints({b.B, b.N}, b.keep),
                                    b.bs, 999, gamma);
  return {p.noise_ids.to_ints(), p.q_pos.to_ints(), p.k_pos.to_ints(), p.labels.to_ints(), f32_bits(p.w),
          f32_bits(p.lw)};
}

// dflash_metrics on ctx over the given (host) prepared tensors, ce and argmax; the 7 sums' bits.
std::vector<uint32_t> metrics_on(Context& ctx, const Batch& b, const PreparedHost& ph, const std::vector<float>& ce,
                                 const std::vector<int32_t>& argmax) {
  ContextScope scope(ctx);
  const int64_t T = b.N * b.bs;
  DFlashPrepared p;
  p.labels = Tensor::from_ints({b.B, T}, ph.labels);
  p.w = Tensor::from_host({b.B, T}, DType::f32, ph.w.data());
  p.lw = Tensor::from_host({b.B, T}, DType::f32, ph.lw.data());
  const Tensor out = dflash_metrics(Tensor::from_floats({b.B * T}, ce), Tensor::from_ints({b.B * T}, argmax), p,
                                    Tensor::from_ints({b.B, b.N}, b.keep), b.bs);
  return f32_bits(out);
}

// ---- cast ----

// Random floats of every magnitude plus the special cases of rounding: exact ties (to even, both
// ways), values that round up into the next binade or to infinity, subnormals, signed zeros,
// infinities and NaNs with assorted payloads (quiet, signalling, negative).
std::vector<float> cast_inputs() {
  std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0xbf818000u, 0x3f80ffffu, 0x3fffffffu,
                                0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x00000001u, 0x80000001u,
                                0x00008000u, 0x00018000u, 0x007fffffu, 0x00000000u, 0x80000000u, 0x7f800000u,
                                0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu, 0xff800001u,
                                0x7fc12345u, 0x7f80ffffu};
  std::mt19937_64 rng(77);
  for (int i = 0; i < 5000; ++i) bits.push_back(uint32_t(rng()));
  for (int i = 0; i < 1000; ++i) bits.push_back((uint32_t(rng()) & 0xffff0000u) | 0x8000u);  // ties
  std::vector<float> v;
  for (uint32_t u : bits) v.push_back(float_of(u));
  for (float x : random_floats(3001, 78, 3.0f)) v.push_back(x);
  return v;
}

}  // namespace

TEST_SUITE("gpu-misc") {
  TEST_CASE("causal_attention: CUDA equals CPU (GQA 1/2/4; S 1, 37, 150, 600; hd 64, 128; f32 and bf16)") {
    REQUIRE_GPU();
    TargetAttentionScope own(TargetAttention::own);  // dflash's kernel; cuDNN's: suite gpu-cudnn
    Backends be;
    for (int64_t hd : {64, 128})
      for (int64_t group : {1, 2, 4})
        for (int64_t S : {1, 37, 150, 600}) check_attention(be, AttnCase{2, S, 2 * group, 2, hd});
  }

  TEST_CASE("causal_attention: every CUDA kernel path (hd 8..256, unaligned views) equals the CPU") {
    REQUIRE_GPU();
    TargetAttentionScope own(TargetAttention::own);  // dflash's kernel; cuDNN's: suite gpu-cudnn
    Backends be;
    for (int64_t hd : {8, 16, 40, 96, 256}) check_attention(be, AttnCase{1, 150, 4, 2, hd});
    check_attention(be, AttnCase{1, 300, 2, 1, 256});  // several query tiles at the 64-row tile size
    check_attention(be, AttnCase{2, 129, 4, 1, 128});  // a 1-row last query tile
    // One element off 16-byte alignment: the CUDA-core kernel in f32 and in bf16.
    check_attention(be, AttnCase{2, 70, 4, 2, 64}, 1);
    check_attention(be, AttnCase{1, 33, 2, 2, 256}, 3);
  }

  TEST_CASE("causal_attention on CUDA is deterministic: the same call twice gives the same bits") {
    REQUIRE_GPU();
    TargetAttentionScope own(TargetAttention::own);  // dflash's kernel; cuDNN's: suite gpu-cudnn
    Backends be;
    const AttnCase c{2, 600, 8, 2, 128};
    const AttnInputs in = attn_inputs(c, 5);
    for (DType dt : {DType::f32, DType::bf16}) {
      INFO("dtype " << std::string(dtype_name(dt)));
      CHECK(bitwise_equal(run_attention(be.gpu, dt, c, in), run_attention(be.gpu, dt, c, in)));
    }
  }

  TEST_CASE("copy_ between GPU tensors moves every byte: 16-byte packs, a tail, unaligned views, in a graph") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    std::vector<uint16_t> host(4099);
    for (size_t i = 0; i < host.size(); ++i) host[i] = uint16_t(i * 2654435761u >> 7);
    const Tensor src = Tensor::from_host({int64_t(host.size())}, DType::bf16, host.data());
    // {elements, source offset, destination offset} in elements: packs only, packs and a tail,
    // and sources or destinations off 16-byte alignment (byte by byte).
    for (auto [n, so, d_off] : {std::array<int64_t, 3>{4096, 0, 0}, {4093, 0, 0}, {4095, 1, 0}, {4091, 0, 3}, {7, 5, 1}}) {
      INFO("n " << n << " source offset " << so << " destination offset " << d_off);
      const Tensor dst_storage = Tensor::persistent({4099}, DType::bf16);
      ops::fill_(dst_storage, -1.0f);
      const Tensor s = ops::detail::view_of(src, {n}, size_t(so) * 2);
      const Tensor d = ops::detail::view_of(dst_storage, {n}, size_t(d_off) * 2);
      ops::copy_(d, s);
      ctx.synchronize();
      std::vector<uint16_t> got = bf16_bits(dst_storage), want(4099, 0xBF80);  // bf16 -1
      std::copy(host.begin() + so, host.begin() + so + n, want.begin() + d_off);
      CHECK(got == want);
    }
    const Tensor out = Tensor::persistent({4093}, DType::bf16);
    const Tensor tail = ops::detail::view_of(src, {4093}, 2 * 6);
    ctx.reserve_arena(std::max(ctx.arena_bytes(), plan_program(ctx, "copy", [&] { ops::copy_(out, tail); }).arena_bytes));
    Program p = record_program(ctx, "copy", [&] { ops::copy_(out, tail); });
    ops::fill_(out, 0.0f);
    p.replay();
    ctx.synchronize();
    CHECK(bf16_bits(out) == std::vector<uint16_t>(host.begin() + 6, host.begin() + 6 + 4093));
  }

  TEST_CASE("causal_attention recorded as a CUDA graph replays bit for bit like eager") {
    REQUIRE_GPU();
    TargetAttentionScope own(TargetAttention::own);  // dflash's kernel; cuDNN's: suite gpu-cudnn
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    const AttnCase c{2, 300, 8, 2, 128};
    const AttnInputs in = attn_inputs(c, 9);
    for (DType dt : {DType::bf16, DType::f32}) {
      INFO("dtype " << std::string(dtype_name(dt)));
      const Tensor q = make_float({c.B, c.S, c.nh, c.hd}, in.q, dt), k = make_float({c.B, c.S, c.nkv, c.hd}, in.k, dt),
                   v = make_float({c.B, c.S, c.nkv, c.hd}, in.v, dt);
      const Tensor out = Tensor::persistent(q.shape(), dt);
      auto body = [&] {
        // An attention over attention's output keeps a temporary alive across two kernels.
        const Tensor a = ops::causal_attention(q, k, v, 0.125f);
        ops::copy_(out, ops::causal_attention(a, k, v, 0.125f));
      };
      body();
      ctx.synchronize();
      const std::vector<float> eager = out.to_floats();
      REQUIRE(max_abs(eager) > 0);
      const std::string name = std::string("attention-") + dtype_name(dt);
      ctx.reserve_arena(std::max(ctx.arena_bytes(), plan_program(ctx, name, body).arena_bytes));
      Program p = record_program(ctx, name, body);
      const std::vector<float> nan(size_t(out.numel()), NAN);
      ops::copy_(out, make_float(out.shape(), nan, dt));
      ctx.synchronize();
      p.replay();
      ctx.synchronize();
      CHECK(bitwise_equal(out.to_floats(), eager));
    }
  }

  TEST_CASE("causal_attention on CUDA refuses odd head dims and mixed or integer dtypes") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    auto t = [](const Shape& s, DType dt) { return make_float(s, random_floats(size_t(s.numel()), 1), dt); };
    CHECK_THROWS_WITH_AS(ops::causal_attention(t({1, 4, 2, 12}, DType::bf16), t({1, 4, 2, 12}, DType::bf16),
                                               t({1, 4, 2, 12}, DType::bf16), 0.3f),
                         doctest::Contains("head dim 12; the CUDA kernel needs a multiple of 8"), Error);
    CHECK_THROWS_WITH_AS(ops::causal_attention(t({1, 4, 2, 16}, DType::bf16), t({1, 4, 2, 16}, DType::f32),
                                               t({1, 4, 2, 16}, DType::bf16), 0.25f),
                         doctest::Contains("must share one dtype"), Error);
    const Tensor iq = Tensor::from_ints({1, 1, 1, 8}, std::vector<int32_t>(8, 1));
    CHECK_THROWS_WITH_AS(ops::causal_attention(iq, iq, iq, 0.25f), doctest::Contains("but must be f32 or bf16"), Error);
  }

  TEST_CASE("dflash_prepare: CUDA equals CPU bit for bit (keep = 0, anchors near the end, gamma 0, 4, 7)") {
    REQUIRE_GPU();
    Backends be;
    for (auto [B, S, N, bs] : {std::array<int64_t, 4>{3, 40, 5, 4}, {2, 100, 7, 16}, {1, 17, 3, 16}, {4, 300, 40, 8}})
      for (double gamma : {0.0, 4.0, 7.0}) {
        INFO("B " << B << " S " << S << " N " << N << " bs " << bs << " gamma " << gamma);
        const Batch b = random_batch(B, S, N, bs, uint64_t(S + N + bs));
        const PreparedHost g = prepare_on(be.gpu, b, gamma), c = prepare_on(be.cpu, b, gamma);
        CHECK(g.noise_ids == c.noise_ids);
        CHECK(g.q_pos == c.q_pos);
        CHECK(g.k_pos == c.k_pos);
        CHECK(g.labels == c.labels);
        CHECK(g.w == c.w);
        CHECK(g.lw == c.lw);
        CHECK(std::count(c.labels.begin(), c.labels.end(), -1) > 0);  // the batch did run past S
        CHECK(prepare_on(be.gpu, b, gamma).lw == g.lw);               // and repeats exactly
      }
  }

  TEST_CASE("dflash_metrics: CUDA equals CPU bit for bit and is deterministic") {
    REQUIRE_GPU();
    Backends be;
    // Elements B * N * bs: 60, 4800 (tiles of 2048 and a partial one), 16, and 8192 (4096:512's).
    for (auto [B, S, N, bs] : {std::array<int64_t, 4>{3, 40, 5, 4}, {4, 600, 75, 16}, {2, 50, 1, 8}, {1, 4096, 512, 16}})
      for (double gamma : {0.0, 4.0}) {
        INFO("B " << B << " N " << N << " bs " << bs << " gamma " << gamma);
        const Batch b = random_batch(B, S, N, bs, uint64_t(7 * S + bs));
        const PreparedHost ph = prepare_on(be.cpu, b, gamma);
        // ce of every magnitude; argmax equal to the label 70% of the time (runs of hits).
        std::mt19937_64 rng(uint64_t(B * N));
        std::vector<float> ce;
        std::vector<int32_t> argmax;
        for (size_t i = 0; i < ph.labels.size(); ++i) {
          ce.push_back(std::exp(float(int(rng() % 2000) - 1000) / 100.0f) * float(rng() % 1000) / 999.0f);
          argmax.push_back(rng() % 10 < 7 ? ph.labels[i] : int32_t(rng() % 1000));
        }
        const std::vector<uint32_t> g = metrics_on(be.gpu, b, ph, ce, argmax), c = metrics_on(be.cpu, b, ph, ce, argmax);
        for (size_t i = 0; i < c.size(); ++i) {
          INFO("sum " << i << ": CUDA " << float_of(g[i]) << ", CPU " << float_of(c[i]));
          CHECK(g[i] == c[i]);
        }
        if (B * N > 10) {
          CHECK(float_of(c[2]) > 0);               // some hits
          CHECK(float_of(c[4]) > float_of(c[5]));  // some accepted runs
        }
        CHECK(metrics_on(be.gpu, b, ph, ce, argmax) == g);
      }
  }

  TEST_CASE("cast on CUDA: f32 -> bf16 bit for bit like f32_to_bf16 (ties, NaN, Inf), bf16 -> f32 exact") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    const std::vector<float> v = cast_inputs();
    const int64_t n = int64_t(v.size());
    std::vector<uint16_t> want(v.size());
    for (size_t i = 0; i < v.size(); ++i) want[i] = f32_to_bf16(v[i]);
    const Tensor x = Tensor::from_floats({n}, v);
    const Tensor y = ops::cast(x, DType::bf16);
    CHECK(y.dtype() == DType::bf16);
    CHECK(bf16_bits(y) == want);
    // Unaligned (one element in) and odd-length views take the scalar path.
    const Tensor ys = ops::cast(x.rows(1, n), DType::bf16);
    CHECK(bf16_bits(ys) == std::vector<uint16_t>(want.begin() + 1, want.end()));

    // Every bf16 pattern to f32 exactly, and back: identical except that a NaN turns quiet (as on the host).
    std::vector<uint16_t> all(65536);
    for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
    const Tensor h = Tensor::from_host({65536}, DType::bf16, all.data());
    const Tensor f = ops::cast(h, DType::f32);
    CHECK(f.dtype() == DType::f32);
    const std::vector<uint32_t> fb = f32_bits(f);
    std::vector<uint16_t> back_want(all.size());
    bool exact = true;
    for (size_t i = 0; i < all.size(); ++i) {
      exact = exact && fb[i] == uint32_t(all[i]) << 16;
      back_want[i] = f32_to_bf16(bf16_to_f32(all[i]));
    }
    CHECK(exact);
    CHECK(bf16_bits(ops::cast(f, DType::bf16)) == back_want);
    CHECK(f32_bits(ops::cast(h.rows(3, 65536), DType::f32)) == std::vector<uint32_t>(fb.begin() + 3, fb.end()));
    // Same-dtype casts are copies into new tensors.
    const Tensor xc = ops::cast(x, DType::f32), hc = ops::cast(h, DType::bf16);
    CHECK(xc.raw() != x.raw());
    CHECK(f32_bits(xc) == f32_bits(x));
    CHECK(bf16_bits(hc) == all);
    CHECK_THROWS_WITH_AS(ops::cast(Tensor::from_ints({2}, {1, 2}), DType::f32),
                         doctest::Contains("only f32 and bf16 convert into each other"), Error);
  }

  TEST_CASE("cast backward on CUDA: dx += dy converted to dx's dtype, accumulated") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    const int64_t n = 1001;
    const std::vector<float> xv = random_floats(size_t(n), 1), dyv = random_floats(size_t(n), 2);
    // An f32 leaf cast to bf16: its f32 gradient receives the bf16 dy exactly, twice over two passes.
    Tensor x = Tensor::from_floats({n}, xv);
    x.set_requires_grad(true);
    const Tensor dy = make_float({n}, dyv, DType::bf16);
    const std::vector<float> dy_rounded = round_to(DType::bf16, dyv);
    for (int pass = 1; pass <= 2; ++pass) {
      const Tensor y = ops::cast(x, DType::bf16);
      REQUIRE(y.requires_grad());
      run_backward({y}, {dy});
      std::vector<float> want(dy_rounded);
      for (float& w : want) w *= float(pass);
      CHECK(bitwise_equal(x.grad().to_floats(), want));
    }
    // A bf16 non-leaf cast to f32: its bf16 gradient holds dy rounded to bf16, which reaches the
    // f32 leaf through scale(., 1).
    Tensor xb = make_float({n}, xv, DType::bf16);
    xb.set_requires_grad(true);
    const Tensor y = ops::cast(ops::scale(xb, 1.0f), DType::f32);
    CHECK(y.dtype() == DType::f32);
    run_backward({y}, {Tensor::from_floats({n}, dyv)});
    CHECK(bitwise_equal(xb.grad().to_floats(), dy_rounded));
  }

  TEST_CASE("normalize_weights and weighted_accuracy on CUDA: w / (sum w + eps); hits where w > 0.5 over sum w + eps") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    const float eps = 1e-6f;
    for (const int64_t n : {1, 5, 1000, 4099}) {  // one thread's share to many rounds of the block's stride
      INFO("n " << n);
      const size_t count = static_cast<size_t>(n);
      std::mt19937_64 rng(count);
      std::vector<float> w(count);
      std::vector<int32_t> argmax(count), labels(count);
      double total = 0, hits = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        const uint64_t kind = rng() % 4;  // weight 0, 0.25 (in the total, never a hit), or 1
        w[i] = kind == 0 ? 0.0f : kind == 1 ? 0.25f : 1.0f;
        labels[i] = int32_t(rng() % 5);
        argmax[i] = rng() % 2 ? labels[i] : (labels[i] + 1) % 5;
        total += w[i];
        if (w[i] > 0.5f && argmax[i] == labels[i]) hits += 1;
      }
      const Tensor tw = Tensor::from_floats({n}, w);
      const float accuracy = ops::weighted_accuracy(Tensor::from_ints({n}, argmax), Tensor::from_ints({n}, labels), tw).item();
      CHECK(accuracy == doctest::Approx(hits / (total + eps)).epsilon(1e-6));
      const std::vector<float> normalized = ops::normalize_weights(tw).to_floats();
      double worst = 0;
      for (size_t i = 0; i < w.size(); ++i)
        worst = std::max(worst, std::abs(double(normalized[i]) - double(w[i]) / (total + eps)));
      CHECK(worst <= 1e-6 / (total + eps));
    }
  }
}

#endif  // DFLASH_CUDA
