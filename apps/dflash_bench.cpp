// dflash-bench: measured figures. `workers` times the toy model's recorded train+update step on
// 1 and 2 CPU worker threads (throughput must scale: nothing on the replay path takes a global
// lock); `toy` times replay of the toy model's step on one device (CUDA when available); `step`
// times the DFlash drafter's step on docs/BENCH.md's shapes (apps/bench_drafter.cpp);
// `attention` times the DFlash attention kernels, version 1 against version 2 (apps/bench_attention.cpp);
// `multi` times the step on several GPUs through NCCL (apps/bench_multi.cpp); `gemms` times each GEMM
// shape of a step with cuBLAS's algorithm and cuBLASLt's candidates (apps/bench_gemms.cpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "apps/bench.h"
#include "dist/comm.h"
#include "graphs/worker.h"
#include "train/toy_worker.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

using namespace dflash;


namespace {
using Clock = std::chrono::steady_clock;

ToyConfig bench_model() {
  ToyConfig c;
  c.vocab = 4096;
  c.hidden = 256;
  c.intermediate = 768;
  c.layers = 4;
  return c;
}

// Steps per second of `world` CPU workers each replaying train + update (one micro-batch each).
double worker_throughput(int world, int steps, const Bucket& bucket) {
  ToyConfig cfg = bench_model();
  int64_t n;
  {
    Context probe(Device::cpu());
    ContextScope s(probe);
    n = ToyLM(cfg).params().padded_numel();
  }
  ThreadCommunicator comm(world, n);
  std::vector<std::unique_ptr<ToyReplica>> replicas;
  for (int r = 0; r < world; ++r) {
    replicas.push_back(std::make_unique<ToyReplica>(Device::cpu(r), cfg, std::vector<Bucket>{bucket},
                                                    OptimizerConfig{}, true, true, &comm, r, 1, false));
    comm.register_buffer(r, replicas.back()->model->params().flat_grads().data<float>());
    replicas.back()->build_programs(size_t(1) << 40);
    ContextScope scope(replicas.back()->ctx);
    replicas.back()->steps[0]->stage(toy_batch(uint64_t(r), bucket.batch, bucket.seq, bucket.seq, cfg.vocab));
  }
  std::vector<std::unique_ptr<WorkerThread>> threads;
  for (auto& rep : replicas) {
    ToyReplica* p = rep.get();
    threads.push_back(std::make_unique<WorkerThread>([p] {
      p->engine->program("train/" + std::to_string(p->steps[0]->bucket().seq)).replay();
      p->engine->program("update").replay();
    }));
  }
  auto run = [&](int k) {
    for (int i = 0; i < k; ++i) {
      for (auto& t : threads) t->start();
      for (auto& t : threads) t->wait();
    }
  };
  run(2);  // warm-up
  auto t0 = Clock::now();
  run(steps);
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return double(steps) / s;
}

int cmd_workers(int steps) {
  Bucket bucket{256, 1, 4};
  std::printf("toy model: hidden 256, intermediate 768, 4 layers, vocab 4096; bucket seq %lld batch %lld; "
              "checkpointing on; %d steps\n",
              (long long)bucket.seq, (long long)bucket.batch, steps);
  double one = worker_throughput(1, steps, bucket);
  double two = worker_throughput(2, steps, bucket);
  double seq_per_step = double(bucket.batch);
  std::printf("%-10s %12s %16s\n", "workers", "steps/s", "sequences/s");
  std::printf("%-10d %12.2f %16.1f\n", 1, one, one * seq_per_step);
  std::printf("%-10d %12.2f %16.1f\n", 2, two, 2 * two * seq_per_step);
  double scale = 2 * two / one;
  std::printf("2-worker throughput / 1-worker throughput: %.2fx\n", scale);
  std::printf("{\"bench\":\"workers\",\"one_worker_seq_per_s\":%.2f,\"two_worker_seq_per_s\":%.2f,\"scaling\":%.3f}\n",
              one * seq_per_step, 2 * two * seq_per_step, scale);
  return 0;
}

int cmd_toy(int steps, bool cuda) {
  Device dev = cuda ? Device::cuda(0) : Device::cpu();
  ToyConfig cfg = bench_model();
  std::vector<Bucket> buckets = {{512, 1, 8}, {2048, 1, 2}};
  auto t0 = Clock::now();
  ToyReplica r(dev, cfg, buckets, OptimizerConfig{}, true, true);
  double startup = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("toy model on %s, startup (record %zu programs) %.1f ms\n", dev.str().c_str(), buckets.size() + 1, startup);
  for (size_t i = 0; i < buckets.size(); ++i) {
    {
      ContextScope scope(r.ctx);
      r.steps[i]->stage(toy_batch(1, buckets[i].batch, buckets[i].seq, buckets[i].seq, cfg.vocab));
    }
    std::vector<double> ms;
    for (int k = 0; k < steps + 3; ++k) {
      auto a = Clock::now();
      r.train(i);
      r.step_update();
      if (k >= 3) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("bucket seq %lld batch %lld: median step %.3f ms (train + update, host-synchronised)\n",
                (long long)buckets[i].seq, (long long)buckets[i].batch, ms[ms.size() / 2]);
  }
  return 0;
}
// "F+P" or "F": layers recomputed entirely and in part.
std::optional<Recompute> parse_recompute(const std::string& v) {
  const size_t plus = v.find('+');
  const std::string f = v.substr(0, plus), p = plus == std::string::npos ? "0" : v.substr(plus + 1);
  auto number = [](const std::string& s) {
    return !s.empty() && s.size() < 10 && s.find_first_not_of("0123456789") == std::string::npos;
  };
  if (!number(f) || !number(p)) return std::nullopt;
  return Recompute{std::stoll(f), std::stoll(p)};
}
}  // namespace

int main(int argc, char** argv) {
  try {
    std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "causal-attention") return bench_causal_attention(argc - 2, argv + 2);
    if (cmd == "multi") return bench_multi(std::vector<std::string>(argv + 2, argv + argc));
    int steps = 20, replays = 5;
    bool cuda = false, checkpointing = true, online = false, target = false, spec = false, generate = false;
    std::vector<int64_t> seqs;
    std::string model = "small";
    std::vector<Bucket> buckets;
    int64_t seq = 0, anchors = 0, heads = 32, kv_heads = 8, head_dim = 128, batch = 1;  // attention
    int reps = 20, candidates = 16;
    BenchMemory ck;
    std::vector<int64_t> contexts, batches;
    for (int i = 2; i < argc; ++i) {
      std::string a = argv[i];
      if ((cmd == "generate" || cmd == "profile") && a.rfind("--batch=", 0) == 0) {
        batches.push_back(std::stoll(a.substr(8)));
        continue;
      }
      if ((cmd == "spec" || cmd == "profile" || cmd == "generate") && a.rfind("--context=", 0) == 0) {
        contexts.push_back(std::stoll(a.substr(10)));
        continue;
      }
      if (a.rfind("--steps=", 0) == 0) steps = std::stoi(a.substr(8));
      else if (a.rfind("--replays=", 0) == 0) replays = std::stoi(a.substr(10));
      else if (a == "--cuda") cuda = true;
      else if (a == "--gemm-tuning") ck.gemm_tuning = true;
      else if (a == "--no-checkpointing") checkpointing = false;
      else if (a.rfind("--arena-gb=", 0) == 0) ck.arena_gb = std::stod(a.substr(11));
      else if (a.rfind("--chunk-rows=", 0) == 0) ck.chunk_rows = std::stoll(a.substr(13));
      else if (a.rfind("--recompute=", 0) == 0) {
        std::optional<Recompute> r = parse_recompute(a.substr(12));
        if (!r) {
          std::fprintf(stderr, "dflash-bench: %s: give F+P (F layers recomputed entirely, P in part), e.g. "
                               "--recompute=4+1, or F alone\n", a.c_str());
          return 2;
        }
        ck.recompute = r;
      }
      else if (a == "--online") online = true;
      else if (a == "--target") target = true;
      else if (a == "--spec") spec = true;
      else if (a == "--generate") generate = true;
      else if (a.rfind("--seq=", 0) == 0) seqs.push_back(std::stoll(a.substr(6)));
      else if (a.rfind("--anchors=", 0) == 0) anchors = std::stoll(a.substr(10));
      else if (a.rfind("--heads=", 0) == 0) heads = std::stoll(a.substr(8));
      else if (a.rfind("--kv-heads=", 0) == 0) kv_heads = std::stoll(a.substr(11));
      else if (a.rfind("--head-dim=", 0) == 0) head_dim = std::stoll(a.substr(11));
      else if (a.rfind("--batch=", 0) == 0) batch = std::stoll(a.substr(8));
      else if (a.rfind("--reps=", 0) == 0) reps = std::stoi(a.substr(7));
      else if (a.rfind("--candidates=", 0) == 0) candidates = std::stoi(a.substr(13));
      else if (a.rfind("--model=", 0) == 0) model = a.substr(8);
      else if (a.rfind("--bucket=", 0) == 0) {
        std::string v = a.substr(9);
        size_t colon = v.find(':');
        if (colon == std::string::npos) {
          std::fprintf(stderr, "dflash-bench: --bucket=SEQ:ANCHORS, e.g. --bucket=4096:512\n");
          return 2;
        }
        buckets.push_back({std::stoll(v.substr(0, colon)), std::stoll(v.substr(colon + 1)), 1});
      }
      else {
        std::fprintf(stderr, "dflash-bench: unknown argument '%s'\n", a.c_str());
        return 2;
      }
    }
    ck.on = checkpointing;
    if (ck.recompute && !ck.on) {
      std::fprintf(stderr, "dflash-bench: --recompute and --no-checkpointing contradict each other; drop one\n");
      return 2;
    }
    if (cmd == "workers") return cmd_workers(steps);
    if (cmd == "toy") return cmd_toy(steps, cuda);
    if (cmd == "step") {
      if (buckets.empty()) buckets = {{512, 64, 1}, {1024, 128, 1}, {2048, 256, 1}};
      return bench_drafter_step(model, buckets, steps, cuda, ck, online);
    }
    if (cmd == "target") {
      if (seqs.empty()) seqs = {1024, 4096, 16384};
      return bench_target(model == "small" ? "qwen3-8b" : model, seqs, steps, cuda);
    }
    if (cmd == "profile" && spec) {
      if (contexts.empty()) contexts = {4096};
      return bench_spec(model, contexts, replays, cuda, true);
    }
    if (cmd == "profile" && generate) {
      if (contexts.empty()) contexts = {768};
      if (batches.empty()) batches = {32};
      return bench_generate(model, batches, contexts, replays, cuda, true, ck.gemm_tuning);
    }
    if (cmd == "profile" && target) {
      if (seqs.empty()) seqs = {4096};
      return bench_target(model == "small" ? "qwen3-8b" : model, seqs, replays, cuda, true);
    }
    if (cmd == "attention") {
      std::vector<AttentionBenchShape> shapes;
      if (!seqs.empty()) seq = seqs[0];
      if (seq == 0 && anchors == 0) {
        for (auto [s, n] : {std::pair<int64_t, int64_t>{4096, 512}, {65536, 512}, {1024, 128}})
          shapes.push_back({batch, s, n, heads, kv_heads, head_dim});
      } else {
        shapes.push_back({batch, seq ? seq : 4096, anchors ? anchors : 512, heads, kv_heads, head_dim});
      }
      return bench_attention(shapes, reps);
    }
    if (cmd == "spec") {
      if (contexts.empty()) contexts = {1024, 4096};
      return bench_spec(model, contexts, steps, cuda);
    }
    if (cmd == "generate") {
      if (contexts.empty()) contexts = {512, 2048};
      if (batches.empty()) batches = {32, 128};
      return bench_generate(model, batches, contexts, steps, cuda, false, ck.gemm_tuning);
    }
    if (cmd == "gemms") {
      if (buckets.empty()) buckets = {{4096, 512, 1}};
      return bench_drafter_gemms(model, buckets, reps, candidates, cuda, ck, online);
    }
    if (cmd == "profile") {
      if (buckets.empty()) buckets = {{512, 64, 1}};
      return bench_drafter_profile(model, buckets, replays, cuda, ck, online);
    }
    std::fprintf(stderr,
                 "usage: dflash-bench workers [--steps=N]   CPU: 1 vs 2 worker threads\n"
                 "       dflash-bench toy [--cuda] [--steps=N] toy model step replay time\n"
                 "       dflash-bench step [--cuda] --model=small|qwen3-8b [--bucket=SEQ:ANCHORS ...] [--steps=N]\n"
                 "                         [--no-checkpointing] [--online] [--arena-gb=G] [--recompute=F+P] [--chunk-rows=N]\n"
                 "                         [--gemm-tuning] (time cuBLASLt's algorithms per GEMM shape at startup)\n"
                 "                         the DFlash drafter step of docs/BENCH.md (--recompute: F layers\n"
                 "                         recomputed entirely, P in part, forced; else fitted to the arena)\n"
                 "                         (--online: the frozen target's forward at Qwen3-8B dims runs in the step)\n"
                 "       dflash-bench target [--cuda] [--model=qwen3-8b] [--seq=S ...] [--steps=N]   the target's forward\n"
                 "       dflash-bench profile [--cuda] --model=small|qwen3-8b [--bucket=SEQ:ANCHORS ...] [--replays=N]\n"
                 "                         [--no-checkpointing] [--online] [--arena-gb=G] [--recompute=F+P] [--chunk-rows=N]\n"
                 "                         per-op time table of that step (CUPTI on the GPU; --online: with the target)\n"
                 "       dflash-bench profile --cuda --target [--seq=S ...] [--replays=N]   the same for the target's forward\n"
                 "       dflash-bench profile [--cuda] --spec [--model=qwen3-8b|small] [--context=N ...] [--replays=N]\n"
                 "                         the same for speculative decoding's target-alone step and one round\n"
                 "       dflash-bench profile [--cuda] --generate [--model=qwen3-8b|small] [--batch=B ...] [--context=N ...]\n"
                 "                         [--replays=N]   the batched decode step's per-op table at each batch and length\n"
                 "       dflash-bench gemms --cuda --model=small|qwen3-8b [--bucket=SEQ:ANCHORS ...] [--reps=20] [--candidates=16]\n"
                 "                         [--online] each GEMM shape of that step (--online: and of the target's forward):\n"
                 "                         cuBLAS's algorithm against cuBLASLt's candidates\n"
                 "       dflash-bench attention [--seq=S] [--anchors=N] [--heads=32] [--kv-heads=8] [--head-dim=128]\n"
                 "                         [--batch=1] [--reps=20]   attention kernels v1 against v2 as kernels/heuristics.h\n"
                 "                         configures it (default shapes 4096:512, 65536:512, 1024:128)\n"
                 "       dflash-bench spec [--cuda] [--model=qwen3-8b|small] [--context=N ...] [--steps=N]\n"
                 "                         speculative decoding: one round and one target-alone step (random weights)\n"
                 "       dflash-bench generate [--cuda] [--model=qwen3-8b|small] [--batch=B ...] [--context=N ...] [--steps=N]\n"
                 "                         [--gemm-tuning] batched decoding (dflash-train generate): the decode step against its bandwidth\n"
                 "                         floor, then a whole run of 2 x B prompts (random weights)\n"

                 "       dflash-bench multi --gpus=N [--model=M] [--bucket=SEQ:ANCHORS] [--steps=N] [--overlap [--bf16]]\n"
                 "                         [--shard] [--no-checkpointing] [--baseline]   the step on N GPUs (NCCL)\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dflash-bench: %s\n", e.what());
    return 1;
  }
}
