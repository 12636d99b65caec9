// Replay with a poisoned arena: the activation arena is filled with NaN bytes (0xFF: NaN in f32 and
// bf16, -1 in i32) before every replay, and the DFlash trainer's programs (target forward, train
// step with accumulation, update) must still give eager mode's results bit for bit. A program that
// reads an arena byte it did not write in the same replay fails here, which initcheck cannot see in
// a reused arena. CPU in suite "replay"; CUDA in "gpu-poison".
#include <cstring>

#include "tests/micro_batch_gradients.h"
#include "tests/trainer_fixture.h"
#ifdef DFLASH_CUDA
#include "tests/gpu_test_util.h"
#endif

using namespace dflash;
using namespace dflash::test;

namespace {
void poison_arena(Replica& r) {
  Context& ctx = r.context();
  REQUIRE(ctx.arena_base() != nullptr);
  REQUIRE(ctx.arena_bytes() > 0);
  if (ctx.device().is_cpu()) {
    std::memset(ctx.arena_base(), 0xFF, ctx.arena_bytes());
    return;
  }
#ifdef DFLASH_CUDA
  ContextScope scope(ctx);
  cuda_backend::memset_async(ctx.arena_base(), 0xFF, ctx.arena_bytes(), ctx.cuda_stream());
  ctx.synchronize();
#endif
}

std::vector<float> floats_of(Replica& r, const Tensor& t) {
  ContextScope scope(r.context());
  return t.to_floats();
}

// Four steps of two micro-batches of the small job on `device`: recorded with a poisoned arena
// against eager, compared after every program.
void poisoned_replay_equals_eager(Device device) {
  Config cfg = small_job("poison", {"training.grad_accum=2", "runtime.cpu_workers=1", "data.eval=\"\""});
  MicroBatchGradients micro(cfg);  // the micro-batches, in the trainer's order
  OptimizerConfig opt;
  opt.lr = 1e-2f;
  opt.warmup_steps = 1;
  opt.total_steps = 4;
  auto make = [&](bool graphs) {
    ReplicaOptions o;
    o.device = device;
    o.spec = micro.spec();
    o.target_dir = cfg.target.path;
    o.buckets = cfg.buckets;
    o.eval = false;
    o.graphs = graphs;
    o.grad_accum = 2;
    o.init_seed = cfg.job.seed;
    o.optimizer = opt;
    auto r = std::make_unique<Replica>(o);
    r->build(size_t(1) << 32);
    return r;
  };
  std::unique_ptr<Replica> recorded = make(true), eager = make(false);
  for (int step = 1; step <= 4; ++step) {
    CAPTURE(step);
    for (int j = 0; j < 2; ++j) {
      MicroBatchGradients::Batch batch = micro.next();
      const size_t b = size_t(batch.bucket);
      StepResult got, want;
      for (Replica* r : {recorded.get(), eager.get()}) {
        {
          ContextScope scope(r->context());
          r->step(b).stage(batch.host);
        }
        if (r == recorded.get()) poison_arena(*r);
        r->run_target(b);
        if (r == recorded.get()) poison_arena(*r);
        r->run_train(b);
        ContextScope scope(r->context());
        r->step(b).read_result(r == recorded.get() ? got : want);
      }
      CHECK(std::memcmp(&got.loss, &want.loss, sizeof got.loss) == 0);
      CHECK(std::memcmp(got.sums, want.sums, sizeof got.sums) == 0);
      CHECK(floats_of(*recorded, recorded->drafter().params().flat_grads()) ==
            floats_of(*eager, eager->drafter().params().flat_grads()));
    }
    poison_arena(*recorded);
    recorded->run_update();
    eager->run_update();
    float got[2], want[2];
    {
      ContextScope scope(recorded->context());
      recorded->update().read(got);
    }
    {
      ContextScope scope(eager->context());
      eager->update().read(want);
    }
    CHECK(std::memcmp(got, want, sizeof got) == 0);
    CHECK(std::isfinite(got[0]));
    const ParameterStore &pr = recorded->drafter().params(), &pe = eager->drafter().params();
    CHECK(floats_of(*recorded, pr.flat_master()) == floats_of(*eager, pe.flat_master()));
    CHECK(floats_of(*recorded, pr.flat_compute()) == floats_of(*eager, pe.flat_compute()));
  }
}
}  // namespace

TEST_SUITE("replay") {
  TEST_CASE("the DFlash trainer's programs replayed over an arena filled with NaN equal eager bit for bit") {
    poisoned_replay_equals_eager(Device::cpu());
  }
}

#ifdef DFLASH_CUDA
TEST_SUITE("gpu-poison") {
  TEST_CASE("on CUDA, the DFlash trainer's graphs replayed over an arena filled with NaN equal eager bit for bit") {
    REQUIRE_GPU();
    poisoned_replay_equals_eager(Device::cuda(0));
  }
}
#endif
