// dflash-bench step: the DFlash drafter's training step (forward + backward + optimizer) on the
// shapes of docs/BENCH.md, recorded and replayed, with random bf16 target features already on
// the device (the target forward is not timed). Reports startup, median step time, TFLOP/s
// counted the way the anchors count, and memory.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "graphs/engine.h"
#include "graphs/startup_report.h"
#include "apps/bench.h"
#include "graphs/update.h"
#include "runtime/profile.h"
#include "train/bucket_step.h"


namespace dflash {

using Clock = std::chrono::steady_clock;

DrafterSpec bench_spec(const std::string& model) {
  DrafterSpec s;
  s.vocab_size = 151936;
  s.block_size = 16;
  s.target_layer_ids = {1, 9, 17, 25, 33};
  s.num_target_layers = 36;
  s.mask_token_id = 151669;
  s.loss_decay_gamma = 7.0;
  s.rope_theta = 1000000.0;
  if (model == "small") {
    s.hidden_size = 1024, s.intermediate_size = 3072, s.num_hidden_layers = 2;
    s.num_attention_heads = 16, s.num_key_value_heads = 8, s.head_dim = 64;
  } else if (model == "qwen3-8b") {
    s.hidden_size = 4096, s.intermediate_size = 12288, s.num_hidden_layers = 5;
    s.num_attention_heads = 32, s.num_key_value_heads = 8, s.head_dim = 128;
  } else if (model == "tiny") {  // CI-sized: the profiler's table checked on the CPU
    s.vocab_size = 512, s.mask_token_id = 511;
    s.hidden_size = 64, s.intermediate_size = 128, s.num_hidden_layers = 2;
    s.num_attention_heads = 4, s.num_key_value_heads = 2, s.head_dim = 16;
  } else {
    DF_FAIL("--model=" << model << ": use small or qwen3-8b (docs/BENCH.md), or tiny (a CI-sized drafter)");
  }
  return s;
}

// Fills a tensor with N(0, std^2) values, tiling one random block (fast for 10^9 elements; never
// zeros, which would time unrealistically).
void fill_random(const Tensor& t, uint64_t seed, float std) {
  const int64_t rows = t.dim(0), cols = t.numel() / std::max<int64_t>(rows, 1);
  const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 22) / std::max<int64_t>(cols, 1));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, std);
  size_t n = size_t(std::min(rows, chunk) * cols);
  std::vector<float> f(n);
  for (float& x : f) x = normal(rng);
  std::vector<uint16_t> b;
  if (t.dtype() == DType::bf16) {
    b.resize(n);
    for (size_t i = 0; i < n; ++i) b[i] = f32_to_bf16(f[i]);
  }
  for (int64_t r = 0; r < rows; r += chunk) {
    int64_t e = std::min(rows, r + chunk);
    size_t bytes = size_t((e - r) * cols) * dtype_size(t.dtype());
    t.rows(r, e).copy_from_host(t.dtype() == DType::bf16 ? static_cast<const void*>(b.data()) : f.data(), bytes);
  }
}

namespace {

// FLOPs of one step as docs/MODEL.md, "FLOP counting", counts them.
double step_flops(const DrafterSpec& s, const Bucket& b, const std::vector<int32_t>& anchors) {
  const double B = double(b.batch), S = double(b.seq), N = double(b.anchors), bs = double(s.block_size);
  const double T = N * bs, H = double(s.hidden_size), I = double(s.intermediate_size), V = double(s.vocab_size);
  const double q = double(s.num_attention_heads * s.head_dim), kv = double(s.num_key_value_heads * s.head_dim);
  const double F = double(s.num_features());
  double fc = 2 * (2 * B * S * F * H * H);  // forward and weight gradient
  double per_layer = 2 * B * (T * H * q + 2 * (S + T) * H * kv + T * q * H + 3 * T * H * I);
  double layers = 3 * double(s.num_hidden_layers) * per_layer;
  double visible = 0;
  for (int32_t a : anchors) visible += double(a) + bs;
  double attn = 3.5 * double(s.num_hidden_layers) * 4 * bs * visible * double(s.head_dim) * double(s.num_attention_heads);
  double head = 2 * (2 * B * T * H * V);  // forward and input gradient
  return fc + layers + attn + head;
}

}  // namespace

// Sorted distinct anchors for every sequence of the batch (all kept), seeded.
std::vector<int32_t> random_anchors(const Bucket& b, int64_t bs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> all;
  for (int64_t r = 0; r < b.batch; ++r) {
    std::vector<int32_t> pos(size_t(b.seq - bs + 1));
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = int32_t(i);
    for (int64_t i = 0; i < b.anchors; ++i) std::swap(pos[size_t(i)], pos[size_t(i) + rng() % (pos.size() - size_t(i))]);
    std::sort(pos.begin(), pos.begin() + b.anchors);
    all.insert(all.end(), pos.begin(), pos.begin() + b.anchors);
  }
  return all;
}

namespace {
// Everything a drafter benchmark needs: the context, random frozen tensors and parameters, the
// optimizer, one BucketStep per bucket and the engine (recorded and sealed by build()).
struct DrafterBench {
  DrafterSpec spec;
  Device dev;
  Context ctx;
  ContextScope scope;
  Tensor embed, head;
  std::unique_ptr<Drafter> drafter;
  std::unique_ptr<AdamWOptimizer> optimizer;
  std::unique_ptr<UpdateStep> update;
  std::vector<std::unique_ptr<BucketStep>> steps;
  std::unique_ptr<Engine> engine;
  double load_s = 0, startup_ms = 0;

  std::unique_ptr<Target> target;  // online mode: the frozen target runs in the step

  DrafterBench(const std::string& model, const std::vector<Bucket>& buckets, bool cuda, bool online = false,
               int64_t chunk_rows = 1024)
      : spec(bench_spec(model)), dev(cuda ? Device::cuda(0) : Device::cpu()), ctx(dev), scope(ctx) {
    DType compute = dev.is_cuda() ? DType::bf16 : DType::f32;
    auto t_load = Clock::now();
    if (online) {
      int64_t longest = 0;
      for (const Bucket& b : buckets) longest = std::max(longest, b.seq);
      target = make_bench_target(bench_target_spec(spec), spec.target_layer_ids, longest);
      embed = target->embed_tokens();
      head = target->lm_head();
    } else {
      embed = Tensor::persistent({spec.vocab_size, spec.hidden_size}, compute, "embed");
      head = Tensor::persistent({spec.vocab_size, spec.hidden_size}, compute, "lm_head");
      fill_random(embed, 1, 1.0f);
      fill_random(head, 2, 0.02f);
    }
    drafter = std::make_unique<Drafter>(spec, embed, head, ShardLayout{}, /*random_init=*/false);
    fill_random(drafter->params().flat_master(), 3, 0.02f);
    drafter->params().sync_compute_copy();
    OptimizerConfig opt;
    opt.total_steps = 1000;
    opt.warmup_steps = 40;
    optimizer = std::make_unique<AdamWOptimizer>(drafter->params(), opt);
    optimizer->set_zero_grads(false);  // one micro-batch per step: each backward writes them fresh
    update = std::make_unique<UpdateStep>(*optimizer, drafter->params(), nullptr, 0, 1);
    for (const Bucket& b : buckets) {
      steps.push_back(std::make_unique<BucketStep>(*drafter, target.get(), b, chunk_rows, true));
      steps.back()->set_fresh_grads(true);
      if (!target)
        fill_random(steps.back()->hidden().reshape({b.batch * b.seq, spec.num_features() * spec.hidden_size}), 4, 1.0f);
    }
    load_s = std::chrono::duration<double>(Clock::now() - t_load).count();
  }

  void build(const BenchMemory& ck) {
    auto t0 = Clock::now();
    engine = std::make_unique<Engine>(ctx);
    ctx.set_gemm_tuning(ck.gemm_tuning);
    engine->set_arena_budget(size_t(ck.arena_gb * double(1ull << 30)));
    engine->force_recompute(ck.recompute);
    for (auto& s : steps) {
      BucketStep* step = s.get();
      if (target)
        engine->add(target_name(step->bucket()), step->bucket(), [step](bool) { step->target_body(); }, false);
      if (ck.on)
        engine->add_fitted(train_name(step->bucket()), step->bucket(),
                           [step](Recompute r) { step->train_body_recomputing(r); }, step->layers(),
                           /*partial=*/true, step->partial_recompute_cost());
      else
        engine->add(train_name(step->bucket()), step->bucket(), [step](bool) { step->train_body(false); }, false);
    }
    UpdateStep* u = update.get();
    engine->add("update", Bucket{}, [u](bool) { u->body(); }, false);
    engine->build(available_memory_bytes(dev));
    startup_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }

  // Online mode: the target's forward up to the deepest layer the drafter reads.
  double target_flops(const Bucket& b) const {
    int64_t deepest = 0;
    for (int64_t id : spec.target_layer_ids) deepest = std::max(deepest, id);
    return target_forward_flops(target->spec(), b.batch, b.seq, deepest + 1);
  }

  static std::string train_name(const Bucket& b) { return "train/" + std::to_string(b.seq); }
  static std::string target_name(const Bucket& b) { return "target/" + std::to_string(b.seq); }

  // Three input sets per bucket (rotated while timing), all anchors kept.
  void make_batches(const Bucket& b, HostBatch host[3], std::vector<int32_t> anchors[3]) const {
    for (int k = 0; k < 3; ++k) {
      host[k].resize(b, 0, false);
      std::mt19937_64 rng(100 + uint64_t(k));
      for (auto& id : host[k].input_ids) id = int32_t(rng() % uint64_t(spec.vocab_size - 1));
      std::fill(host[k].loss_mask.begin(), host[k].loss_mask.end(), 1);
      anchors[k] = random_anchors(b, spec.block_size, 7 + uint64_t(k));
      host[k].anchors = anchors[k];
      std::fill(host[k].keep.begin(), host[k].keep.end(), 1);
    }
  }

  // (query, key) pairs the attention visits for one batch: each kept block's bs queries see the
  // context before the anchor and the block itself.
  double visible_pairs(const std::vector<int32_t>& anchors) const {
    double pairs = 0;
    for (int32_t a : anchors) pairs += double(spec.block_size) * (double(a) + double(spec.block_size));
    return pairs;
  }
};

const ProgramReport& report_of(const Engine& engine, const std::string& name) {
  for (const ProgramReport& p : engine.report())
    if (p.name == name) return p;
  DF_FAIL("no program '" << name << "' in the engine's report");
}

}  // namespace

std::string BenchMemory::str() const {
  if (!on) return "off";
  char s[128];
  if (recompute)
    std::snprintf(s, sizeof s, "on, %lld+%lldp forced", (long long)recompute->full, (long long)recompute->partial);
  else if (arena_gb > 0)
    std::snprintf(s, sizeof s, "on, fitted to an arena of up to %.3g GiB", arena_gb);
  else
    std::snprintf(s, sizeof s, "on, fitted to the smallest arena");
  return std::string(s) + (chunk_rows != 1024 ? ", lm_head chunks of " + std::to_string(chunk_rows) + " rows" : "") +
         (gemm_tuning ? ", GEMMs tuned" : "");
}

int bench_drafter_step(const std::string& model, const std::vector<Bucket>& buckets, int steps, bool cuda,
                       const BenchMemory& ck, bool online) {
  const bool checkpointing = ck.on;
  DrafterBench bench(model, buckets, cuda, online, ck.chunk_rows);
  bench.build(ck);
  const DrafterSpec& spec = bench.spec;
  Context& ctx = bench.ctx;
  StartupReport report = make_startup_report(*bench.engine, 1, bench.startup_ms);
  std::printf("model %s on %s (weights loaded in %.1f s)\n%s", model.c_str(), bench.dev.str().c_str(), bench.load_s,
              format_startup_table(report).c_str());
  const size_t peak = ctx.persistent_bytes() + bench.engine->arena_bytes();
  if (!bench.engine->gemm_tuning_summary().empty()) std::printf("%s\n", bench.engine->gemm_tuning_summary().c_str());
  for (const ProgramReport& p : bench.engine->report())
    if (!p.peak_at.empty())
      std::printf("%s: arena %.3f GiB, peak at %s; at most %.3f GiB live at once\n", p.name.c_str(),
                  double(p.arena_bytes) / double(1ull << 30), p.peak_at.c_str(), double(p.live_bytes) / double(1ull << 30));
  std::printf("%-12s %10s %10s %10s %12s\n", "bucket", "step ms", "TFLOP", "TFLOP/s", "peak GiB");
  for (auto& s : bench.steps) {
    const Bucket& b = s->bucket();
    HostBatch host[3];
    std::vector<int32_t> anchors[3];
    bench.make_batches(b, host, anchors);
    const Program& train = bench.engine->program(DrafterBench::train_name(b));
    const Program* tgt = online ? &bench.engine->program(DrafterBench::target_name(b)) : nullptr;
    const Program& upd = bench.engine->program("update");
    std::vector<double> ms;
    for (int i = 0; i < steps + 3; ++i) {
      s->stage(host[i % 3]);
      ctx.synchronize();
      auto a = Clock::now();
      if (tgt) tgt->replay();
      train.replay();
      upd.replay();
      ctx.synchronize();
      if (i >= 3) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
    }
    std::sort(ms.begin(), ms.end());
    double med = ms[ms.size() / 2];
    double flops = 0;
    for (int k = 0; k < 3; ++k) flops += step_flops(spec, b, anchors[k]) / 3;
    if (online) flops += bench.target_flops(b);
    StepResult r = s->result();
    const ProgramReport& rep = report_of(*bench.engine, DrafterBench::train_name(b));
    std::printf("%5lld:%-6lld %10.2f %10.2f %10.1f %12.2f   (loss %.3f; recompute %s)\n", (long long)b.seq,
                (long long)b.anchors, med, flops / 1e12, flops / 1e12 / (med / 1e3), double(peak) / double(1ull << 30),
                r.loss, recompute_label(rep).c_str());
    std::printf("{\"bench\":\"%s\",\"model\":\"%s\",\"device\":\"%s\",\"seq\":%lld,\"anchors\":%lld,\"batch\":%lld,"
                "\"checkpointing\":%s,\"recomputed\":%lld,\"partially_recomputed\":%lld,\"step_ms\":%.3f,"
                "\"tflops\":%.2f,\"startup_ms\":%.1f,\"arena_bytes\":%zu,\"persistent_bytes\":%zu,\"peak_gib\":%.3f}\n",
                online ? "step-online" : "step", model.c_str(), bench.dev.str().c_str(), (long long)b.seq,
                (long long)b.anchors, (long long)b.batch, checkpointing ? "true" : "false", (long long)rep.recomputed,
                (long long)rep.partially_recomputed, med,
                flops / 1e12 / (med / 1e3), bench.startup_ms, bench.engine->arena_bytes(), ctx.persistent_bytes(),
                double(peak) / double(1ull << 30));
  }
  return 0;
}

int bench_drafter_gemms(const std::string& model, const std::vector<Bucket>& buckets, int reps, int candidates,
                        bool cuda, const BenchMemory& ck, bool online) {
  DrafterBench bench(model, buckets, cuda, online, ck.chunk_rows);
  ProfileLog log;
  bench.ctx.attach_profile(&log);
  bench.build(ck);
  bench.ctx.attach_profile(nullptr);
  int rc = 0;
  for (auto& s : bench.steps) {
    const Bucket& b = s->bucket();
    std::vector<std::string> names = {DrafterBench::train_name(b)};
    if (online) names.push_back(DrafterBench::target_name(b));
    for (const std::string& name : names) {
      const ProgramReport& rep = report_of(*bench.engine, DrafterBench::train_name(b));
      char title[256];
      std::snprintf(title, sizeof title, "gemms: %s of %s %lld:%lld on %s, checkpointing %s: recompute %s; %d launches each",
                    name.c_str(), model.c_str(), (long long)b.seq, (long long)b.anchors, bench.dev.str().c_str(),
                    ck.str().c_str(), recompute_label(rep).c_str(), reps);
      rc |= time_gemm_shapes(bench.ctx, gemm_shapes_of(log, name), reps, candidates, title);
    }
  }
  return rc;
}

int bench_drafter_profile(const std::string& model, const std::vector<Bucket>& buckets, int replays, bool cuda,
                          const BenchMemory& ck, bool online) {
  const bool checkpointing = ck.on;
  DrafterBench bench(model, buckets, cuda, online, ck.chunk_rows);
  ProfileLog log;
  bench.ctx.attach_profile(&log);
  if (cuda) profile_track_graph_nodes();
  bench.build(ck);
  bench.ctx.attach_profile(nullptr);
  bool ok = true;
  for (auto& s : bench.steps) {
    const Bucket& b = s->bucket();
    HostBatch host[3];
    std::vector<int32_t> anchors[3];
    bench.make_batches(b, host, anchors);
    s->stage(host[0]);
    const std::string train_name = DrafterBench::train_name(b);
    const Program& train = bench.engine->program(train_name);
    const Program& upd = bench.engine->program("update");
    const Program* tgt = online ? &bench.engine->program(DrafterBench::target_name(b)) : nullptr;
    const ProgramReport& rep = report_of(*bench.engine, train_name);
    char title[320];
    std::snprintf(title, sizeof title,
                  "profile: %s %lld:%lld on %s, checkpointing %s: recompute %s, %d replays of %strain + update",
                  model.c_str(), (long long)b.seq, (long long)b.anchors, bench.dev.str().c_str(), ck.str().c_str(),
                  recompute_label(rep).c_str(), replays, online ? "target + " : "");
    char summary[512];
    std::snprintf(summary, sizeof summary,
                  "\"model\":\"%s\",\"seq\":%lld,\"anchors\":%lld,\"batch\":%lld,\"checkpointing\":%s,"
                  "\"recomputed\":%lld,\"partially_recomputed\":%lld,\"bench_flop\":%.17g",
                  model.c_str(), (long long)b.seq, (long long)b.anchors, (long long)b.batch,
                  checkpointing ? "true" : "false", (long long)rep.recomputed, (long long)rep.partially_recomputed,
                  step_flops(bench.spec, b, anchors[0]) + (online ? bench.target_flops(b) : 0.0));
    std::vector<std::string> programs = {train_name, "update"};
    if (tgt) programs.insert(programs.begin(), DrafterBench::target_name(b));
    ok = profile_replays(bench.ctx, log, cuda, programs, [&] {
           if (tgt) tgt->replay();
           train.replay();
           upd.replay();
         }, replays, bench.visible_pairs(anchors[0]), title, summary) && ok;
  }
  return ok ? 0 : 1;
}

}  // namespace dflash
