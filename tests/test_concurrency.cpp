// Workers: concurrent CPU workers replaying their programs produce exactly what one thread
// replaying the same batches produces; gradients meet in a fixed rank order (the thread communicator's
// refusals); a job's error reaches
// the next wait once, and the first failure of a thread rank is the one every rank reports.
#include "dist/comm.h"
#include "dist/coordinator.h"
#include "graphs/worker.h"
#include "tests/test_util.h"
#include "train/toy_worker.h"

using namespace dflash;
using namespace dflash::test;

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

namespace {
const std::vector<Bucket> kBuckets = {{16, 1, 2}, {32, 1, 2}};

struct Cluster {
  std::vector<std::unique_ptr<ToyReplica>> replicas;
  std::vector<float> losses, norms;
};

void stage(ToyReplica& r, size_t bi, int step, int rank) {
  ContextScope scope(r.ctx);
  r.steps[bi]->stage(toy_batch(uint64_t(1000 * step + rank), 2, 2, kBuckets[bi].seq, 96));
}

template <class Comm>
std::unique_ptr<Cluster> make(Comm& comm, int world) {
  auto c = std::make_unique<Cluster>();
  OptimizerConfig opt;
  opt.lr = 2e-3f;
  for (int r = 0; r < world; ++r) {
    c->replicas.push_back(std::make_unique<ToyReplica>(Device::cpu(r), ToyConfig{}, kBuckets, opt, true, true,
                                                       &comm, r, 1, false));
    comm.register_buffer(r, c->replicas.back()->model->params().flat_grads().template data<float>());
    c->replicas.back()->build_programs(size_t(1) << 40);
  }
  return c;
}
}  // namespace

TEST_SUITE("concurrency") {
  TEST_CASE("4 workers replaying concurrently for 50 steps match one thread replaying the same batches") {
    const int world = 4, steps = 50;
    // Sizes are only known once a model exists; build a probe to size the communicators.
    int64_t n;
    {
      Context probe_ctx(Device::cpu());
      ContextScope s(probe_ctx);
      n = ToyLM(ToyConfig{}).params().padded_numel();
    }
    ThreadCommunicator comm_threads(world, n);
    SequentialCommunicator comm_seq(world, n);
    auto concurrent = make(comm_threads, world);
    auto sequential = make(comm_seq, world);

    // Concurrent: one thread per worker, each replaying its train and update programs.
    size_t bucket = 0;
    std::vector<std::unique_ptr<WorkerThread>> threads;
    for (int r = 0; r < world; ++r) {
      ToyReplica* rep = concurrent->replicas[size_t(r)].get();
      threads.push_back(std::make_unique<WorkerThread>([rep, &bucket] {
        rep->engine->program("train/" + std::to_string(kBuckets[bucket].seq)).replay();
        rep->engine->program("update").replay();
      }));
    }
    for (int s = 0; s < steps; ++s) {
      bucket = size_t(s) % kBuckets.size();
      for (int r = 0; r < world; ++r) stage(*concurrent->replicas[size_t(r)], bucket, s, r);
      for (auto& t : threads) t->start();
      for (auto& t : threads) t->wait();
      for (int r = 0; r < world; ++r) {
        ToyReplica& rep = *concurrent->replicas[size_t(r)];
        ContextScope scope(rep.ctx);
        concurrent->losses.push_back(rep.steps[bucket]->loss());
        concurrent->norms.push_back(rep.update->grad_norm());
      }
    }
    // Sequential: one thread replays every worker's train program, then every update.
    for (int s = 0; s < steps; ++s) {
      size_t bi = size_t(s) % kBuckets.size();
      for (int r = 0; r < world; ++r) {
        ToyReplica& rep = *sequential->replicas[size_t(r)];
        stage(rep, bi, s, r);
        rep.engine->program("train/" + std::to_string(kBuckets[bi].seq)).replay();
      }
      for (int r = 0; r < world; ++r) sequential->replicas[size_t(r)]->engine->program("update").replay();
      for (int r = 0; r < world; ++r) {
        ToyReplica& rep = *sequential->replicas[size_t(r)];
        ContextScope scope(rep.ctx);
        sequential->losses.push_back(rep.steps[bi]->loss());
        sequential->norms.push_back(rep.update->grad_norm());
      }
    }
    CHECK(bitwise_equal(concurrent->losses, sequential->losses));
    CHECK(bitwise_equal(concurrent->norms, sequential->norms));
    std::vector<float> p0 = concurrent->replicas[0]->params();
    for (int r = 0; r < world; ++r) {
      CHECK(bitwise_equal(concurrent->replicas[size_t(r)]->params(), p0));  // replicas stay identical
      CHECK(bitwise_equal(sequential->replicas[size_t(r)]->params(), p0));
    }
    // The workers saw different batches, so the shared gradient is their mean, not one of them.
    CHECK(concurrent->losses[0] != concurrent->losses[1]);
  }

  TEST_CASE("the thread communicator sums in rank order and refuses a buffer it does not know") {
    const int world = 3;
    const int64_t n = 7;
    ThreadCommunicator comm(world, n);
    std::vector<std::vector<float>> bufs(world, std::vector<float>(n));
    for (int r = 0; r < world; ++r) {
      for (int64_t i = 0; i < n; ++i) bufs[size_t(r)][size_t(i)] = float(r + 1) * 0.1f + float(i);
      comm.register_buffer(r, bufs[size_t(r)].data());
    }
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) want[size_t(i)] = (bufs[0][size_t(i)] + bufs[1][size_t(i)]) + bufs[2][size_t(i)];
    std::vector<std::thread> ts;
    for (int r = 0; r < world; ++r) ts.emplace_back([&, r] { comm.all_reduce_sum(bufs[size_t(r)].data(), n, r); });
    for (auto& t : ts) t.join();
    for (int r = 0; r < world; ++r) CHECK(bitwise_equal(bufs[size_t(r)], want));
    std::vector<float> other(n);
    CHECK_THROWS_WITH_AS(comm.all_reduce_sum(other.data(), n, 0), doctest::Contains("registered at startup"), Error);
  }
  TEST_CASE("a worker's job error is rethrown by the wait that follows it, once; the worker keeps running jobs") {
    int runs = 0;
    bool fail = true;
    WorkerThread w([&] {
      ++runs;
      if (fail) throw Error("the job failed");
    });
    w.start();
    CHECK_THROWS_WITH_AS(w.wait(), doctest::Contains("the job failed"), Error);
    fail = false;
    w.start();
    CHECK_NOTHROW(w.wait());  // the error was reported once, not kept for every later wait
    CHECK(runs == 2);
  }

  TEST_CASE("the thread coordinator keeps the first failure; a rank waiting in all_gather stops with it") {
    ThreadCoordinator coord(3);
    std::string seen;
    std::thread waiter([&] {
      try {
        coord.handle(0).all_gather("x");
      } catch (const Error& e) {
        seen = e.what();
      }
    });
    coord.handle(2).report_failure("the disk is full");
    coord.handle(1).report_failure("stopped by the others");  // a consequence, not the cause
    waiter.join();
    CHECK(seen.find("rank 2 stopped: the disk is full") != std::string::npos);
    for (int r = 0; r < 3; ++r) CHECK(coord.handle(r).failure() == std::optional<std::string>("rank 2 stopped: the disk is full"));
    CHECK_THROWS_WITH_AS(coord.handle(1).all_gather("y"), doctest::Contains("rank 2 stopped: the disk is full"), Error);
  }

  TEST_CASE("thread communicator: another size registered, a shorter all_reduce and an uneven reduce_scatter refused") {
    CpuRuntime rt;
    std::vector<float> a(4), b(5);
    ThreadCommunicator two(2, 0);
    two.register_buffer(0, a.data(), 4);
    CHECK_ERROR(two.register_buffer(1, b.data(), 5),
                "ThreadCommunicator::register_buffer: rank 1 registers 5 floats but the others 4");
    ThreadCommunicator one(1, 4);
    one.register_buffer(0, a.data(), 4);
    CHECK_NOTHROW(one.all_reduce_sum(a.data(), 4, 0));
    CHECK_ERROR(one.all_reduce_sum(a.data(), 3, 0), "all_reduce: rank 0 passed a buffer other than the one registered");
    // Refused before any rank waits; the aborted barrier makes a call that got past the check fail
    // at once instead of waiting for a rank 1 that never comes.
    ThreadCommunicator pair(2, 0);
    pair.abort();
    const Tensor five = randn(Shape{5}, 1);
    CHECK_ERROR(reduce_scatter_(&pair, five, 0), "does not split into 2 equal slices");
  }
}
