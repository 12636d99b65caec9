// dflash-bench target: the frozen target's forward (random weights at Qwen3-8B dims, all layers as
// the target anchor (ref_target.py) runs them, and only up to the deepest layer the drafter reads,
// which is what online training runs), recorded once per length and replayed; median of replays.
#include <algorithm>
#include <cstdio>
#include <random>

#include "apps/bench.h"
#include "graphs/engine.h"
#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/ops.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace dflash {

TargetSpec bench_target_spec(const DrafterSpec& d) {
  TargetSpec t;
  t.architecture = TargetArch::qwen3;
  t.hidden_size = d.hidden_size;
  t.vocab_size = d.vocab_size;
  t.num_hidden_layers = d.num_target_layers;
  t.rms_norm_eps = 1e-6;
  t.rope_theta = 1000000.0;
  t.max_position_embeddings = 40960;
  if (d.hidden_size == 4096) {
    t.intermediate_size = 12288, t.num_attention_heads = 32, t.num_key_value_heads = 8, t.head_dim = 128;
  } else {
    t.intermediate_size = 3 * d.hidden_size, t.num_attention_heads = d.num_attention_heads;
    t.num_key_value_heads = d.num_key_value_heads, t.head_dim = d.head_dim;
  }
  return t;
}

std::unique_ptr<Target> make_bench_target(const TargetSpec& spec, const std::vector<int64_t>& layer_ids,
                                          int64_t max_seq_len) {
  return Target::random(spec, layer_ids, max_seq_len, 1000, 0.02);
}

double target_forward_flops(const TargetSpec& s, int64_t B, int64_t S, int64_t layers) {
  const double H = double(s.hidden_size), I = double(s.intermediate_size), hd = double(s.head_dim);
  const double q = double(s.num_attention_heads) * hd, kv = double(s.num_key_value_heads) * hd;
  const double per_token_layer = 2 * (H * q + 2 * H * kv + q * H + 3 * H * I);
  const double tokens = double(B) * double(S);
  const double attention = 2 * 2 * (double(S) * double(S + 1) / 2) * hd * double(s.num_attention_heads) * double(B);
  return double(layers) * (per_token_layer * tokens + attention);
}

int bench_target(const std::string& model, const std::vector<int64_t>& seqs, int steps, bool cuda, bool profile) {
  DF_CHECK(model == "qwen3-8b", "dflash-bench target: --model=" << model << "; only qwen3-8b (Qwen3-8B dims)");
  DF_CHECK(cuda, "dflash-bench target: Qwen3-8B dims need a GPU (16 GB of bf16 weights); add --cuda");
  const Device dev = cuda ? Device::cuda(0) : Device::cpu();
  Context ctx(dev);
  ContextScope scope(ctx);
  DrafterSpec d;
  d.hidden_size = 4096, d.vocab_size = 151936, d.num_target_layers = 36;
  d.target_layer_ids = {1, 9, 17, 25, 33};
  const TargetSpec spec = bench_target_spec(d);
  const int64_t longest = *std::max_element(seqs.begin(), seqs.end());
  std::unique_ptr<Target> full = make_bench_target(spec, {}, longest);
  // The same weights read through the drafter's layers: a second Target would double them, so
  // the features program runs the full target's layers 0..deepest through layer_outputs' prefix.
  struct Io {
    Tensor ids, out_full, out_feat;
  };
  std::vector<Io> io;
  Engine engine(ctx);
  const int64_t deepest = 33;
  for (int64_t S : seqs) {
    Io x;
    x.ids = Tensor::persistent({1, S}, DType::i32, "ids");
    x.out_full = Tensor::persistent({1, S, spec.hidden_size}, full->embed_tokens().dtype(), "last_hidden");
    x.out_feat = Tensor::persistent({1, S, spec.hidden_size}, full->embed_tokens().dtype(), "deepest_hidden");
    std::vector<int32_t> ids(static_cast<size_t>(S));
    std::mt19937_64 rng{static_cast<uint64_t>(S)};
    for (auto& v : ids) v = int32_t(rng() % 151000);
    x.ids.copy_from_host(ids.data(), ids.size() * 4);
    io.push_back(x);
    const Target* t = full.get();
    engine.add("target/" + std::to_string(S), Bucket{S, 1, 1},
               [t, x](bool) { ops::copy_(x.out_full, t->layer_outputs(x.ids).back()); }, false);
    engine.add("features/" + std::to_string(S), Bucket{S, 1, 1},
               [t, x, deepest](bool) { ops::copy_(x.out_feat, t->layer_outputs(x.ids, deepest + 1).back()); }, false);
  }
  ProfileLog log;
  if (profile) {
    ctx.attach_profile(&log);
    profile_track_graph_nodes();
  }
  engine.build(available_memory_bytes(dev));
  ctx.attach_profile(nullptr);
  if (profile) {
    bool ok = true;
    for (int64_t S : seqs) {
      const std::string name = "target/" + std::to_string(S);
      const Program& p = engine.program(name);
      const std::string title = "profile: target forward at Qwen3-8B dims, seq " + std::to_string(S) + ", all " +
                                std::to_string(spec.num_hidden_layers) + " layers, on " + dev.str();
      char summary[256];
      std::snprintf(summary, sizeof summary, "\"target\":\"qwen3-8b\",\"seq\":%lld,\"flop\":%.17g", (long long)S,
                    target_forward_flops(spec, 1, S, spec.num_hidden_layers));
      ok = profile_replays(ctx, log, cuda, {name}, [&] { p.replay(); }, steps, 0.0, title, summary) && ok;
    }
    return ok ? 0 : 1;
  }
  std::printf("target at Qwen3-8B dims (36 layers, 32/8 heads of 128, random bf16 weights) on %s; arena %.2f GiB\n",
              dev.str().c_str(), double(engine.arena_bytes()) / double(1ull << 30));
  std::printf("%-8s %-28s %10s %12s %14s\n", "seq", "program", "ms", "TFLOP/s", "TFLOP/s(2PN)");
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t S = seqs[i];
    for (bool all : {true, false}) {
      const std::string name = (all ? "target/" : "features/") + std::to_string(S);
      const Program& p = engine.program(name);
      std::vector<double> ms;
      for (int k = 0; k < steps + 2; ++k) {
        ctx.synchronize();
        double t = 0;
#ifdef DFLASH_CUDA
        if (cuda) t = cuda_backend::time_ms(ctx.cuda_stream(), [&] { p.replay(); });
#endif
        if (!cuda) {
          auto a = std::chrono::steady_clock::now();
          p.replay();
          t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
        }
        if (k >= 2) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      const int64_t layers = all ? spec.num_hidden_layers : deepest + 1;
      const double flop = target_forward_flops(spec, 1, S, layers);
      const double anchor_flop = 2 * 8.19e9 * double(S) * double(layers) / 36.0;  // ref_target.py's count
      std::printf("%-8lld %-28s %10.2f %12.1f %14.1f\n", (long long)S,
                  all ? "all 36 layers" : "layers 0..33 (drafter reads)", med, flop / 1e12 / (med / 1e3),
                  anchor_flop / 1e12 / (med / 1e3));
      std::printf("{\"bench\":\"target\",\"seq\":%lld,\"layers\":%lld,\"fwd_ms\":%.3f,\"tflops\":%.2f}\n", (long long)S,
                  (long long)layers, med, flop / 1e12 / (med / 1e3));
    }
  }
  return 0;
}

}  // namespace dflash
