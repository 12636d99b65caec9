// dflash-bench multi: the drafter's training step on G GPUs, one worker thread per GPU of this
// host, or one process per GPU when started by torchrun or srun (their variables, as dflash-train
// reads them), replaying train + update, the gradients reduced through NCCL (in the update
// program, or overlapped with the backward), the optimizer state optionally sharded. Reports the
// median step time, the throughput (tokens/s over the timed steps), the ratio to one GPU's
// (measured in the same call when --baseline) and the persistent bytes per GPU. Random bf16 target
// features are on each device (the target forward is not timed), as in dflash-bench step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "apps/bench.h"
#include "dist/comm.h"
#include "dist/launch.h"
#include "graphs/engine.h"
#include "graphs/overlap.h"
#include "graphs/update.h"
#include "graphs/worker.h"
#include "train/bucket_step.h"
#include "train/cluster.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace dflash {

namespace {
using Clock = std::chrono::steady_clock;

struct MultiOptions {
  std::string model = "qwen3-8b";
  Bucket bucket{4096, 512, 1};
  int steps = 20, gpus = 2;
  bool checkpointing = true, overlap = false, shard = false, bf16 = false;
  bool processes = false;  // one process per GPU (torchrun, srun): gpus is the launcher's world
};

// One GPU's replica: frozen tensors, drafter, optimizer, step, update and (overlap) reduction.
struct Rank {
  Context ctx;
  Tensor embed, head;
  std::unique_ptr<Drafter> drafter;
  std::unique_ptr<AdamWOptimizer> optimizer;
  std::unique_ptr<UpdateStep> update;
  std::unique_ptr<BucketStep> step;
  std::unique_ptr<OverlappedReduction> overlap;
  std::unique_ptr<Engine> engine;
  const Program *train = nullptr, *upd = nullptr;
  // Where rank 0's steps go: the train program (with the overlapped reduction's tail) and the
  // update (with the reduction when not overlapped), from timing events on its stream.
  void* marks[3] = {nullptr, nullptr, nullptr};
  std::vector<double> train_ms, update_ms;

  Rank(const DrafterSpec& spec, const MultiOptions& o, int rank, int gpu, Communicator* comm)
      : ctx(Device::cuda(gpu), rank) {
    ContextScope scope(ctx);
    embed = Tensor::persistent({spec.vocab_size, spec.hidden_size}, DType::bf16, "embed");
    head = Tensor::persistent({spec.vocab_size, spec.hidden_size}, DType::bf16, "lm_head");
    fill_random(embed, 1, 1.0f);
    fill_random(head, 2, 0.02f);
    drafter = std::make_unique<Drafter>(spec, embed, head, ShardLayout{o.gpus, rank, o.shard && o.gpus > 1},
                                        /*random_init=*/false);
    fill_random(drafter->params().flat_master(), 3 + uint64_t(rank), 0.02f);
    fill_random(drafter->params().flat_compute(), 3, 0.02f);
    drafter->params().sync_compute_copy();
    OptimizerConfig opt;
    opt.total_steps = 1000;
    opt.warmup_steps = 40;
    optimizer = std::make_unique<AdamWOptimizer>(drafter->params(), opt);
    optimizer->set_zero_grads(false);  // one micro-batch per step: each backward writes them fresh
    UpdateOptions u;
    u.comm = comm;
    u.rank = rank;
    if (o.overlap && comm) {
      overlap = std::make_unique<OverlappedReduction>(comm, rank, drafter->params(),
                                                      reduction_plan_of(drafter->params(), spec.num_hidden_layers), o.bf16);
      OverlappedReduction* ov = overlap.get();
      drafter->set_layer_backward_hook([ov](int64_t l, LayerGrads done) { ov->after_layer(l, done); });
      u.grads_reduced = true;
    }
    update = std::make_unique<UpdateStep>(*optimizer, drafter->params(), u);
    step = std::make_unique<BucketStep>(*drafter, nullptr, o.bucket, 1024, true);
    step->set_fresh_grads(true);
    fill_random(step->hidden().reshape({o.bucket.batch * o.bucket.seq, spec.num_features() * spec.hidden_size}), 4, 1.0f);
    HostBatch host;
    host.resize(o.bucket, 0, false);
    std::mt19937_64 rng(100 + uint64_t(rank));
    for (auto& id : host.input_ids) id = int32_t(rng() % uint64_t(spec.vocab_size - 1));
    std::fill(host.loss_mask.begin(), host.loss_mask.end(), 1);
    host.anchors = random_anchors(o.bucket, spec.block_size, 7 + uint64_t(rank));
    std::fill(host.keep.begin(), host.keep.end(), 1);
    step->stage(host);
    engine = std::make_unique<Engine>(ctx);
    BucketStep* s = step.get();
    OverlappedReduction* ov = overlap.get();
    engine->add("train", o.bucket, [s, ov](bool c) {
      if (ov) ov->arm();
      s->train_body(c);
      if (ov) ov->finish();
    }, o.checkpointing);
    UpdateStep* up = update.get();
    engine->add("update", Bucket{}, [up](bool) { up->body(); }, false);
#ifdef DFLASH_CUDA
    for (void*& m : marks) m = cuda_backend::create_timing_event(gpu);
#endif
  }
  ~Rank() {
#ifdef DFLASH_CUDA
    for (void* m : marks)
      if (m) cuda_backend::destroy_event(m);
#endif
  }

  // One step: train, update, wait; the two phases' times kept.
  void step_once() {
    ContextScope scope(ctx);
#ifdef DFLASH_CUDA
    void* s = ctx.cuda_stream();
    cuda_backend::record_event(marks[0], s);
    train->replay();
    cuda_backend::record_event(marks[1], s);
    upd->replay();
    cuda_backend::record_event(marks[2], s);
    ctx.synchronize();
    train_ms.push_back(cuda_backend::elapsed_ms(marks[0], marks[1]));
    update_ms.push_back(cuda_backend::elapsed_ms(marks[1], marks[2]));
#else
    train->replay();
    upd->replay();
    ctx.synchronize();
#endif
  }
};

double median_after_warmup(std::vector<double> v) {
  if (v.size() <= 3) return 0;
  v.erase(v.begin(), v.begin() + 3);
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Result {
  double step_ms = 0;  // median
  double mean_ms = 0;  // over the timed steps: what the throughput is
  double train_ms = 0, update_ms = 0;  // rank 0's medians (CUDA events)
  size_t persistent = 0, arena = 0;
};

// The timed steps (after 3 untimed ones) of `step`, which returns when the step is complete.
Result time_steps(const MultiOptions& o, const std::function<void()>& step, const Rank& r0) {
  std::vector<double> ms;
  for (int i = 0; i < o.steps + 3; ++i) {
    auto a = Clock::now();
    step();
    if (i >= 3) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
  }
  Result res;
  for (double m : ms) res.mean_ms += m / double(ms.size());
  std::sort(ms.begin(), ms.end());
  res.step_ms = ms[ms.size() / 2];
  res.train_ms = median_after_warmup(r0.train_ms);
  res.update_ms = median_after_warmup(r0.update_ms);
  res.persistent = r0.ctx.persistent_bytes();
  res.arena = r0.engine->arena_bytes();
  return res;
}

void build(Rank& r) {
  ContextScope scope(r.ctx);
  r.engine->build(available_memory_bytes(r.ctx.device()));
  r.train = &r.engine->program("train");
  r.upd = &r.engine->program("update");
}

// This process is one rank of a run started by torchrun or srun: its GPU, the rendezvous and the
// NCCL communicator as dflash-train makes them (default runtime settings), the step timed on every
// rank (the collectives keep them in step) and reported by rank 0.
Result run_process(const MultiOptions& o, const LaunchInfo& launch) {
  const DrafterSpec spec = bench_spec(o.model);
  std::unique_ptr<ProcessGroup> pg = ProcessGroup::join(Config{}, launch, [&](const std::string& line) {
    if (launch.rank == 0) std::printf("%s\n", line.c_str());
  });
  const ClusterSpec c = pg->spec();
  Rank r(spec, o, launch.rank, c.devices[0].index, c.comm);
  build(r);
  Result res = time_steps(o, [&] { r.step_once(); }, r);
  pg->finish();
  return res;
}

Result run(const MultiOptions& o) {
  const DrafterSpec spec = bench_spec(o.model);
  std::unique_ptr<Communicator> comm;
#ifdef DFLASH_NCCL
  if (o.gpus > 1) {
    std::vector<int> ids;
    for (int g = 0; g < o.gpus; ++g) ids.push_back(g);
    comm = std::make_unique<NcclCommunicator>(ids);
  }
#else
  DF_CHECK(o.gpus == 1, "dflash-bench multi --gpus=" << o.gpus << ": this build has no NCCL");
#endif
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int g = 0; g < o.gpus; ++g) ranks.push_back(std::make_unique<Rank>(spec, o, g, g, comm.get()));
  for (auto& r : ranks) build(*r);
  std::vector<std::unique_ptr<WorkerThread>> threads;
  for (auto& r : ranks) {
    Rank* p = r.get();
    threads.push_back(std::make_unique<WorkerThread>([p] { p->step_once(); }));
  }
  Result res = time_steps(o, [&] {
    for (auto& t : threads) t->start();
    for (auto& t : threads) t->wait();
  }, *ranks[0]);
  threads.clear();
  return res;
}

void report(const MultiOptions& o, const Result& r, const Result* one) {
  const double seq_per_s = double(o.gpus) * double(o.bucket.batch) / (r.step_ms / 1000);
  const double tokens_per_s = double(o.gpus) * double(o.bucket.batch * o.bucket.seq) / (r.mean_ms / 1000);
  std::printf("%-5d %-8s %-6s %-5s %10.2f %9.2f %9.2f %12.2f %12.0f %14.2f %12.2f", o.gpus,
              o.overlap ? (o.bf16 ? "bf16" : "f32") : "off", o.shard ? "yes" : "no", o.checkpointing ? "on" : "off",
              r.step_ms, r.train_ms, r.update_ms, seq_per_s, tokens_per_s, double(r.persistent) / double(1ull << 30),
              double(r.arena) / double(1ull << 30));
  double ratio = 0;
  if (one) {
    ratio = seq_per_s / (double(o.bucket.batch) / (one->step_ms / 1000));
    std::printf(" %8.3fx", ratio);
  }
  std::printf("\n{\"bench\":\"multi\",\"model\":\"%s\",\"seq\":%lld,\"anchors\":%lld,\"gpus\":%d,\"processes\":%s,"
              "\"overlap\":%s,\"reduce_dtype\":\"%s\",\"shard\":%s,\"checkpointing\":%s,\"steps\":%d,\"step_ms\":%.3f,"
              "\"mean_step_ms\":%.3f,\"train_ms\":%.3f,\"update_ms\":%.3f,\"sequences_per_s\":%.3f,"
              "\"tokens_per_s\":%.1f,\"persistent_bytes_per_gpu\":%zu,\"arena_bytes\":%zu,\"throughput_vs_1gpu\":%.4f}\n",
              o.model.c_str(), (long long)o.bucket.seq, (long long)o.bucket.anchors, o.gpus,
              o.processes ? "true" : "false", o.overlap ? "true" : "false", o.bf16 ? "bf16" : "f32",
              o.shard ? "true" : "false", o.checkpointing ? "true" : "false", o.steps, r.step_ms, r.mean_ms, r.train_ms,
              r.update_ms, seq_per_s, tokens_per_s, r.persistent, r.arena, ratio);
}
}  // namespace

// args: --model=, --bucket=SEQ:ANCHORS, --steps=, --gpus=, --overlap, --bf16, --shard,
// --no-checkpointing, --baseline (also time one GPU first and report the ratio).
int bench_multi(const std::vector<std::string>& args) {
  MultiOptions o;
  bool baseline = false;
  for (const std::string& a : args) {
    if (a.rfind("--model=", 0) == 0) o.model = a.substr(8);
    else if (a.rfind("--steps=", 0) == 0) o.steps = std::stoi(a.substr(8));
    else if (a.rfind("--gpus=", 0) == 0) o.gpus = std::stoi(a.substr(7));
    else if (a == "--overlap") o.overlap = true;
    else if (a == "--bf16") o.bf16 = true;
    else if (a == "--shard") o.shard = true;
    else if (a == "--no-checkpointing") o.checkpointing = false;
    else if (a == "--baseline") baseline = true;
    else if (a == "--cuda") continue;
    else if (a.rfind("--bucket=", 0) == 0) {
      std::string v = a.substr(9);
      size_t colon = v.find(':');
      DF_CHECK(colon != std::string::npos, "--bucket=SEQ:ANCHORS, e.g. --bucket=4096:512");
      o.bucket = {std::stoll(v.substr(0, colon)), std::stoll(v.substr(colon + 1)), 1};
    } else {
      DF_FAIL("dflash-bench multi: unknown argument '" << a << "'");
    }
  }
  DF_CHECK(o.gpus >= 1, "--gpus=" << o.gpus << " must be at least 1");
  DF_CHECK(o.steps >= 1, "--steps=" << o.steps << " must be at least 1 (the timed steps, after 3 untimed)");
  const LaunchInfo launch = launch_from_environment();
  if (launch.distributed()) {
    DF_CHECK(!baseline, "dflash-bench multi under " << launch.launcher << ": --baseline times one GPU in this "
                                                    << "process; fix: run the one-GPU figure as its own command "
                                                    << "(dflash-bench multi --gpus=1, without the launcher)");
    o.processes = true;
    o.gpus = launch.world;
  }
  const bool print = launch.rank == 0;
  if (print) {
    std::printf("multi: model %s, bucket %lld:%lld, %d steps timed (median and mean), %s\n", o.model.c_str(),
                (long long)o.bucket.seq, (long long)o.bucket.anchors, o.steps,
                o.processes ? ("one process per GPU (" + launch.describe() + ")").c_str() : "one thread per GPU");
    std::printf("%-5s %-8s %-6s %-5s %10s %9s %9s %12s %12s %14s %12s %9s\n", "gpus", "overlap", "shard", "ckpt",
                "step ms", "train ms", "upd ms", "seq/s", "tokens/s", "persist GiB/GPU", "arena GiB", "vs 1 GPU");
  }
  if (o.processes) {
    const Result r = run_process(o, launch);
    if (print) report(o, r, nullptr);
    return 0;
  }
  Result one;
  if (baseline) {
    MultiOptions b = o;
    b.gpus = 1;
    b.overlap = b.shard = false;
    one = run(b);
    report(b, one, &one);
  }
  report(o, run(o), baseline ? &one : nullptr);
  return 0;
}

}  // namespace dflash
