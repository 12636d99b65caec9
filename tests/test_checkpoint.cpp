// Recompute checkpointing: bitwise-equal gradients and losses with it on or off, a smaller
// arena, and an arena that grows per layer by little more than one segment's input; the recompute
// ladder, and kept values a recomputation adopts (a view at its offset).
#include <algorithm>
#include <map>

#include "graphs/checkpoint.h"
#include "graphs/engine.h"
#include "tests/test_util.h"
#include "train/toy_worker.h"

using namespace dflash;
using namespace dflash::test;

namespace {
const std::vector<Bucket> kBuckets = {{32, 1, 2}, {128, 1, 2}};

size_t arena(const ToyReplica& r, const std::string& program, bool with_checkpointing) {
  for (const ProgramReport& p : r.engine->report())
    if (p.name == program) return with_checkpointing ? p.arena_bytes : p.arena_bytes_without_checkpointing;
  FAIL("no program " << program);
  return 0;
}
}  // namespace

TEST_SUITE("checkpoint") {
  TEST_CASE("checkpointing on and off give bitwise-equal gradients and losses, and the arena shrinks") {
    ToyConfig cfg;
    cfg.layers = 4;
    OptimizerConfig opt;
    for (bool graphs : {false, true}) {
      ToyReplica on(Device::cpu(), cfg, kBuckets, opt, graphs, true);
      ToyReplica off(Device::cpu(), cfg, kBuckets, opt, graphs, false);
      for (int s = 0; s < 6; ++s) {
        size_t bi = size_t(s) % 2;
        for (ToyReplica* r : {&on, &off}) {
          ContextScope scope(r->ctx);
          r->steps[bi]->stage(toy_batch(uint64_t(40 + s), 2, 3, kBuckets[bi].seq, 96));
        }
        on.train(bi);
        off.train(bi);
        CHECK(bitwise_equal(on.grads(), off.grads()));
        ContextScope a(on.ctx);
        float l_on = on.steps[bi]->loss();
        ContextScope b(off.ctx);
        CHECK(l_on == off.steps[bi]->loss());
        on.step_update();
        off.step_update();
      }
      CHECK(bitwise_equal(on.params(), off.params()));
      if (graphs) {
        for (const char* p : {"train/32", "train/128"}) {
          CHECK(arena(on, p, true) < arena(on, p, false));
          CHECK(arena(off, p, true) == arena(on, p, false));  // the same plan, recorded without
        }
      }
    }
  }

  TEST_CASE("with one segment per layer the arena grows per layer by about one segment input") {
    const int64_t B = 2, S = 128;
    std::map<int64_t, size_t> with, without;
    ToyConfig cfg;
    cfg.hidden = 64;
    cfg.intermediate = 256;
    for (int64_t layers : {2, 4}) {
      cfg.layers = layers;
      ToyReplica r(Device::cpu(), cfg, {{S, 1, B}}, OptimizerConfig{}, true, true);
      with[layers] = arena(r, "train/128", true);
      without[layers] = arena(r, "train/128", false);
    }
    const size_t segment_input = size_t(B * S * cfg.hidden) * sizeof(float);
    MESSAGE("arena with checkpointing: 2 layers " << with[2] << ", 4 layers " << with[4] << "; without: "
                                                  << without[2] << ", " << without[4] << "; segment input "
                                                  << segment_input);
    CHECK(with[4] - with[2] <= size_t(2 * segment_input * 1.25));
    // Without checkpointing every layer keeps its activations (norm, gate, up, product, ...).
    CHECK(without[4] - without[2] >= 2 * 4 * segment_input);
  }

  TEST_CASE("checkpoint of a segment matches the plain segment, including input gradients") {
    CpuRuntime rt;
    Tensor x = param({3, 5}, 1), w = param({4, 5}, 2), v = param({4}, 3);
    auto segment = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::rmsnorm(ops::linear(in[0], w), v, 1e-5f), ops::linear(in[0], w)};
    };
    auto plain = [&] {
      auto o = segment({x});
      return ops::sum(ops::add(ops::mul(o[0], o[0]), o[1]));
    };
    auto checkpointed = [&] {
      auto o = checkpoint("seg", segment, {x});
      return ops::sum(ops::add(ops::mul(o[0], o[0]), o[1]));
    };
    backward(plain());
    std::vector<float> gx = x.grad().to_floats(), gw = w.grad().to_floats(), gv = v.grad().to_floats();
    for (const Tensor& t : {x, w, v}) ops::fill_(t.grad(), 0.0f);
    backward(checkpointed());
    CHECK(bitwise_equal(gx, x.grad().to_floats()));
    CHECK(bitwise_equal(gw, w.grad().to_floats()));
    CHECK(bitwise_equal(gv, v.grad().to_floats()));
    // And against finite differences.
    check_gradients(checkpointed, {x, w, v});
  }

  TEST_CASE("a segment that returns one of its inputs: every path's gradient still reaches that input") {
    CpuRuntime rt;
    Tensor x = param({3, 5}, 1), w = param({4, 5}, 2);
    // The input passed through first or last, and the segment's input a leaf or an intermediate.
    for (const bool through_first : {true, false})
      for (const bool intermediate : {false, true}) {
        INFO("passed through " << std::string(through_first ? "first" : "last") << ", input "
                               << std::string(intermediate ? "an intermediate" : "a leaf"));
        auto segment = [&](const std::vector<Tensor>& in) {
          Tensor y = ops::linear(in[0], w);
          return through_first ? std::vector<Tensor>{in[0], y} : std::vector<Tensor>{y, in[0]};
        };
        // loss = sum(t * t) + sum(y) over the passed-through t and the linear y.
        auto loss_of = [&](bool with_checkpoint) {
          return [&, with_checkpoint] {
            Tensor in = intermediate ? ops::scale(x, 2.0f) : x;
            std::vector<Tensor> o = with_checkpoint ? checkpoint("through", segment, {in}) : segment({in});
            const Tensor& t = o[through_first ? 0 : 1];
            const Tensor& y = o[through_first ? 1 : 0];
            return ops::add(ops::sum(ops::mul(t, t)), ops::sum(y));
          };
        };
        for (const Tensor& t : {x, w}) ops::fill_(t.grad(), 0.0f);
        backward(loss_of(false)());
        const std::vector<float> gx = x.grad().to_floats(), gw = w.grad().to_floats();
        for (const Tensor& t : {x, w}) ops::fill_(t.grad(), 0.0f);
        backward(loss_of(true)());
        CHECK(bitwise_equal(gw, w.grad().to_floats()));
        const std::vector<float> cx = x.grad().to_floats();
        for (size_t i = 0; i < gx.size(); ++i) CHECK(cx[i] == doctest::Approx(gx[i]).epsilon(1e-6));
        check_gradients(loss_of(true), {x, w});
      }
  }

  TEST_CASE("a recomputation that takes fewer or more kept results than its first run put is refused as impure") {
    CpuRuntime rt;
    Tensor x = param({2, 3}, 1), w = param({4, 3}, 2);
    // The first run puts `puts` kept results; the recomputation takes `takes` of them.
    auto backward_of = [&](int puts, int takes) {
      auto segment = [&, puts, takes](const std::vector<Tensor>& in, CheckpointStash& stash) {
        Tensor y = ops::linear(in[0], w);
        for (int i = 0; i < (stash.replaying() ? takes : puts); ++i) {
          if (stash.replaying()) stash.take();
          else stash.put({y});
        }
        return std::vector<Tensor>{y};
      };
      std::vector<Tensor> o = checkpoint_with_stash("impure", segment, {x});
      backward(ops::sum(o[0]));
    };
    SUBCASE("fewer") {
      CHECK_THROWS_WITH_AS(backward_of(2, 1),
                           doctest::Contains("checkpoint 'impure': the recomputation took 1 of the 2 kept results"), Error);
    }
    SUBCASE("more") {
      CHECK_THROWS_WITH_AS(backward_of(1, 2),
                           doctest::Contains("checkpoint stash: take() without a matching put() in the first run (1 kept)"),
                           Error);
    }
    SUBCASE("as many: accepted") { CHECK_NOTHROW(backward_of(2, 2)); }
  }
}

TEST_SUITE("checkpoint") {
  TEST_CASE("fitted checkpointing: each program recomputes the fewest leading segments that fit the arena") {
    // A stand-in body: recomputing k of 4 segments leaves (4 - k) segments' activations of its
    // bucket's size alive at once, on top of the segment inputs.
    Context ctx(Device::cpu());
    ContextScope scope(ctx);
    Engine engine(ctx);
    auto body = [](int64_t rows) {
      return [rows](Recompute r) {
        const int64_t k = r.full;
        std::vector<Tensor> held;
        for (int64_t s = 0; s < 4; ++s) held.push_back(Tensor::empty({rows}, DType::f32));      // inputs
        for (int64_t s = k; s < 4; ++s) held.push_back(Tensor::empty({8 * rows}, DType::f32));  // activations
        held.push_back(Tensor::empty({8 * rows}, DType::f32));  // the segment being recomputed / backward
        ops::fill_(held.back(), 1.0f);
      };
    };
    engine.add_fitted("large", Bucket{64, 1, 1}, body(4096), 4);
    engine.add_fitted("small", Bucket{16, 1, 1}, body(1024), 4);
    engine.add_fitted("tiny", Bucket{8, 1, 1}, body(16), 4);
    engine.build(size_t(1) << 40);
    std::map<std::string, ProgramReport> r;
    for (const ProgramReport& p : engine.report()) r[p.name] = p;
    // The largest program recomputes everything and sizes the arena.
    CHECK(r["large"].recomputed == 4);
    CHECK(engine.arena_bytes() == r["large"].arena_bytes_full_checkpointing);
    // 1024 rows: inputs 4 x 4 KiB plus (4 - k + 1) x 32 KiB must fit 4 x 16 KiB + 128 KiB: k = 0 fits.
    CHECK(r["small"].recomputed == 0);
    CHECK(r["tiny"].recomputed == 0);
    for (auto& [name, p] : r) {
      CHECK(p.arena_bytes <= engine.arena_bytes());
      CHECK(p.arena_bytes_without_checkpointing >= p.arena_bytes_full_checkpointing);
    }
  }

  TEST_CASE("fitted checkpointing picks a partial recomputation when none is too big and all is not needed") {
    Context ctx(Device::cpu());
    ContextScope scope(ctx);
    Engine engine(ctx);
    auto body = [](int64_t rows) {
      return [rows](Recompute r) {
        std::vector<Tensor> held;
        for (int64_t s = r.full; s < 4; ++s) held.push_back(Tensor::empty({8 * rows}, DType::f32));
        held.push_back(Tensor::empty({8 * rows}, DType::f32));
        ops::fill_(held.back(), 1.0f);
      };
    };
    engine.add_fitted("large", Bucket{64, 1, 1}, body(1000), 4);  // full: 1 x 32000 B
    engine.add_fitted("mid", Bucket{32, 1, 1}, body(400), 4);     // k segments recomputed: (5 - k) x 12800 B
    engine.build(size_t(1) << 40);
    std::map<std::string, ProgramReport> r;
    for (const ProgramReport& p : engine.report()) r[p.name] = p;
    CHECK(r["large"].recomputed == 4);
    // (5 - k) x 12800 <= 32000 (rounded up to 64-byte blocks) first holds at k = 3.
    CHECK(r["mid"].recomputed == 3);
    CHECK(r["mid"].arena_bytes <= engine.arena_bytes());
  }

  TEST_CASE("the recompute ladder: fastest first by the cost model, everything recomputed last") {
    // Without partial recomputation: 0, 1, ..., n layers, as before.
    CHECK(recompute_ladder(3, false) == std::vector<Recompute>{{0, 0}, {1, 0}, {2, 0}, {3, 0}});
    const std::vector<Recompute> ladder = recompute_ladder(3, true);
    // (full, partial) with full + partial <= 3, ordered by full + partial / 4.
    CHECK(ladder == std::vector<Recompute>{{0, 0}, {0, 1}, {0, 2}, {0, 3}, {1, 0}, {1, 1}, {1, 2}, {2, 0}, {2, 1},
                                           {3, 0}});
    CHECK(recompute_ladder(5, true).size() == 21);
    // Equal costs (1 entirely = 4 in part): more recomputed entirely first.
    const std::vector<Recompute> five = recompute_ladder(5, true);
    CHECK(std::find(five.begin(), five.end(), Recompute{1, 0}) < std::find(five.begin(), five.end(), Recompute{0, 4}));
    // The body's cost of a partial recomputation orders the ladder: at 0.5, two in part equal one.
    CHECK(recompute_ladder(2, true, 0.5) ==
          std::vector<Recompute>{{0, 0}, {0, 1}, {1, 0}, {0, 2}, {1, 1}, {2, 0}});
    CHECK(recompute_ladder(5, true).back() == Recompute{5, 0});
    // Deeper than kMaxPartialSegments: whole layers only (the startup plans at most L + 1 choices).
    CHECK(recompute_ladder(kMaxPartialSegments + 1, true).size() == size_t(kMaxPartialSegments + 2));
  }

  TEST_CASE("fitted checkpointing with partial recomputation: the fastest choice that fits") {
    // 3 segments; each keeps 4 units when not recomputed, 2 when recomputed in part, 1 when
    // recomputed entirely, all alive at once. Units of 1 KiB.
    auto build = [](size_t budget) {
      Context ctx(Device::cpu());
      ContextScope scope(ctx);
      Engine engine(ctx);
      std::vector<Recompute> seen;
      engine.add_fitted("fitted", Bucket{64, 1, 1}, [](Recompute r) {
        std::vector<Tensor> held;
        for (int64_t s = 0; s < 3; ++s) {
          const int64_t units = s < r.full ? 1 : s < r.full + r.partial ? 2 : 4;
          held.push_back(Tensor::empty({units * 256}, DType::f32));
          ops::fill_(held.back(), 1.0f);
        }
      }, 3, /*partial=*/true);
      engine.set_arena_budget(budget);
      engine.build(size_t(1) << 30);
      const ProgramReport& p = engine.report()[0];
      return std::make_tuple(p.recomputed - p.partially_recomputed, p.partially_recomputed, p.arena_bytes / 1024);
    };
    CHECK(build(12 * 1024) == std::make_tuple(int64_t(0), int64_t(0), size_t(12)));  // nothing recomputed
    CHECK(build(10 * 1024) == std::make_tuple(int64_t(0), int64_t(1), size_t(10)));  // the last layer in part
    CHECK(build(8 * 1024) == std::make_tuple(int64_t(0), int64_t(2), size_t(8)));
    CHECK(build(6 * 1024) == std::make_tuple(int64_t(0), int64_t(3), size_t(6)));
    // 5 units: (1,0) keeps 9, (1,1) 7, then (1,2) keeps 1 + 2 + 2 = 5.
    CHECK(build(5 * 1024) == std::make_tuple(int64_t(1), int64_t(2), size_t(5)));
    CHECK(build(0) == std::make_tuple(int64_t(3), int64_t(0), size_t(3)));  // no budget: all, the smallest
  }

  TEST_CASE("the recompute ladder offers partial recomputation up to 12 segments, whole layers beyond") {
    CHECK(recompute_ladder(12, true).size() == 91);  // (full, partial) with full + partial <= 12
    CHECK(recompute_ladder(13, true).size() == 14);  // 0..13 whole layers
  }

  TEST_CASE("checkpoint stash: kept values that are a view (rows 2 and 3 of a tensor) are adopted at their offset") {
    CpuRuntime rt;
    const Tensor base = randn(Shape{4, 3}, 5), x = randn(Shape{2, 5}, 6), w = randn(Shape{3, 5}, 7);
    const Tensor kept = base.rows(2, 4);
    Tensor skipped;
    {
      SkipLaunches skip(true);
      skipped = ops::linear(x, w);  // no memory of its own
    }
    adopt_kept_values(skipped, kept);
    const std::vector<float> all = base.to_floats();
    CHECK(skipped.to_floats() == std::vector<float>(all.begin() + 6, all.end()));
  }
}
