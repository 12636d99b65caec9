// dflash-bench spec: speculative decoding's recorded programs timed at a real model's dims with
// random weights: one round (the drafter's block pass + the target's verify pass over the block
// with acceptance and rollback) and one target-alone step, at given cache lengths, against the
// bandwidth floor of a target step (its weight bytes over the HBM bandwidth). With profile
// (`dflash-bench profile --spec`): the per-op table of the target-alone step and of one round.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "model/drafter.h"
#include "model/spec_decoder.h"
#include "apps/bench.h"
#include "model/target.h"
#include "runtime/context.h"
#include "runtime/profile.h"

namespace dflash {

namespace {
using Clock = std::chrono::steady_clock;

struct SpecBenchModel {
  TargetSpec target;
  DrafterSpec drafter;
};

// qwen3-8b: Qwen3-8B's dims and the qwen3-8b drafter of docs/BENCH.md (5 layers, block 16);
// small: a few-MB model for a quick check on the CPU.
SpecBenchModel bench_model(const std::string& name) {
  SpecBenchModel m;
  TargetSpec& t = m.target;
  DrafterSpec& d = m.drafter;
  t.architecture = TargetArch::qwen3;
  if (name == "qwen3-8b") {
    t.hidden_size = 4096, t.intermediate_size = 12288, t.num_hidden_layers = 36;
    t.num_attention_heads = 32, t.num_key_value_heads = 8, t.head_dim = 128, t.vocab_size = 151936;
    t.rope_theta = 1000000.0, t.max_position_embeddings = 40960;
    d.num_hidden_layers = 5, d.block_size = 16, d.mask_token_id = 151669;
  } else if (name == "small") {
    t.hidden_size = 256, t.intermediate_size = 768, t.num_hidden_layers = 8;
    t.num_attention_heads = 8, t.num_key_value_heads = 2, t.head_dim = 32, t.vocab_size = 4096;
    t.max_position_embeddings = 32768;
    d.num_hidden_layers = 2, d.block_size = 8, d.mask_token_id = 4095;
  } else {
    DF_FAIL("--model=" << name << ": use qwen3-8b or small");
  }
  d.hidden_size = t.hidden_size, d.intermediate_size = t.intermediate_size;
  d.num_attention_heads = t.num_attention_heads, d.num_key_value_heads = t.num_key_value_heads;
  d.head_dim = t.head_dim, d.vocab_size = t.vocab_size, d.rope_theta = t.rope_theta;
  d.num_target_layers = t.num_hidden_layers;
  d.target_layer_ids = default_target_layer_ids(t.num_hidden_layers, d.num_hidden_layers);
  return m;
}

// Every drafter parameter uniform with standard deviation std (norms 1), generated in parallel.
void randomize(ParameterStore& params, uint64_t seed, double std) {
  const float w = float(std * 1.7320508075688772);
  for (const ParamSpec& p : params.specs()) {
    std::vector<float> v(size_t(p.shape.numel()));
    const size_t workers = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 32), per = (v.size() + workers - 1) / workers;
    std::vector<std::thread> threads;
    for (size_t k = 0; k < workers; ++k)
      threads.emplace_back([&, k] {
        std::mt19937_64 rng(seed ^ (std::hash<std::string>{}(p.name) + k));
        std::uniform_real_distribution<float> u(-w, w);
        for (size_t e = k * per; e < std::min(v.size(), (k + 1) * per); ++e) v[e] = p.shape.ndim == 1 ? 1.0f : u(rng);
      });
    for (std::thread& t : threads) t.join();
    params.master(p.name).copy_from_host(v.data(), v.size() * sizeof(float));
  }
  params.sync_compute_copy();
}

template <class F>
double median_ms(int reps, const F& f) {
  std::vector<double> ms;
  for (int k = 0; k < reps + 3; ++k) {
    const double t = f();
    if (k >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
}  // namespace

int bench_spec(const std::string& model, const std::vector<int64_t>& contexts, int reps, bool cuda, bool profile) {
  const Device dev = cuda ? Device::cuda(0) : Device::cpu();
  const SpecBenchModel m = bench_model(model);
  const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
  Context weights(dev);
  ContextScope scope(weights);
  auto t0 = Clock::now();
  std::unique_ptr<Target> target = Target::random(m.target, m.drafter.target_layer_ids, 1, 7, 0.02);
  Drafter drafter(m.drafter, target->embed_tokens(), target->lm_head(), ShardLayout{}, /*random_init=*/false);
  randomize(drafter.params(), 11, 0.02);
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  SpecDecoderOptions o;
  // Room past the longest context for the profile's replays (3 warm-ups, then twice `reps`: one
  // timed pass, one under CUPTI), each of which may commit up to a block.
  o.max_len = longest + 64 + (profile ? (2 * int64_t(reps) + 3) * m.drafter.block_size : 0);
  o.prefill_chunk = 256;
  ProfileLog log;
  if (profile) {
    o.profile = &log;
    if (cuda) profile_track_graph_nodes();
  }
  t0 = Clock::now();
  SpecDecoder decoder(dev, *target, &drafter, o);
  const double record_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const int64_t bs = m.drafter.block_size;
  // Bytes a target pass reads: every layer's weights and lm_head (of the embedding, only a few rows).
  const TargetSpec& ts = m.target;
  const double per_layer = double(ts.hidden_size) * double(2 * ts.num_attention_heads * ts.head_dim +
                                                           2 * ts.num_key_value_heads * ts.head_dim +
                                                           3 * ts.intermediate_size);
  const double weight_bytes =
      (per_layer * double(ts.num_hidden_layers) + double(ts.vocab_size * ts.hidden_size)) *
      double(dtype_size(target->lm_head().dtype()));
  std::printf("spec bench: %s target (%d layers, hidden %lld, vocab %lld) with random weights, drafter %d layers, "
              "block %lld, on %s; weights made in %.1f s; programs recorded in %.1f ms (%zu programs)\n",
              model.c_str(), int(m.target.num_hidden_layers), (long long)m.target.hidden_size,
              (long long)m.target.vocab_size, int(m.drafter.num_hidden_layers), (long long)bs, dev.str().c_str(), load_s,
              record_ms, decoder.engine() ? decoder.engine()->report().size() : size_t(0));
  // A real decode first: prefill of the longest context (filling both caches) and a few rounds.
  std::mt19937_64 rng(5);
  std::vector<int32_t> prompt(static_cast<size_t>(longest));
  for (int32_t& id : prompt) id = int32_t(rng() % uint64_t(m.target.vocab_size - 1));
  Decoded d = decoder.decode(prompt, 2 * bs, {}, true);
  std::printf("decode of a %lld-token prompt: prefill %.1f ms, %zu rounds in %.2f ms\n", (long long)longest,
              d.prefill_s * 1e3, d.rounds.size(), d.decode_s * 1e3);
  if (profile) {
    bool ok = true;
    for (const int64_t L : contexts) {
      const std::string where = model + " at context " + std::to_string(L) + " on " + dev.str();
      char summary[256];
      std::snprintf(summary, sizeof summary, "\"model\":\"%s\",\"context\":%lld,\"pass\":", model.c_str(), (long long)L);
      // Each replay moves the caches on by the tokens it commits: a few positions past L.
      decoder.set_position(L);
      ok = profile_replays(decoder.context(), log, cuda, {"spec/step"}, [&] { decoder.replay_step(false); }, reps, 0.0,
                           "profile: target-alone decode step, " + where, std::string(summary) + "\"step\"") &&
           ok;
      decoder.set_position(L);
      ok = profile_replays(decoder.context(), log, cuda, {"spec/draft", "spec/verify"},
                           [&] { decoder.replay_round(); }, reps, 0.0,
                           "profile: one round (drafter block + verify), " + where,
                           std::string(summary) + "\"round\"", /*replay_waits=*/true) &&
           ok;
    }
    return ok ? 0 : 1;
  }
  const double hbm = 4.8e12;  // H200 HBM3e bytes per second
  std::printf("target weights read per pass: %.2f GB; bandwidth floor of a target step at 4.8 TB/s: %.3f ms\n",
              weight_bytes / 1e9, weight_bytes / hbm * 1e3);
  std::printf("%-10s %14s %14s %14s %14s\n", "context", "round ms", "drafter ms", "verify ms", "step ms");
  std::string json = "{\"bench\":\"spec\",\"model\":\"" + model + "\",\"block_size\":" + std::to_string(bs) +
                     ",\"floor_ms\":" + std::to_string(weight_bytes / hbm * 1e3) + ",\"contexts\":[";
  for (size_t c = 0; c < contexts.size(); ++c) {
    const int64_t L = contexts[c];
    auto timed = [&](auto replay) {
      return median_ms(reps, [&] {
        decoder.set_position(L);
        const auto a = Clock::now();
        replay();
        return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
      });
    };
    const double round = timed([&] { decoder.replay_round(); });
    const double draft = timed([&] { decoder.replay_draft(); });
    const double step = timed([&] { decoder.replay_step(); });
    std::printf("%-10lld %14.3f %14.3f %14.3f %14.3f\n", (long long)L, round, draft, round - draft, step);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s{\"context\":%lld,\"round_ms\":%.4f,\"drafter_ms\":%.4f,\"step_ms\":%.4f}",
                  c ? "," : "", (long long)L, round, draft, step);
    json += buf;
  }
  std::printf("(round = drafter block pass + verify pass of %lld tokens with acceptance and rollback, host-synchronised; "
              "verify = round - drafter; a round pays off when its accepted length exceeds round / step)\n",
              (long long)bs);
  std::printf("%s]}\n", json.c_str());
  return 0;
}

}  // namespace dflash
