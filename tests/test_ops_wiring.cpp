// The ops' wiring (runtime/ops/): shape and dtype checks that must refuse, and gradients that must be
// added to what an input's gradient already holds, against finite differences and hand-counted values.
#include <cmath>

#include "graphs/program.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

TEST_SUITE("ops-wiring") {
  TEST_CASE("add and mul refuse shapes that differ but hold as many elements") {
    CpuRuntime rt;
    const Tensor a = randn({2, 3}, 1), b = randn({3, 2}, 2), c = randn({6}, 3);
    CHECK_ERROR(ops::add(a, b), "add: shapes differ: f32[2,3] and f32[3,2]");
    CHECK_ERROR(ops::add(a, c), "add: shapes differ: f32[2,3] and f32[6]");
    CHECK_ERROR(ops::mul(a, b), "mul: shapes differ: f32[2,3] and f32[3,2]");
  }

  TEST_CASE("concat refuses inputs that differ in a dim after the concatenated one") {
    CpuRuntime rt;
    const Tensor a = randn({2, 3}, 1);
    CHECK_ERROR(ops::concat(a, randn({2, 2}, 2), 0), "differ in dim 1; they must agree on every dim except the concatenated one (0)");
    CHECK_ERROR(ops::concat(randn({2, 3, 4}, 3), randn({2, 5, 2}, 4), 1), "differ in dim 2");
  }

  TEST_CASE("drop_group_heads backward adds to a gradient that already holds one") {
    CpuRuntime rt;
    // Rows 0 and 2 of x (period 2) are dropped: sum(drop(x)) has gradient 1 on rows 1 and 3, 0 on 0 and 2.
    Tensor x = param({4, 2}, 1);
    for (int pass = 1; pass <= 2; ++pass) {
      backward(ops::sum(ops::drop_group_heads(x, 2)));  // a leaf's gradient accumulates across backward calls
      CHECK(x.grad().to_floats() == std::vector<float>{0, 0, float(pass), float(pass), 0, 0, float(pass), float(pass)});
    }
    // a used twice: one path's gradient reaches it first, the other's must be added to it.
    Tensor a = param({6, 3}, 5);
    check_gradients([&] { return ops::add(ops::drop_group_heads(a, 3), ops::drop_group_heads(ops::scale(a, 2.0f), 3)); },
                    {a});
  }

  TEST_CASE("with_group_heads refuses a tensor that requires grad (it records no backward)") {
    CpuRuntime rt;
    const Tensor y = param({4, 2}, 1);
    CHECK_ERROR(ops::with_group_heads(y, 2, 0), "with_group_heads: f32[4,2] requires grad");
    NoGrad no_grad;
    CHECK(ops::with_group_heads(y, 2, 0).shape() == Shape{8, 2});  // 4 groups of one kept row, heads back
  }

  TEST_CASE("linear_cross_entropy backward adds dh (and dweight) to what the inputs' gradients hold") {
    CpuRuntime rt;
    const int64_t R = 7, H = 5, V = 11;
    const Tensor labels = Tensor::from_ints({R}, {3, 0, 10, -1, 7, 7, 1});
    const Tensor rw = Tensor::from_floats({R}, {0.2f, 0.1f, 0.15f, 0.0f, 0.25f, 0.2f, 0.1f});
    // h (and w) also feed a sum of squares, so one path's gradient reaches them first and the
    // other's must be added to it, whichever order backward takes.
    SUBCASE("frozen lm_head: dh made in the forward, scaled in backward") {
      Tensor h = param({R, H}, 1), w = randn({V, H}, 2, 0.5f);
      for (bool ce_first : {true, false}) {  // recorded, and added, before or after the other path
        CAPTURE(ce_first);
        check_gradients(
            [&] {
              if (ce_first) {
                Tensor ce = ops::linear_cross_entropy(h, w, labels, rw, 3).loss;
                return ops::add(ce, ops::sum(ops::mul(h, h)));
              }
              Tensor squares = ops::sum(ops::mul(h, h));
              return ops::add(squares, ops::linear_cross_entropy(h, w, labels, rw, 3).loss);
            },
            {h});
      }
    }
    SUBCASE("trainable lm_head: dh and dweight recomputed per chunk in backward") {
      Tensor h = param({R, H}, 3), w = param({V, H}, 4, 0.5f);
      check_gradients(
          [&] {
            Tensor ce = ops::linear_cross_entropy(h, w, labels, rw, 3).loss;
            return ops::add(ops::add(ce, ops::sum(ops::mul(h, h))), ops::sum(ops::mul(w, w)));
          },
          {h, w});
    }
  }

  TEST_CASE("causal_attention refuses k and v of another batch size, and a v that is not f32") {
    CpuRuntime rt;
    const Tensor q = randn({1, 8, 4, 16}, 1), k = randn({1, 8, 2, 16}, 2);
    const Tensor k2 = randn({2, 8, 2, 16}, 3), v2 = randn({2, 8, 2, 16}, 4);
    CHECK_ERROR(ops::causal_attention(q, k2, v2, 0.25f), "must be [B, S, nkv, hd] = [1, 8, nkv, 16]");
    const Tensor v_int = Tensor::from_ints({1, 8, 2, 16}, std::vector<int32_t>(size_t(8 * 2 * 16), 1));
    CHECK_ERROR(ops::causal_attention(q, k, v_int, 0.25f), "v is i32[1,8,2,16] but must be f32");
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

  TEST_CASE("swiglu backward: up's gradient takes up's storage when only gate is still held, and gate's the other way") {
    // The planned arena of linear -> swiglu -> loss -> backward with the caller holding gate, up,
    // both or neither: a dead input lends its storage to its own gradient, so holding only one
    // input costs at least one (64, 256) f32 buffer less than holding both, whichever it is.
    CpuRuntime rt;
    Tensor x = randn({64, 16}, 1), w_gate = param({256, 16}, 2, 0.2f), w_up = param({256, 16}, 3, 0.2f);
    auto arena = [&](bool hold_gate, bool hold_up) {
      return plan_program(rt.ctx, "swiglu", [&] {
               std::vector<Tensor> held;
               Tensor gate = ops::linear(x, w_gate), up = ops::linear(x, w_up);  // (64, 256) each
               if (hold_gate) held.push_back(gate);
               if (hold_up) held.push_back(up);
               Tensor y = ops::swiglu(gate, up);
               gate = Tensor();
               up = Tensor();
               backward(ops::sum(ops::mul(y, y)));
               held.clear();
             }).arena_bytes;
    };
    const size_t both = arena(true, true), only_gate = arena(true, false), only_up = arena(false, true),
                 none = arena(false, false);
    INFO("arena: both " << both << ", only gate " << only_gate << ", only up " << only_up << ", none " << none);
    const size_t buffer = 64 * 256 * sizeof(float);
    CHECK(only_gate + buffer <= both);
    CHECK(only_up + buffer <= both);
    CHECK(none + buffer <= both);
  }
}
