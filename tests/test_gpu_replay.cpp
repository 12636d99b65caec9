// Record once, replay forever on a GPU: every bucket of the toy model recorded as CUDA Graphs,
// replay equal to eager bit for bit (checkpointing on and off), two threads replaying on two
// streams, and a short suite for compute-sanitizer. Suites "gpu-replay" and "gpu-sanitize".
#ifdef DFLASH_CUDA
#include <thread>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/ops.h"
#include "tests/gpu_test_util.h"
#include "tests/test_util.h"
#include "train/toy_worker.h"

using namespace dflash;
using namespace dflash::test;

namespace {
const std::vector<Bucket> kBuckets = {{64, 1, 4}, {256, 1, 2}, {512, 1, 1}};

ToyConfig gpu_model() {
  ToyConfig c;
  c.vocab = 512;
  c.hidden = 128;
  c.intermediate = 256;
  c.layers = 3;
  return c;
}

OptimizerConfig opt() {
  OptimizerConfig o;
  o.lr = 2e-3f;
  o.warmup_steps = 2;
  o.total_steps = 20;
  return o;
}

// Losses of `steps` steps cycling through the buckets (each step: one micro-batch + update).
std::vector<float> train(ToyReplica& r, int steps, uint64_t seed) {
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    size_t bi = size_t(s) % r.steps.size();
    const Bucket& b = r.steps[bi]->bucket();
    {
      ContextScope scope(r.ctx);
      r.steps[bi]->stage(toy_batch(seed + uint64_t(s), b.batch, 2, b.seq, gpu_model().vocab));
    }
    r.train(bi);
    r.step_update();
    ContextScope scope(r.ctx);
    losses.push_back(r.steps[bi]->loss());
    losses.push_back(r.update->grad_norm());
  }
  return losses;
}
}  // namespace

TEST_SUITE("gpu-replay") {
  TEST_CASE("every bucket recorded as CUDA Graphs replays bit for bit like eager, over 21 steps") {
    REQUIRE_GPU();
    for (bool ckpt : {true, false}) {
      CAPTURE(ckpt);
      ToyReplica eager(Device::cuda(0), gpu_model(), kBuckets, opt(), false, ckpt);
      ToyReplica replay(Device::cuda(0), gpu_model(), kBuckets, opt(), true, ckpt);
      std::vector<float> a = train(eager, 21, 3), b = train(replay, 21, 3);
      CHECK(bitwise_equal(a, b));
      CHECK(bitwise_equal(eager.params(), replay.params()));
      CHECK(a[a.size() - 2] < a[0]);  // it trained
      for (const ProgramReport& p : replay.engine->report())
        MESSAGE(p.name << ": " << p.kernels << " kernels, arena " << p.arena_bytes << " B (without checkpointing "
                       << p.arena_bytes_without_checkpointing << " B), recorded in " << p.record_ms << " ms");
    }
  }

  TEST_CASE("two threads replaying on two streams match their sequential runs") {
    REQUIRE_GPU();
    ToyReplica a(Device::cuda(0), gpu_model(), kBuckets, opt(), true, true);
    ToyReplica b(Device::cuda(0), gpu_model(), kBuckets, opt(), true, true);
    ToyReplica a_ref(Device::cuda(0), gpu_model(), kBuckets, opt(), true, true);
    ToyReplica b_ref(Device::cuda(0), gpu_model(), kBuckets, opt(), true, true);
    CHECK(a.ctx.cuda_stream() != b.ctx.cuda_stream());
    std::vector<float> la, lb;
    std::thread ta([&] { la = train(a, 30, 100); });
    std::thread tb([&] { lb = train(b, 30, 200); });
    ta.join();
    tb.join();
    CHECK(bitwise_equal(la, train(a_ref, 30, 100)));
    CHECK(bitwise_equal(lb, train(b_ref, 30, 200)));
    CHECK_FALSE(bitwise_equal(la, lb));
  }

  TEST_CASE("a sealed GPU runtime refuses to capture or allocate") {
    REQUIRE_GPU();
    ToyReplica r(Device::cuda(0), gpu_model(), kBuckets, opt(), true, true);
    ContextScope scope(r.ctx);
    ToyStep* step = r.steps[0].get();
    CHECK_THROWS_WITH_AS(record_program(r.ctx, "late", [&] { step->train(true); }),
                         doctest::Contains("buckets are fixed at startup"), Error);
    CHECK_THROWS_WITH_AS(Tensor::empty({4}, DType::f32), doctest::Contains("buckets are fixed at startup"), Error);
    uint64_t before = alloc_counters().total();
    for (int i = 0; i < 100; ++i) r.engine->program("train/64").replay();
    r.ctx.synchronize();
    CHECK(alloc_counters().total() == before);
  }
}

TEST_SUITE("gpu-replay") {
  TEST_CASE("a synchronisation or a raw cudaMalloc inside capture is an error, not a silent fallback") {
    REQUIRE_GPU();
    Context ctx(Device::cuda(0));
    ContextScope scope(ctx);
    Tensor x = Tensor::persistent({64}, DType::f32);
    auto sync_inside = [&] {
      ops::fill_(x, 1.0f);
      ctx.synchronize();
    };
    ctx.reserve_arena(1 << 20);
    CHECK_THROWS_WITH_AS(record_program(ctx, "sync", sync_inside), doctest::Contains("cudaStreamSynchronize"), Error);
    auto malloc_inside = [&] {
      ops::fill_(x, 2.0f);
      void* p = cuda_backend::alloc(0, 1024);
      cuda_backend::free(0, p);
    };
    CHECK_THROWS_AS(record_program(ctx, "malloc", malloc_inside), Error);
    // The context recovers: a clean recording still works and replays.
    Program ok = record_program(ctx, "ok", [&] { ops::fill_(x, 3.0f); });
    ok.replay();
    ctx.synchronize();
    CHECK(x.to_floats()[0] == 3.0f);
  }
}

TEST_SUITE("gpu-sanitize") {
  TEST_CASE("one replay of every bucket, checkpointing on and off (run under compute-sanitizer)") {
    REQUIRE_GPU();
    for (bool ckpt : {true, false}) {
      ToyReplica r(Device::cuda(0), gpu_model(), kBuckets, opt(), true, ckpt);
      for (size_t i = 0; i < kBuckets.size(); ++i) {
        {
          ContextScope scope(r.ctx);
          r.steps[i]->stage(toy_batch(7, kBuckets[i].batch, 2, kBuckets[i].seq, gpu_model().vocab));
        }
        r.train(i);
      }
      r.step_update();
      ContextScope scope(r.ctx);
      CHECK(std::isfinite(r.update->grad_norm()));
    }
  }
}
#endif
