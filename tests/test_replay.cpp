// Record once, replay forever: replay equals eager bit for bit, replay allocates nothing, a sealed
// runtime refuses to record, startup refuses a bucket set that does not fit (the host's available
// memory counted in bytes), a body whose recording differs from its plan, a plan's bytes under its
// offline placement, and the context's misuse refused (a host copy while planning, a nested begin,
// a CPU recording without a sink, a persistent allocation after the seal).
#include <fstream>
#include <random>

#include "graphs/program.h"
#include "runtime/allocator.h"
#include "runtime/placement.h"
#include "tests/test_util.h"
#include "train/toy_worker.h"

namespace dflash::test {
extern thread_local bool t_counting;
extern thread_local uint64_t t_allocations;
}  // namespace dflash::test

using namespace dflash;
using namespace dflash::test;

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

namespace {
const std::vector<Bucket> kBuckets = {{16, 1, 2}, {32, 1, 2}, {64, 1, 1}};

OptimizerConfig schedule_config() {
  OptimizerConfig o;
  o.lr = 3e-3f;
  o.weight_decay = 0.01f;
  o.max_grad_norm = 0.5f;
  o.warmup_steps = 3;
  o.total_steps = 24;
  o.min_lr_ratio = 0.1f;
  return o;
}

struct StepLog {
  std::vector<float> losses, accuracies, norms, lrs;
};

// Runs `steps` optimizer steps of `micro` micro-batches each, cycling through the buckets.
StepLog run(ToyReplica& r, int steps, int micro, uint64_t seed) {
  StepLog log;
  for (int s = 0; s < steps; ++s) {
    for (int m = 0; m < micro; ++m) {
      size_t bi = size_t(s * micro + m) % r.steps.size();
      const Bucket& b = r.steps[bi]->bucket();
      {
        ContextScope scope(r.ctx);
        r.steps[bi]->stage(toy_batch(seed + uint64_t(s * 100 + m), b.batch, 2, b.seq, 96));
      }
      r.train(bi);
      ContextScope scope(r.ctx);
      log.losses.push_back(r.steps[bi]->loss());
      log.accuracies.push_back(r.steps[bi]->accuracy());
    }
    r.step_update();
    ContextScope scope(r.ctx);
    log.norms.push_back(r.update->grad_norm());
    log.lrs.push_back(r.update->lr());
  }
  return log;
}
}  // namespace

TEST_SUITE("replay") {
  TEST_CASE("replay equals eager bit for bit over 24 optimizer steps in every bucket, with accumulation") {
    ToyConfig cfg;
    cfg.layers = 3;
    for (bool ckpt : {false, true}) {
      ToyReplica eager(Device::cpu(), cfg, kBuckets, schedule_config(), false, ckpt, nullptr, 0, 2);
      ToyReplica replay(Device::cpu(), cfg, kBuckets, schedule_config(), true, ckpt, nullptr, 0, 2);
      CHECK(bitwise_equal(eager.params(), replay.params()));
      StepLog a = run(eager, 24, 2, 11), b = run(replay, 24, 2, 11);
      CHECK(bitwise_equal(a.losses, b.losses));
      CHECK(bitwise_equal(a.accuracies, b.accuracies));
      CHECK(bitwise_equal(a.norms, b.norms));
      CHECK(bitwise_equal(a.lrs, b.lrs));
      CHECK(bitwise_equal(eager.params(), replay.params()));
      // It trained: the loss fell and the parameters moved.
      CHECK(b.losses.back() < b.losses.front());
    }
  }

  TEST_CASE("the learning rate comes from the step counter inside the update program") {
    ToyReplica r(Device::cpu(), ToyConfig{}, kBuckets, schedule_config(), true, true);
    StepLog log = run(r, 24, 1, 5);
    OptimizerConfig o = schedule_config();
    for (int s = 0; s < 24; ++s) {
      double want;
      if (s < o.warmup_steps) want = o.lr * (s + 1.0) / o.warmup_steps;
      else {
        double p = double(s - o.warmup_steps) / double(o.total_steps - 1 - o.warmup_steps);
        double lo = o.lr * o.min_lr_ratio;
        want = lo + (o.lr - lo) * 0.5 * (1 + std::cos(M_PI * p));
      }
      CHECK(log.lrs[size_t(s)] == doctest::Approx(want).epsilon(1e-6));
    }
    CHECK(log.lrs.back() == doctest::Approx(o.lr * o.min_lr_ratio).epsilon(1e-6));
  }

  TEST_CASE("a program reads only its static inputs: new staged data, new result") {
    ToyReplica r(Device::cpu(), ToyConfig{}, kBuckets, schedule_config(), true, true);
    ToyReplica e(Device::cpu(), ToyConfig{}, kBuckets, schedule_config(), false, true);
    for (uint64_t seed : {1, 2, 3}) {
      for (ToyReplica* x : {&r, &e}) {
        ContextScope scope(x->ctx);
        x->steps[1]->stage(toy_batch(seed, 2, 5, 32, 96));
      }
      r.train(1);
      e.train(1);
      ContextScope s1(r.ctx);
      float loss_replayed = r.steps[1]->loss();
      ContextScope s2(e.ctx);
      CHECK(loss_replayed == e.steps[1]->loss());
    }
  }

  TEST_CASE("replay makes no allocation of any kind across 100 replays") {
    ToyReplica r(Device::cpu(), ToyConfig{}, kBuckets, schedule_config(), true, true);
    {
      ContextScope scope(r.ctx);
      for (auto& s : r.steps) s->stage(toy_batch(3, s->bucket().batch, 2, s->bucket().seq, 96));
    }
    const Program& update = r.engine->program("update");
    uint64_t runtime_before = alloc_counters().total();
    t_allocations = 0;
    t_counting = true;
    for (int i = 0; i < 100; ++i) {
      r.engine->program("train/" + std::to_string(r.steps[size_t(i) % 3]->bucket().seq)).replay();
      update.replay();
    }
    t_counting = false;
    CHECK(alloc_counters().total() == runtime_before);
    CHECK(t_allocations == 0);
    // The hook does see allocations when there are some.
    t_counting = true;
    std::vector<int>* probe = new std::vector<int>(10);
    t_counting = false;
    delete probe;
    CHECK(t_allocations >= 1);
  }
}

TEST_SUITE("seal") {
  TEST_CASE("a sealed runtime refuses to record, capture or allocate, naming the op") {
    ToyReplica r(Device::cpu(), ToyConfig{}, kBuckets, schedule_config(), true, true);
    ContextScope scope(r.ctx);
    CHECK(r.ctx.sealed());
    ToyStep* step = r.steps[0].get();
    CHECK_THROWS_WITH_AS(record_program(r.ctx, "late", [&] { step->train(true); }),
                         doctest::Contains("buckets are fixed at startup"), Error);
    CHECK_THROWS_WITH_AS(plan_program(r.ctx, "late", [&] { step->train(true); }),
                         doctest::Contains("after the runtime was sealed"), Error);
    CHECK_THROWS_WITH_AS(Tensor::empty({4}, DType::f32), doctest::Contains("buckets are fixed at startup"), Error);
    try {
      ops::rmsnorm(r.model->params().get("norm"), r.model->params().get("norm"), 1e-5f);
      FAIL("an op ran on a sealed runtime");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("op 'rmsnorm'") != std::string::npos);
    }
    CHECK_THROWS_WITH_AS(Tensor::persistent({4}, DType::f32), doctest::Contains("persistent allocation"), Error);
    CHECK_THROWS_WITH_AS(r.engine->add("late", Bucket{}, [](bool) {}, false),
                         doctest::Contains("added after the runtime was sealed"), Error);
    // Replay still works.
    r.engine->program("update").replay();
  }

  TEST_CASE("startup refuses a bucket set that does not fit, with the numbers") {
    ToyReplica r(Device::cpu(), ToyConfig{}, kBuckets, schedule_config(), true, true, nullptr, 0, 1, false);
    try {
      r.build_programs(1000);
      FAIL("the bucket set was accepted");
    } catch (const Error& e) {
      std::string m = e.what();
      CHECK(m.find("does not fit") != std::string::npos);
      CHECK(m.find("train/64") != std::string::npos);
      CHECK(m.find("1000 bytes") != std::string::npos);
      CHECK(m.find("turn checkpointing on") != std::string::npos);
    }
    CHECK_FALSE(r.ctx.sealed());
  }

  TEST_CASE("a CPU worker's available memory is the host's MemAvailable, in bytes") {
    std::ifstream in("/proc/meminfo");
    uint64_t kb = 0;
    for (std::string line; std::getline(in, line) && kb == 0;)
      if (line.rfind("MemAvailable:", 0) == 0 && line.find(" kB") != std::string::npos) kb = std::stoull(line.substr(13));
    REQUIRE(kb > 0);
    // Other processes move it between the two reads: agreement within a factor of 2 tells kB from bytes.
    const double got = double(available_memory_bytes(Device::cpu())), want = double(kb) * 1024.0;
    CHECK(got > 0.5 * want);
    CHECK(got < 2.0 * want);
  }

  TEST_CASE("an arena budget trades memory for recomputation: the fewest recomputed segments that fit it") {
    // A fitted body over 3 segments of 1 KiB each: the ones not recomputed stay alive together.
    auto build = [](size_t budget, size_t available) {
      CpuRuntime rt;
      Tensor x = Tensor::persistent({256}, DType::f32);
      ops::fill_(x, 1.0f);
      Engine engine(rt.ctx);
      engine.add_fitted("fitted", Bucket{}, [&](Recompute r) {
        const int64_t recomputed = r.full;
        NoGrad no_grad;
        std::vector<Tensor> held;
        for (int64_t l = 0; l < 3; ++l) {
          Tensor t = ops::scale(x, 2.0f);
          if (l >= recomputed) held.push_back(t);
        }
      }, 3);
      engine.set_arena_budget(budget);
      engine.build(available);
      return std::make_pair(engine.report()[0].recomputed, engine.arena_bytes());
    };
    const size_t kib = 1024, plenty = size_t(1) << 20;
    CHECK(build(0, plenty) == std::make_pair(int64_t(2), kib));           // the smallest arena
    CHECK(build(2 * kib, plenty) == std::make_pair(int64_t(1), 2 * kib));  // two segments kept
    CHECK(build(10 * kib, plenty) == std::make_pair(int64_t(0), 3 * kib)); // none recomputed; only what it needs
    CHECK(build(kib / 2, plenty) == std::make_pair(int64_t(2), kib));     // below the minimum: the minimum
    CHECK_THROWS_WITH_AS(build(4 * kib, 3 * kib), doctest::Contains("lower runtime.arena_gb"), Error);
  }

  TEST_CASE("a plan reports its arena and the most bytes live at once: their difference is fragmentation") {
    CpuRuntime rt;
    auto body = [] {
      NoGrad no_grad;
      Tensor a = Tensor::empty({1000}, DType::f32);  // 4000 bytes, 4032 placed, at 0
      Tensor b = Tensor::empty({16}, DType::f32);    // 64 at 4032
      a = Tensor();                                  // a hole of 4032 below b
      Tensor c = Tensor::empty({1200}, DType::f32);  // 4800: not in the hole, so above b at 4096
    };
    PlanResult p = plan_program(rt.ctx, "fragments", body);
    CHECK(p.arena_bytes == 4032 + 64 + 4800);
    CHECK(p.live_bytes == 64 + 4800);
    // The offline placement, knowing every lifetime, puts c where a was: no hole.
    REQUIRE(p.placement);
    CHECK(p.needed_bytes() == 64 + 4800);
    CHECK(p.placement->offsets == std::vector<size_t>{0, 4800, 0});
    // Without the hole (a freed last) nothing is lost.
    PlanResult q = plan_program(rt.ctx, "packed", [] {
      Tensor a = Tensor::empty({1000}, DType::f32), b = Tensor::empty({16}, DType::f32);
    });
    CHECK(q.arena_bytes == 4032 + 64);
    CHECK(q.live_bytes == q.arena_bytes);
  }

  TEST_CASE("the offset planner: the smallest hole that fits, and a freed top block lowers the top") {
    OffsetPlanner p;
    const size_t a = kAlignment;
    CHECK(p.allocate(4 * a) == 0);
    CHECK(p.allocate(1) == 4 * a);  // rounded up to one alignment unit
    CHECK(p.allocate(2 * a) == 5 * a);
    CHECK(p.allocate(a) == 7 * a);
    CHECK(p.peak() == 8 * a);
    p.release(0, 4 * a);
    p.release(5 * a, 2 * a);  // holes: 4a at 0, 2a at 5a
    CHECK(p.allocate(2 * a) == 5 * a);  // the 2a hole, though the 4a one comes first
    CHECK(p.allocate(a) == 0);          // the one hole left, from its start
    p.release(7 * a, a);                // the block at the top: nothing lies above 7a now
    CHECK(p.allocate(a) == a);          // so the hole [a, 4a) is the only free block
    CHECK(p.allocate(4 * a) == 7 * a);  // and what fits no hole goes on top, from 7a
    CHECK(p.peak() == 11 * a);
    CHECK(p.live_blocks() == 5);
    CHECK(p.live_bytes() == 9 * a);
  }

  TEST_CASE("offline placement: blocks alive together never overlap, and interleaved lifetimes pack to the live bytes") {
    std::mt19937_64 rng(11);
    for (int trial = 0; trial < 20; ++trial) {
      CAPTURE(trial);
      // Random lifetimes over 200 events: each block lives from its allocation to a later event.
      std::vector<ArenaBlock> blocks;
      for (uint64_t t = 0; t < 200; t += 1 + rng() % 3) {
        const uint64_t end = t + 1 + rng() % 40;
        blocks.push_back({size_t(1 + rng() % 64) * kAlignment, t, end});
      }
      const Placement p = place_blocks(blocks);
      REQUIRE(p.offsets.size() == blocks.size());
      size_t top = 0, total = 0;
      for (size_t i = 0; i < blocks.size(); ++i) {
        CHECK(p.offsets[i] % kAlignment == 0);
        CHECK(p.bytes[i] == blocks[i].bytes);
        top = std::max(top, p.offsets[i] + blocks[i].bytes);
        total += blocks[i].bytes;
        for (size_t j = i + 1; j < blocks.size(); ++j) {
          if (!(blocks[i].start < blocks[j].end && blocks[j].start < blocks[i].end)) continue;
          const bool apart = p.offsets[i] + blocks[i].bytes <= p.offsets[j] || p.offsets[j] + blocks[j].bytes <= p.offsets[i];
          CHECK(apart);
        }
      }
      size_t most_live = 0;  // a lower bound for any placement
      for (uint64_t t = 0; t < 240; ++t) {
        size_t live = 0;
        for (const ArenaBlock& b : blocks)
          if (b.start <= t && t < b.end) live += b.bytes;
        most_live = std::max(most_live, live);
      }
      CHECK(p.arena_bytes == top);
      CHECK(p.arena_bytes >= most_live);
      CHECK(p.arena_bytes <= total);
      CHECK(place_blocks(blocks).offsets == p.offsets);  // deterministic
    }
  }

  TEST_CASE("a recording given its plan's placement puts temporaries at its offsets and computes what eager does") {
    CpuRuntime rt;
    Tensor x = randn({1000}, 3);
    Tensor out = Tensor::persistent({1200}, DType::f32);
    auto body = [&] {
      NoGrad no_grad;
      Tensor a = ops::scale(x, 2.0f);                                  // 4032 placed bytes
      Tensor b = ops::scale(a.rows(0, 16), 3.0f);                      // 64
      a = Tensor();
      Tensor c = ops::concat(ops::scale(x, -1.0f), ops::scale(x.rows(0, 200), 0.5f), 0);  // 4800, with two temporaries
      ops::copy_(out, ops::add(c, ops::concat(b, Tensor::zeros({1184}, DType::f32), 0)));
    };
    body();
    const std::vector<float> eager = out.to_floats();
    PlanResult plan = plan_program(rt.ctx, "packed", body);
    REQUIRE(plan.placement);
    CHECK(plan.needed_bytes() < plan.arena_bytes);
    rt.ctx.reserve_arena(plan.needed_bytes());
    Program p = record_program(rt.ctx, "packed", body, plan.placement);
    CHECK(p.arena_bytes() == plan.needed_bytes());
    ops::fill_(out, NAN);
    p.replay();
    CHECK(bitwise_equal(out.to_floats(), eager));
  }

  TEST_CASE("a recording that departs from its placement is refused, naming the program and the temporary") {
    CpuRuntime rt;
    Tensor x = randn({1000}, 3);
    int variant = 0;  // 0: as planned; 1: another size at the third temporary; 2: one temporary fewer
    auto body = [&] {
      NoGrad no_grad;
      Tensor a = Tensor::empty({1000}, DType::f32), b = Tensor::empty({16}, DType::f32);
      a = Tensor();
      if (variant != 2) Tensor c = Tensor::empty({variant == 1 ? 1300 : 1200}, DType::f32);
    };
    PlanResult plan = plan_program(rt.ctx, "fragments", body);
    REQUIRE(plan.placement);
    rt.ctx.reserve_arena(plan.arena_bytes);
    variant = 1;
    CHECK_THROWS_WITH_AS(record_program(rt.ctx, "fragments", body, plan.placement),
                         doctest::Contains("recording 'fragments': temporary #2 (op '(no op)', 5248 bytes) is not the "
                                           "planning pass's (4800 bytes)"),
                         Error);
    variant = 2;
    CHECK_THROWS_WITH_AS(record_program(rt.ctx, "fragments", body, plan.placement),
                         doctest::Contains("program 'fragments': the recording made 2 temporaries but its planning pass 3"),
                         Error);
    variant = 0;
    CHECK(record_program(rt.ctx, "fragments", body, plan.placement).arena_bytes() == plan.needed_bytes());
  }

  TEST_CASE("a body whose recording differs from its plan is refused, naming the program and both counts") {
    CpuRuntime rt;
    Tensor x = randn({4}, 1);
    Engine engine(rt.ctx);
    // Two kernels and two 64-byte blocks while planning; one of each while recording.
    engine.add("moody", Bucket{}, [&](bool) {
      NoGrad no_grad;
      Tensor y = ops::scale(x, 2.0f);
      if (Context::current().mode() == Mode::plan) Tensor z = ops::scale(y, 3.0f);
    }, false);
    CHECK_THROWS_WITH_AS(engine.build(size_t(1) << 20),
                         "program 'moody': the recording (1 kernels, 64 bytes) differs from its plan (2 kernels, 128 "
                         "bytes): the body branched on something other than its configuration",
                         Error);
    CHECK_FALSE(rt.ctx.sealed());
  }

  TEST_CASE("ops in a SkipLaunches scope build their tape but launch nothing, in eager, plan and record alike") {
    CpuRuntime rt;
    Tensor t = Tensor::zeros({3}, DType::f32);
    {
      SkipLaunches skip(true);
      ops::fill_(t, 5.0f);
    }
    CHECK(t.to_floats() == std::vector<float>{0, 0, 0});
    {
      SkipLaunches skip(false);
      ops::fill_(t, 5.0f);
    }
    CHECK(t.to_floats() == std::vector<float>{5, 5, 5});
    // The gradient still flows through skipped ops whose backward rules read no value.
    Tensor x = randn({4}, 3);
    x.set_requires_grad(true);
    Tensor loss;
    {
      SkipLaunches skip(true);
      loss = ops::sum(ops::scale(x, 2.0f));
    }
    // Their outputs have no memory: reading one is refused, naming why.
    CHECK_THROWS_WITH_AS(loss.to_floats(), doctest::Contains("SkipLaunches"), Error);
    backward(loss);
    CHECK(x.grad().to_floats() == std::vector<float>(4, 2.0f));
    // A plan and its recording count only the launched kernel, and the arena only its output.
    Engine engine(rt.ctx);
    Tensor a = randn({1024}, 1);
    engine.add("skipping", Bucket{}, [&](bool) {
      NoGrad no_grad;
      Tensor b = ops::scale(a, 2.0f);
      SkipLaunches skip(true);
      Tensor c = ops::scale(b, 3.0f), d = ops::scale(c, 4.0f);
    }, false);
    engine.add("plain", Bucket{}, [&](bool) {
      NoGrad no_grad;
      Tensor b = ops::scale(a, 2.0f);
    }, false);
    engine.build(size_t(1) << 20);
    CHECK(engine.program("skipping").kernels() == 1);
    CHECK(engine.report()[0].arena_bytes == engine.report()[1].arena_bytes);
    CHECK(engine.report()[0].arena_bytes >= 1024 * sizeof(float));
  }

  TEST_CASE("a temporary that outlives its recording is refused") {
    CpuRuntime rt;
    Tensor leaked;
    CHECK_THROWS_WITH_AS(plan_program(rt.ctx, "leaky", [&] { leaked = Tensor::empty({8}, DType::f32); }),
                         doctest::Contains("outlived the recording"), Error);
    leaked = Tensor();
    CHECK_THROWS_WITH_AS(plan_program(rt.ctx, "host", [&] {
                           Tensor p = Tensor::persistent({2}, DType::f32);
                         }),
                         doctest::Contains("create parameters, optimizer state and static inputs/outputs before"), Error);
    Tensor w = param({2, 2}, 1), x = randn({3, 2}, 2);
    CHECK_THROWS_WITH_AS(plan_program(rt.ctx, "no-backward", [&] { Tensor y = ops::linear(x, w); }),
                         doctest::Contains("still on the tape"), Error);
    // The context is usable again after each refusal.
    CHECK(rt.ctx.mode() == Mode::eager);
    CHECK(plan_program(rt.ctx, "ok", [&] { Tensor t = Tensor::empty({8}, DType::f32); }).arena_bytes == 64);
  }

  TEST_CASE("a host copy inside a planning pass is refused like one while recording") {
    CpuRuntime rt;
    Tensor t = Tensor::from_floats({2}, {1.0f, 2.0f});
    CHECK_THROWS_WITH_AS(plan_program(rt.ctx, "p", [&] { (void)t.to_floats(); }),
                         doctest::Contains("while recording 'p'"), Error);
    CHECK(t.to_floats() == std::vector<float>{1.0f, 2.0f});  // eager again afterwards
  }

  TEST_CASE("a plan whose offline placement packs tighter needs the placement's bytes, not the online best fit's") {
    CpuRuntime rt;
    const PlanResult p = plan_program(rt.ctx, "p", [] {
      Tensor a = Tensor::empty({16}, DType::f32);  // 64 bytes at 0
      Tensor b = Tensor::empty({32}, DType::f32);  // 128 bytes at 64
      a = Tensor();                                // frees [0, 64): too small for c
      Tensor c = Tensor::empty({32}, DType::f32);  // online: at 192, so 320 bytes
    });
    CHECK(p.arena_bytes == 320);
    REQUIRE(p.placement);
    CHECK(p.needed_bytes() == 256);  // offline: b at 0, c at 128, a at 128 (it dies before c is made)
  }

  TEST_CASE("context: nested begin, a CPU recording without a sink and a persistent buffer after the seal are refused") {
    CpuRuntime rt;
    rt.ctx.begin(Mode::plan, "outer");
    CHECK_ERROR(rt.ctx.begin(Mode::plan, "inner"), "begin(plan, 'inner') while already in plan mode for 'outer'");
    rt.ctx.end();
    CHECK_ERROR(rt.ctx.begin(Mode::record, "loose"), "begin(record) on the CPU needs a sink for the kernel calls");
    if (rt.ctx.mode() != Mode::eager) rt.ctx.abort_recording();
    rt.ctx.seal();
    CHECK_ERROR(Tensor::persistent({4}, DType::f32), "persistent allocation of 16 bytes by op");
  }
}
