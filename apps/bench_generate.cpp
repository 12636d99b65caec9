// dflash-bench generate: batched decoding's recorded decode step (`dflash-train generate`) timed at a
// real model's dims with random weights, for several batch sizes and cache lengths, against its
// bandwidth floor: the step must read every weight once (the lm_head and every layer's projections)
// and each slot's keys and values up to its length. Then one whole run of 2 x batch random
// prompts (prefill included) for the tokens per second a user sees. With profile (`dflash-bench
// profile --generate`): the decode step's per-op table at each batch and cache length instead.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "apps/bench.h"
#include "runtime/profile.h"
#include "model/batch_generator.h"
#include "model/target.h"
#include "runtime/context.h"

namespace dflash {

namespace {
using Clock = std::chrono::steady_clock;

// qwen3-8b: Qwen3-8B's dims; small: a few-MB model for a quick check on the CPU.
TargetSpec generate_bench_target(const std::string& name) {
  TargetSpec t;
  t.architecture = TargetArch::qwen3;
  if (name == "qwen3-8b") {
    t.hidden_size = 4096, t.intermediate_size = 12288, t.num_hidden_layers = 36;
    t.num_attention_heads = 32, t.num_key_value_heads = 8, t.head_dim = 128, t.vocab_size = 151936;
    t.rope_theta = 1000000.0, t.max_position_embeddings = 40960;
  } else if (name == "small") {
    t.hidden_size = 256, t.intermediate_size = 768, t.num_hidden_layers = 8;
    t.num_attention_heads = 8, t.num_key_value_heads = 2, t.head_dim = 32, t.vocab_size = 4096;
    t.max_position_embeddings = 32768;
  } else {
    DF_FAIL("--model=" << name << ": use qwen3-8b or small");
  }
  return t;
}
}  // namespace

int bench_generate(const std::string& model, const std::vector<int64_t>& batches, const std::vector<int64_t>& contexts,
                   int steps, bool cuda, bool profile, bool gemm_tuning) {
  const Device dev = cuda ? Device::cuda(0) : Device::cpu();
  const TargetSpec ts = generate_bench_target(model);
  Context weights(dev);
  ContextScope scope(weights);
  std::unique_ptr<Target> target = make_bench_target(ts, {}, 1);
  const double element = double(dtype_size(target->lm_head().dtype()));
  const double per_layer = double(ts.hidden_size) * double(2 * ts.num_attention_heads * ts.head_dim +
                                                           2 * ts.num_key_value_heads * ts.head_dim +
                                                           3 * ts.intermediate_size);
  const double weight_bytes = (per_layer * double(ts.num_hidden_layers) + double(ts.vocab_size * ts.hidden_size)) * element;
  const double kv_per_position = 2.0 * double(ts.num_hidden_layers * ts.num_key_value_heads * ts.head_dim) * element;
  const double h100 = 3.35e12, h200 = 4.8e12;  // HBM bytes per second (H100 SXM, H200)
  std::printf("generate bench: %s target (%d layers, hidden %lld, vocab %lld) with random weights on %s; weights "
              "%.2f GB, keys and values %.1f KB a position\n",
              model.c_str(), int(ts.num_hidden_layers), (long long)ts.hidden_size, (long long)ts.vocab_size,
              dev.str().c_str(), weight_bytes / 1e9, kv_per_position / 1e3);
  if (!profile)
    std::printf("%-7s %-8s %10s %12s %14s %10s %14s %10s\n", "batch", "context", "step ms", "tokens/s", "H100 floor ms",
                "% of it", "H200 floor ms", "% of it");
  std::string json = "{\"bench\":\"generate\",\"model\":\"" + model + "\",\"steps\":[";
  bool first = true;
  const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
  if (profile && cuda) profile_track_graph_nodes();
  for (int64_t batch : batches) {
    ProfileLog log;  // this generator's programs only
    GenerateOptions o;
    o.slots = batch;
    // Room for the replays past the longest length: the timed ones, or the profile's (3 warm-ups,
    // then twice `steps`: one timed pass, one under CUPTI); each commits a token a slot.
    o.capacity = longest + (profile ? 2 * int64_t(steps) + 3 : int64_t(steps)) + 72;
    o.prefill_chunk = profile ? 64 : 512;
    o.gemm_tuning = gemm_tuning;
    if (profile) o.profile = &log;
    BatchGenerator gen(dev, *target, o, available_memory_bytes(dev));
    if (gen.engine() && !gen.engine()->gemm_tuning_summary().empty())  // tuned: on a GPU, with --gemm-tuning
      std::printf("batch %lld: %s\n", (long long)batch, gen.engine()->gemm_tuning_summary().c_str());
    if (profile) {
      bool ok = true;
      for (int64_t L : contexts) {
        char summary[160];
        std::snprintf(summary, sizeof summary, "\"model\":\"%s\",\"batch\":%lld,\"context\":%lld", model.c_str(),
                      (long long)batch, (long long)L);
        gen.fill_slots_for_timing(L);
        ok = profile_replays(gen.context(), log, cuda, {"generate/step"}, [&] { gen.replay_step(false); }, steps, 0.0,
                             "profile: batched decode step, " + model + " batch " + std::to_string(batch) +
                                 " at length " + std::to_string(L) + " on " + dev.str(),
                             summary) &&
             ok;
      }
      if (!ok) return 1;
      continue;
    }
    for (int64_t L : contexts) {
      gen.fill_slots_for_timing(L);
      gen.replay_step();  // warm-up
      const auto t0 = Clock::now();
      for (int i = 0; i < steps; ++i) gen.replay_step(false);
      gen.replay_step();
      const double step_s = std::chrono::duration<double>(Clock::now() - t0).count() / double(steps + 1);
      const double bytes = weight_bytes + kv_per_position * double(batch) * (double(L) + double(steps) / 2);
      const double floor_h100 = bytes / h100, floor_h200 = bytes / h200;
      std::printf("%-7lld %-8lld %10.3f %12.0f %14.3f %9.1f%% %14.3f %9.1f%%\n", (long long)batch, (long long)L,
                  step_s * 1e3, double(batch) / step_s, floor_h100 * 1e3, 100.0 * floor_h100 / step_s, floor_h200 * 1e3,
                  100.0 * floor_h200 / step_s);
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "%s{\"batch\":%lld,\"context\":%lld,\"new_tokens\":%d,\"step_ms\":%.4f,\"tokens_per_s\":%.1f,\"floor_ms_h100\":%.4f,"
                    "\"floor_ms_h200\":%.4f}",
                    first ? "" : ",", (long long)batch, (long long)L, steps + 1, step_s * 1e3, double(batch) / step_s,
                    floor_h100 * 1e3, floor_h200 * 1e3);
      json += buf;
      first = false;
    }
    // A whole run: 2 x batch random prompts of the shortest context, 64 new tokens each, no stop id.
    std::mt19937_64 rng(3);
    std::vector<GenerateRequest> requests(size_t(2 * batch));
    for (GenerateRequest& r : requests) {
      r.prompt.resize(size_t(contexts.front()));
      for (int32_t& id : r.prompt) id = int32_t(rng() % uint64_t(ts.vocab_size));
      r.max_new = 64;
    }
    int64_t tokens = 0;
    const auto t0 = Clock::now();
    gen.run(requests, {}, [&](const GenerateResult& r) { tokens += int64_t(r.output.size()); });
    const double run_s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("  batch %lld, %zu prompts of %lld tokens, 64 new each (prefill included): %.2f s, %.0f tokens/s\n",
                (long long)batch, requests.size(), (long long)contexts.front(), run_s, double(tokens) / run_s);
  }
  if (profile) return 0;
  std::printf("(floor: the weights once and every slot's keys and values once per step, at the H100's 3.35 TB/s and "
              "the H200's 4.8 TB/s; read the column of the card it ran on)\n");
  std::printf("%s]}\n", json.c_str());
  return 0;
}

}  // namespace dflash
