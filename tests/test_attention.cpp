// DFlash block-sparse attention: forward and backward against a dense masked reference in double,
// backward against finite differences, dropped blocks, the visited-tile count and every error (a saved
// output or lse that does not fit the call included).
#include <algorithm>
#include <cmath>
#include <set>

#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

namespace {

struct Dims {
  int64_t B, S, N, bs, nh, nkv, hd, key_tile;
  int64_t T() const { return N * bs; }
  int64_t keys() const { return S + T(); }
  float scale() const { return float(1.0 / std::sqrt(double(hd))); }
};

// The mask of docs/MODEL.md, written out: block a sees context key j < anchor and its own draft keys.
bool visible(const Dims& c, const std::vector<int32_t>& anchors, const std::vector<int32_t>& keep, int64_t b,
             int64_t a, int64_t j) {
  if (keep[size_t(b * c.N + a)] == 0) return false;
  if (j < c.S) return j < anchors[size_t(b * c.N + a)];
  return (j - c.S) / c.bs == a;
}

struct Reference {
  std::vector<double> out, dq, dk, dv;
};

// Dense attention over all S+T keys with the explicit mask, then the textbook backward, in double.
Reference dense_reference(const Dims& c, const std::vector<float>& q, const std::vector<float>& k,
                          const std::vector<float>& v, const std::vector<float>& dout,
                          const std::vector<int32_t>& anchors, const std::vector<int32_t>& keep) {
  const int64_t T = c.T(), L = c.keys(), hd = c.hd, group = c.nh / c.nkv;
  const double scale = c.scale();
  Reference r;
  r.out.assign(q.size(), 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  auto qi = [&](int64_t b, int64_t t, int64_t h) { return size_t(((b * T + t) * c.nh + h) * hd); };
  auto kj = [&](int64_t b, int64_t j, int64_t g) { return size_t(((b * L + j) * c.nkv + g) * hd); };
  std::vector<double> p(static_cast<size_t>(L));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.nh; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t a = t / c.bs, g = h / group;
        double m = -INFINITY;
        for (int64_t j = 0; j < L; ++j) {
          p[size_t(j)] = -INFINITY;
          if (!visible(c, anchors, keep, b, a, j)) continue;
          double s = 0;
          for (int64_t e = 0; e < hd; ++e) s += double(q[qi(b, t, h) + size_t(e)]) * k[kj(b, j, g) + size_t(e)];
          p[size_t(j)] = s * scale;
          m = std::max(m, p[size_t(j)]);
        }
        if (m == -INFINITY) continue;  // sees nothing: output and gradients stay 0
        double z = 0;
        for (double& x : p) z += x = std::exp(x - m);
        for (double& x : p) x /= z;
        double* o = &r.out[qi(b, t, h)];
        for (int64_t j = 0; j < L; ++j)
          for (int64_t e = 0; e < hd; ++e) o[e] += p[size_t(j)] * v[kj(b, j, g) + size_t(e)];
        const float* dO = &dout[qi(b, t, h)];
        double D = 0;
        for (int64_t e = 0; e < hd; ++e) D += dO[e] * o[e];
        for (int64_t j = 0; j < L; ++j) {
          if (p[size_t(j)] == 0) continue;
          double dp = 0;
          for (int64_t e = 0; e < hd; ++e) dp += double(dO[e]) * v[kj(b, j, g) + size_t(e)];
          const double ds = p[size_t(j)] * (dp - D);
          for (int64_t e = 0; e < hd; ++e) {
            r.dq[qi(b, t, h) + size_t(e)] += scale * ds * k[kj(b, j, g) + size_t(e)];
            r.dk[kj(b, j, g) + size_t(e)] += scale * ds * q[qi(b, t, h) + size_t(e)];
            r.dv[kj(b, j, g) + size_t(e)] += p[size_t(j)] * dO[e];
          }
        }
      }
  return r;
}

// The (query block, key tile) pairs with at least one visible key, found from the mask.
int64_t count_visible_tiles(const Dims& c, const std::vector<int32_t>& anchors, const std::vector<int32_t>& keep) {
  int64_t n = 0;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t a = 0; a < c.N; ++a) {
      std::set<int64_t> tiles;  // context tile j / key_tile, or -1 for the draft keys
      for (int64_t j = 0; j < c.keys(); ++j)
        if (visible(c, anchors, keep, b, a, j)) tiles.insert(j < c.S ? j / c.key_tile : -1);
      n += int64_t(tiles.size());
    }
  return n;
}

std::vector<float> to_f32(const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); }

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] - b[i];
  return r;
}

ops::Attention attend(const Dims& c, const Tensor& q, const Tensor& k, const Tensor& v,
                      const std::vector<int32_t>& anchors, const std::vector<int32_t>& keep) {
  Tensor at = Tensor::from_ints({c.B, c.N}, anchors), kt = Tensor::from_ints({c.B, c.N}, keep);
  return ops::dflash_attention(q, k, v, at, kt, c.S, c.bs, c.scale(), c.key_tile);
}

// Runs forward and backward with q, k, v trainable where asked (their gradient buffers start
// non-zero, so accumulation is checked) and compares everything with the dense reference.
void check_against_reference(const Dims& c, const std::vector<int32_t>& anchors, const std::vector<int32_t>& keep,
                             uint64_t seed, bool grad_q = true, bool grad_k = true, bool grad_v = true) {
  CAPTURE(c.B);
  CAPTURE(c.S);
  CAPTURE(c.nh);
  CAPTURE(c.nkv);
  CAPTURE(c.hd);
  CAPTURE(c.key_tile);
  Tensor q = randn({c.B, c.T(), c.nh, c.hd}, seed), k = randn({c.B, c.keys(), c.nkv, c.hd}, seed + 1),
         v = randn({c.B, c.keys(), c.nkv, c.hd}, seed + 2);
  std::vector<std::vector<float>> prefill;
  for (auto [t, on] : {std::pair{&q, grad_q}, {&k, grad_k}, {&v, grad_v}}) {
    prefill.push_back(random_floats(size_t(t->numel()), seed + 3 + prefill.size(), 0.05f));
    if (!on) continue;
    t->set_requires_grad(true);
    t->grad().copy_from_host(prefill.back().data(), prefill.back().size() * 4);
  }
  ops::Attention r = attend(c, q, k, v, anchors, keep);
  Tensor dout = randn(r.out.shape(), seed + 9);
  run_backward({r.out}, {dout});

  Reference ref = dense_reference(c, q.to_floats(), k.to_floats(), v.to_floats(), dout.to_floats(), anchors, keep);
  CHECK(rel_err(r.out.to_floats(), to_f32(ref.out)) < 1e-5);
  if (grad_q) CHECK(rel_err(minus(q.grad().to_floats(), prefill[0]), to_f32(ref.dq)) < 1e-5);
  if (grad_k) CHECK(rel_err(minus(k.grad().to_floats(), prefill[1]), to_f32(ref.dk)) < 1e-5);
  if (grad_v) CHECK(rel_err(minus(v.grad().to_floats(), prefill[2]), to_f32(ref.dv)) < 1e-5);
  CHECK(r.tiles_visited.to_ints()[0] == count_visible_tiles(c, anchors, keep));
}

}  // namespace

TEST_SUITE("attention") {
  TEST_CASE("forward and backward equal a dense masked reference (GQA 1, 2, 4; partial tiles; dropped blocks)") {
    CpuRuntime rt;
    SUBCASE("GQA 1, S = 37 with key_tile 8, anchors at 0, S-bs, on and off tile edges") {
      check_against_reference({2, 37, 3, 4, 2, 2, 8, 8}, {0, 16, 33, 5, 20, 33}, {1, 1, 1, 1, 0, 1}, 10);
    }
    SUBCASE("GQA 2, head dim not a multiple of 8") {
      check_against_reference({2, 37, 3, 4, 4, 2, 12, 8}, {33, 8, 0, 12, 29, 1}, {1, 1, 1, 0, 1, 1}, 20);
    }
    SUBCASE("GQA 4, S = 5 with key_tile 64") {
      check_against_reference({2, 5, 2, 2, 4, 1, 16, 64}, {0, 3, 2, 3}, {1, 1, 1, 0}, 30);
    }
    SUBCASE("anchors outside [0, S] act as clamped") {
      check_against_reference({1, 9, 3, 3, 2, 1, 5, 4}, {-3, 40, 9}, {1, 1, 1}, 40);
    }
    SUBCASE("no context at all (S = 0)") {
      check_against_reference({1, 0, 2, 3, 2, 2, 4, 8}, {0, 0}, {1, 1}, 50);
    }
    SUBCASE("at the limits: block_size 64, key_tile 256, head dim 256") {
      check_against_reference({1, 300, 1, 64, 1, 1, 256, 256}, {270}, {1}, 60);
    }
    SUBCASE("gradients for only some inputs") {
      check_against_reference({2, 37, 3, 4, 4, 2, 12, 8}, {33, 8, 0, 12, 29, 1}, {1, 1, 0, 1, 1, 1}, 70, false,
                              true, false);
      check_against_reference({2, 37, 3, 4, 4, 2, 12, 8}, {33, 8, 0, 12, 29, 1}, {1, 1, 0, 1, 1, 1}, 80, false,
                              false, true);
      check_against_reference({2, 37, 3, 4, 4, 2, 12, 8}, {33, 8, 0, 12, 29, 1}, {1, 1, 0, 1, 1, 1}, 90, true,
                              false, false);
    }
  }

  TEST_CASE("backward equals finite differences with a kept and a dropped block") {
    CpuRuntime rt;
    for (auto [nh, nkv] : {std::pair<int64_t, int64_t>{2, 1}, {2, 2}}) {
      Dims c{2, 6, 2, 2, nh, nkv, 4, 4};
      Tensor q = param({c.B, c.T(), nh, c.hd}, 1), k = param({c.B, c.keys(), nkv, c.hd}, 2),
             v = param({c.B, c.keys(), nkv, c.hd}, 3);
      std::vector<int32_t> anchors{5, 3, 2, 6}, keep{1, 0, 1, 1};
      check_gradients([&] { return attend(c, q, k, v, anchors, keep).out; }, {q, k, v}, {.samples = 48});
    }
  }

  TEST_CASE("dropped blocks: output and dq exactly 0, no NaN, all-dropped sequence leaves k and v untouched") {
    CpuRuntime rt;
    Dims c{2, 10, 2, 3, 2, 1, 4, 4};
    // The dropped blocks' anchors are garbage on purpose: with keep = 0 they must not matter.
    std::vector<int32_t> anchors{7, -100, 1000000, 4}, keep{1, 0, 0, 0};
    Tensor q = param({c.B, c.T(), c.nh, c.hd}, 1, 3.0f), k = param({c.B, c.keys(), c.nkv, c.hd}, 2, 3.0f),
           v = param({c.B, c.keys(), c.nkv, c.hd}, 3);
    ops::Attention r = attend(c, q, k, v, anchors, keep);
    run_backward({r.out}, {randn(r.out.shape(), 4)});
    std::vector<float> out = r.out.to_floats(), dq = q.grad().to_floats(), dk = k.grad().to_floats(),
                       dv = v.grad().to_floats();
    for (const auto* x : {&out, &dq, &dk, &dv})
      for (float f : *x) REQUIRE(std::isfinite(f));
    const size_t row = size_t(c.nh * c.hd);  // floats per query position
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t a = 0; a < c.N; ++a)
        for (int64_t s = 0; s < c.bs; ++s)
          for (size_t e = 0; e < row; ++e) {
            const size_t i = size_t(b * c.T() + a * c.bs + s) * row + e;
            if (keep[size_t(b * c.N + a)]) continue;
            CHECK(out[i] == 0.0f);
            CHECK(dq[i] == 0.0f);
          }
    const size_t per_seq = size_t(c.keys() * c.nkv * c.hd);
    for (size_t i = per_seq; i < 2 * per_seq; ++i) {
      CHECK(dk[i] == 0.0f);
      CHECK(dv[i] == 0.0f);
    }
    // Nothing sees the draft keys of sequence 0's dropped block either.
    for (size_t i = size_t(c.S + c.bs) * size_t(c.nkv * c.hd); i < per_seq; ++i) {
      CHECK(dk[i] == 0.0f);
      CHECK(dv[i] == 0.0f);
    }
    CHECK(r.tiles_visited.to_ints()[0] == count_visible_tiles(c, anchors, keep));
    CHECK(max_abs(out) > 0);
  }

  TEST_CASE("a long context visits only the tiles before the anchors") {
    CpuRuntime rt;
    Dims c{1, 4096, 4, 4, 2, 1, 8, 64};
    std::vector<int32_t> anchors{3, 64, 100, 130}, keep{1, 1, 1, 1};
    const int64_t all = ops::dflash_attention_all_tiles(c.B, c.S, c.N, c.key_tile);
    CHECK(all == 1 * 4 * (64 + 4));
    CHECK(count_visible_tiles(c, anchors, keep) == 2 + 2 + 3 + 4);
    check_against_reference(c, anchors, keep, 100);  // also checks tiles_visited against the mask
    Tensor q = randn({c.B, c.T(), c.nh, c.hd}, 1), k = randn({c.B, c.keys(), c.nkv, c.hd}, 2);
    const int64_t visited = attend(c, q, k, k, anchors, keep).tiles_visited.to_ints()[0];
    CHECK(visited == 11);
    CHECK(visited * 10 < all);
  }

  TEST_CASE("bad arguments are refused with messages that name the fix") {
    CpuRuntime rt;
    // S = 5, block_size 2, N = 2: T = 4 and S+T = 9.
    Tensor q = randn({1, 4, 2, 4}, 1), k = randn({1, 9, 1, 4}, 2), v = randn({1, 9, 1, 4}, 3);
    Tensor anchors = Tensor::from_ints({1, 2}, {1, 3}), keep = Tensor::from_ints({1, 2}, {1, 1});
    auto call = [&](const Tensor& q_, const Tensor& k_, const Tensor& v_, const Tensor& a_, const Tensor& keep_,
                    int64_t S = 5, int64_t bs = 2, int64_t key_tile = 4) {
      return ops::dflash_attention(q_, k_, v_, a_, keep_, S, bs, 0.5f, key_tile);
    };
    CHECK_NOTHROW(call(q, k, v, anchors, keep));
    CHECK_THROWS_WITH_AS(call(q, k, v, anchors, keep, 5, 0), doctest::Contains("block_size is 0 but must be in [1, 64]"),
                         Error);
    CHECK_THROWS_WITH_AS(call(randn({1, 65, 2, 4}, 4), randn({1, 70, 1, 4}, 5), randn({1, 70, 1, 4}, 6),
                              Tensor::from_ints({1, 1}, {0}), Tensor::from_ints({1, 1}, {1}), 5, 65),
                         doctest::Contains("block_size is 65 but must be in [1, 64]"), Error);
    CHECK_THROWS_WITH_AS(call(q, k, v, anchors, keep, 5, 2, 0), doctest::Contains("key_tile is 0 but must be in [1, 256]"),
                         Error);
    CHECK_THROWS_WITH_AS(call(q, k, v, anchors, keep, 5, 2, 257),
                         doctest::Contains("key_tile is 257 but must be in [1, 256]"), Error);
    CHECK_THROWS_WITH_AS(call(q, k, v, anchors, keep, -1), doctest::Contains("context_len is -1; it must be >= 0"),
                         Error);
    CHECK_THROWS_WITH_AS(call(q.reshape({4, 2, 4}), k, v, anchors, keep),
                         doctest::Contains("q is f32[4,2,4] but must be 4-D [B, T, nh, hd]"), Error);
    CHECK_THROWS_WITH_AS(call(q, k.reshape({9, 1, 4}), v, anchors, keep),
                         doctest::Contains("k is f32[9,1,4] but must be 4-D [B, S+T, nkv, hd]"), Error);
    CHECK_THROWS_WITH_AS(call(randn({1, 4, 1, 257}, 7), randn({1, 9, 1, 257}, 8), randn({1, 9, 1, 257}, 9), anchors,
                              keep),
                         doctest::Contains("has head dim 257 but it must be in [1, 256]"), Error);
    CHECK_THROWS_WITH_AS(call(q, k, v, anchors, keep, 5, 3),
                         doctest::Contains("has T = 4 draft queries, not a multiple of block_size 3"), Error);
    CHECK_THROWS_WITH_AS(call(q, k, v, anchors, keep, 6),
                         doctest::Contains("k is f32[1,9,1,4] but must be [B, S+T, nkv, hd] = [1, 10, nkv, 4]"),
                         Error);
    CHECK_THROWS_WITH_AS(call(q, randn({1, 9, 1, 3}, 10), v, anchors, keep),
                         doctest::Contains("but must be [B, S+T, nkv, hd] = [1, 9, nkv, 4]"), Error);
    CHECK_THROWS_WITH_AS(call(q, k, randn({1, 9, 2, 4}, 11), anchors, keep),
                         doctest::Contains("v is f32[1,9,2,4] but must have k's shape [1,9,1,4]"), Error);
    CHECK_THROWS_WITH_AS(call(randn({1, 4, 3, 4}, 12), randn({1, 9, 2, 4}, 13), randn({1, 9, 2, 4}, 14), anchors, keep),
                         doctest::Contains("has 3 query heads and k f32[1,9,2,4] has 2 kv heads; the query heads must "
                                           "be a positive multiple of the kv heads"),
                         Error);
    CHECK_THROWS_WITH_AS(call(q, k, v, Tensor::from_ints({2, 1}, {1, 3}), keep),
                         doctest::Contains("anchors is i32[2,1] but must be [B, N] = [1, 2]"), Error);
    CHECK_THROWS_WITH_AS(call(q, k, v, anchors, Tensor::from_ints({1, 3}, {1, 1, 1})),
                         doctest::Contains("keep is i32[1,3] but must be [B, N] = [1, 2]"), Error);
    CHECK_THROWS_WITH_AS(call(q, k, v, Tensor::from_floats({1, 2}, {1, 3}), keep),
                         doctest::Contains("dflash_attention: anchors is f32[1,2] but must be i32"), Error);
    CHECK_THROWS_WITH_AS(call(q, k, v, anchors, Tensor::from_floats({1, 2}, {1, 1})),
                         doctest::Contains("dflash_attention: keep is f32[1,2] but must be i32"), Error);
    CHECK_THROWS_WITH_AS(call(Tensor::from_ints({1, 4, 2, 4}, std::vector<int32_t>(32, 0)), k, v, anchors, keep),
                         doctest::Contains("dflash_attention: q is i32[1,4,2,4] but must be f32"), Error);
    CHECK_THROWS_WITH_AS(ops::dflash_attention_all_tiles(1, 5, 2, 0),
                         doctest::Contains("dflash_attention_all_tiles: batch 1, context_len 5, n_blocks 2, key_tile 0: "
                                           "the counts must be >= 0 and key_tile >= 1"),
                         Error);
  }

  TEST_CASE("dflash_attention refuses a saved output or lse that does not fit the call") {
    CpuRuntime rt;
    // S = 5, block_size 2, N = 2: T = 4; out [1, 4, 2, 4] and lse [1, 2, 4].
    const Tensor q = randn({1, 4, 2, 4}, 1), k = randn({1, 9, 1, 4}, 2), v = randn({1, 9, 1, 4}, 3);
    const Tensor anchors = Tensor::from_ints({1, 2}, {1, 3}), keep = Tensor::from_ints({1, 2}, {1, 1});
    auto call = [&](const ops::Attention& saved) {
      return ops::dflash_attention(q, k, v, anchors, keep, 5, 2, 0.5f, 4, &saved);
    };
    const ops::Attention first = ops::dflash_attention(q, k, v, anchors, keep, 5, 2, 0.5f, 4);
    CHECK_NOTHROW(call(first));
    const char* msg = "the saved output does not belong to this call";
    CHECK_ERROR(call({first.out, randn({1, 2, 3}, 4), Tensor()}), msg);
    CHECK_ERROR(call({first.out, randn({1, 4, 2}, 5), Tensor()}), msg);
    CHECK_ERROR(call({randn({1, 4, 2, 3}, 6), first.lse, Tensor()}), msg);
    CHECK_ERROR(call({first.out, Tensor(), Tensor()}), msg);
  }

  TEST_CASE("dflash_attention_all_tiles counts a partial context tile as a tile") {
    // Per sequence and block: ceil(S / key_tile) context tiles, then one tile per block's draft keys.
    CHECK(ops::dflash_attention_all_tiles(2, 100, 3, 64) == 2 * 3 * (2 + 3));
    CHECK(ops::dflash_attention_all_tiles(1, 65, 1, 64) == 1 * 1 * (2 + 1));
    CHECK(ops::dflash_attention_all_tiles(1, 64, 2, 64) == 1 * 2 * (1 + 2));
    CHECK(ops::dflash_attention_all_tiles(1, 1, 4, 8) == 1 * 4 * (1 + 4));
    CHECK(ops::dflash_attention_all_tiles(3, 0, 2, 16) == 3 * 2 * (0 + 2));
  }
}
