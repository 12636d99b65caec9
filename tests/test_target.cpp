// The frozen target: golden HF outputs for all four golden targets, causal attention against a
// dense double reference, rope frequencies against the formulas in double, the random-target
// writer, Target::random's weight statistics, recordability and padding invariance. Refusals are in
// test_target_errors.cpp.
#include <cmath>

#include "graphs/program.h"
#include "tests/target_fixtures.h"

using namespace dflash;
using namespace dflash::test;

namespace {

std::vector<float> slice(const std::vector<float>& v, size_t index, size_t size) {
  return std::vector<float>(v.begin() + long(index * size), v.begin() + long((index + 1) * size));
}

// Dense causal GQA attention in double: q [B,S,nh,hd], k/v [B,S,nkv,hd].
std::vector<float> dense_causal(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                int64_t B, int64_t S, int64_t nh, int64_t nkv, int64_t hd, double scale) {
  std::vector<float> out(size_t(B * S * nh * hd));
  std::vector<double> p(static_cast<size_t>(S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t g = h / (nh / nkv);
      for (int64_t i = 0; i < S; ++i) {
        const float* qi = &q[size_t(((b * S + i) * nh + h) * hd)];
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const float* kj = &k[size_t(((b * S + j) * nkv + g) * hd)];
          double s = 0;
          for (int64_t d = 0; d < hd; ++d) s += double(qi[d]) * kj[d];
          p[size_t(j)] = s * scale;
          mx = std::max(mx, p[size_t(j)]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
        for (int64_t d = 0; d < hd; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) acc += p[size_t(j)] * v[size_t(((b * S + j) * nkv + g) * hd + d)];
          out[size_t(((b * S + i) * nh + h) * hd + d)] = float(acc / sum);
        }
      }
    }
  return out;
}

// The per-layer comparison of one golden target; returns the worst layer-output error and the logits error.
std::pair<double, double> golden_errors(const Target& t, const SafeTensors& ref, const std::string& name) {
  const Tensor ids = ref.load("input_ids", DType::i32);  // (2, 40)
  const std::vector<float> expected = ref.read_floats(name + ".layer_outputs");  // (4, 2, 40, 64)
  const std::vector<Tensor> outs = t.layer_outputs(ids);
  REQUIRE(outs.size() == 4);
  double worst = 0;
  for (size_t l = 0; l < 4; ++l) {
    CHECK(outs[l].shape() == (Shape{2, 40, 64}));
    worst = std::max(worst, rel_err(outs[l].to_floats(), slice(expected, l, 2 * 40 * 64)));
  }
  const Tensor logits = t.logits(ids);
  CHECK(logits.shape() == (Shape{2, 40, 320}));
  return {worst, rel_err(logits.to_floats(), ref.read_floats(name + ".logits"))};
}

}  // namespace

TEST_SUITE("target") {
  TEST_CASE("golden targets: layer outputs and logits equal transformers' (qwen3, sharded llama, llama3 rope)") {
    CpuRuntime rt;
    const fs::path golden = golden_dir();
    SafeTensors ref(golden / "target_reference.safetensors");
    struct Case {
      const char *dir, *name;
      TargetArch arch;
      RopeType rope;
      double theta;
    };
    for (const Case& c : {Case{"target-qwen3", "qwen3", TargetArch::qwen3, RopeType::standard, 1e4},
                          Case{"target-llama-sharded", "llama", TargetArch::llama, RopeType::standard, 1e4},
                          Case{"target-llama31", "llama31", TargetArch::llama, RopeType::llama3, 5e5}}) {
      const std::string dir_name = c.dir;
      CAPTURE(dir_name);
      Target t(golden / c.dir, {1, 2}, 40);
      const TargetSpec& s = t.spec();
      CHECK(s.architecture == c.arch);
      CHECK(s.rope_type == c.rope);
      CHECK(s.rope_theta == c.theta);
      CHECK((s.vocab_size == 320 && s.hidden_size == 64 && s.intermediate_size == 160 && s.num_hidden_layers == 4 &&
             s.num_attention_heads == 4 && s.num_key_value_heads == 2 && s.head_dim == 16 && !s.tie_word_embeddings));
      CHECK(s.rms_norm_eps == 1e-6);
      CHECK(t.lm_head().shape() == (Shape{320, 64}));
      if (c.rope == RopeType::llama3)
        CHECK((s.rope_factor == 8 && s.rope_low_freq_factor == 1 && s.rope_high_freq_factor == 4 &&
               s.rope_original_max_position_embeddings == 8192));
      const auto [layers, logits] = golden_errors(t, ref, c.name);
      CHECK(layers <= 1e-4);
      CHECK(logits <= 1e-4);
    }
  }

  // The bf16 golden reference was computed by a model whose rope inv_freq buffer had been cast to
  // bf16 along with its weights (nn.Module.to rounds buffers); transformers' from_pretrained keeps
  // it f32, and so do we. With f32 frequencies the outputs differ by ~2e-3 (bf16 rounding of the
  // angles); with the frequencies rounded to bf16, as that model had them, they agree to 1e-4.
  TEST_CASE("golden bf16 target: equal to transformers' once rope frequencies are rounded like its model's") {
    CpuRuntime rt;
    SafeTensors ref(golden_dir() / "target_reference.safetensors");
    Target t(golden_dir() / "target-qwen3-bf16", {1, 2}, 40);
    CHECK(t.embed_tokens().dtype() == DType::f32);
    const auto [layers, logits] = golden_errors(t, ref, "qwen3_bf16");
    CHECK(layers <= 5e-3);
    CHECK(logits <= 5e-3);
    std::vector<float> freq = t.inv_freq().to_floats();
    for (float& f : freq) f = bf16_to_f32(f32_to_bf16(f));
    t.inv_freq().copy_from_host(freq.data(), freq.size() * sizeof(float));
    const auto [layers_bf16_freq, logits_bf16_freq] = golden_errors(t, ref, "qwen3_bf16");
    CHECK(layers_bf16_freq <= 1e-4);
    CHECK(logits_bf16_freq <= 1e-4);
  }

  TEST_CASE("features([1, 2]) of the qwen3 target equal the golden batch's target_hidden") {
    CpuRuntime rt;
    SafeTensors batch(golden_dir() / "batch.safetensors");
    Target t(golden_dir() / "target-qwen3", {1, 2}, 64);
    const Tensor f = t.features(batch.load("input_ids", DType::i32));
    CHECK(f.shape() == (Shape{2, 40, 128}));
    CHECK(rel_err(f.to_floats(), batch.read_floats("target_hidden")) <= 1e-4);
  }

  TEST_CASE("features concatenate the listed layers in order, repeats included, and the forward can be recorded") {
    CpuRuntime rt;
    TempDir tmp;
    Target t(make_target(tmp, "t"), {2, 0, 2}, 32);
    const Tensor ids = Tensor::from_ints({2, 24}, random_ids(48, 48, 3), "ids");
    const std::vector<Tensor> outs = t.layer_outputs(ids);
    const std::vector<float> f = t.features(ids).to_floats();  // (2, 24, 3*32)
    REQUIRE(f.size() == size_t(2 * 24 * 96));
    const int64_t order[3] = {2, 0, 2};
    for (int part = 0; part < 3; ++part) {
      const std::vector<float> layer = outs[size_t(order[part])].to_floats();
      bool same = true;
      for (size_t row = 0; row < 48; ++row)
        for (size_t c = 0; c < 32; ++c) same = same && f[row * 96 + size_t(part) * 32 + c] == layer[row * 32 + c];
      CHECK(same);
    }

    // Recorded once over fixed buffers, replayed for two batches: equal to eager, bit for bit.
    Tensor out = Tensor::persistent({2, 24, 96}, DType::f32, "features");
    auto body = [&] { ops::copy_(out, t.features(ids)); };
    rt.ctx.reserve_arena(plan_program(rt.ctx, "target_forward", body).arena_bytes);
    Program program = record_program(rt.ctx, "target_forward", body);
    program.replay();
    CHECK(bitwise_equal(out.to_floats(), f));
    const std::vector<int32_t> other = random_ids(48, 48, 4);
    ids.copy_from_host(other.data(), other.size() * 4);
    program.replay();
    CHECK(bitwise_equal(out.to_floats(), t.features(ids).to_floats()));
    CHECK_FALSE(bitwise_equal(out.to_floats(), f));
  }

  TEST_CASE("padding invariance: a padded sequence's features equal the unpadded ones on its own positions") {
    CpuRuntime rt;
    TempDir tmp;
    Target t(make_target(tmp, "t", "llama"), {0, 1}, 160);
    for (int64_t len : {int64_t(40), int64_t(100)}) {  // within one attention tile, and across tiles
      CAPTURE(len);
      const std::vector<int32_t> seq = random_ids(size_t(len), 48, 5);
      const std::vector<float> alone = t.features(Tensor::from_ints({1, len}, seq)).to_floats();
      std::vector<int32_t> padded = random_ids(size_t(2 * 150), 48, 6);  // row 0: seq then padding
      std::copy(seq.begin(), seq.end(), padded.begin());
      const std::vector<float> batch = t.features(Tensor::from_ints({2, 150}, padded)).to_floats();
      const std::vector<float> head(batch.begin(), batch.begin() + long(alone.size()));
      CHECK(rel_err(head, alone) <= 1e-6);
    }
  }

  TEST_CASE("causal_attention equals a dense double reference (GQA 1, 2, 4; partial and several tiles)") {
    CpuRuntime rt;
    struct Case {
      int64_t B, S, nh, nkv, hd;
    };
    for (const Case& c : {Case{2, 70, 4, 4, 16}, Case{2, 70, 4, 2, 16}, Case{1, 150, 4, 1, 24}, Case{3, 1, 2, 1, 8},
                          Case{1, 64, 2, 2, 40}}) {
      CAPTURE(c.S);
      CAPTURE(c.nkv);
      CAPTURE(c.hd);
      const Tensor q = randn({c.B, c.S, c.nh, c.hd}, 1), k = randn({c.B, c.S, c.nkv, c.hd}, 2),
                   v = randn({c.B, c.S, c.nkv, c.hd}, 3);
      const double scale = 1.0 / std::sqrt(double(c.hd));
      const Tensor out = ops::causal_attention(q, k, v, float(scale));
      CHECK(out.shape() == q.shape());
      const std::vector<float> want =
          dense_causal(q.to_floats(), k.to_floats(), v.to_floats(), c.B, c.S, c.nh, c.nkv, c.hd, scale);
      CHECK(rel_err(out.to_floats(), want) <= 1e-5);
    }
  }

  TEST_CASE("causal_attention refuses bad arguments with the fix") {
    CpuRuntime rt;
    const Tensor q = randn({1, 8, 4, 16}, 1), k = randn({1, 8, 2, 16}, 2);
    CHECK_ERROR(ops::causal_attention(q, randn({1, 8, 3, 16}, 2), randn({1, 8, 3, 16}, 3), 0.25f),
                "positive multiple of the kv heads");
    CHECK_ERROR(ops::causal_attention(q, randn({1, 9, 2, 16}, 2), randn({1, 9, 2, 16}, 3), 0.25f),
                "must be [B, S, nkv, hd]");
    CHECK_ERROR(ops::causal_attention(q, k, randn({1, 8, 2, 8}, 3), 0.25f), "must have k's shape");
    CHECK_ERROR(ops::causal_attention(q.reshape({8, 4, 16}), k, k, 0.25f), "must be 4-D");
    CHECK_ERROR(ops::causal_attention(randn({1, 2, 1, 260}, 1), randn({1, 2, 1, 260}, 1), randn({1, 2, 1, 260}, 1), 1),
                "head dim 260");
    CHECK_ERROR(ops::causal_attention(q, k, k, NAN), "scale");
    const Tensor trainable = param({1, 8, 4, 16}, 4);
    CHECK_ERROR(ops::causal_attention(trainable, k, k, 0.25f), "no backward");
    NoGrad no_grad;  // frozen use is fine
    CHECK(ops::causal_attention(trainable, k, k, 0.25f).shape() == q.shape());
  }

  TEST_CASE("rope_inv_freq: default and llama3 equal the formulas computed in double") {
    for (int64_t hd : {int64_t(16), int64_t(128)}) {
      CAPTURE(hd);
      TargetSpec s;
      s.head_dim = hd;
      s.rope_theta = 500000.0;
      const std::vector<float> plain = rope_inv_freq(s);
      s.rope_type = RopeType::llama3;
      s.rope_factor = 8;
      s.rope_low_freq_factor = 1;
      s.rope_high_freq_factor = 4;
      s.rope_original_max_position_embeddings = 8192;
      const std::vector<float> scaled = rope_inv_freq(s);
      REQUIRE(scaled.size() == size_t(hd / 2));
      int kept = 0, divided = 0, blended = 0;
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double f = std::pow(500000.0, -2.0 * double(i) / double(hd));
        CHECK(std::fabs(plain[size_t(i)] - f) <= 1e-6 * f);
        const double lambda = 2 * M_PI / f;
        double want;
        if (lambda < 8192.0 / 4) {
          want = f;
          ++kept;
        } else if (lambda > 8192.0 / 1) {
          want = f / 8;
          ++divided;
        } else {
          const double smooth = (8192.0 / lambda - 1) / (4 - 1);
          want = (1 - smooth) * f / 8 + smooth * f;
          ++blended;
        }
        CAPTURE(i);
        CHECK(std::fabs(scaled[size_t(i)] - want) <= 1e-5 * want);
      }
      CHECK((kept > 0 && divided > 0 && blended > 0));  // every branch of the rescaling is exercised
    }
  }

  TEST_CASE("write_random_target writes a directory that reads back and runs (qwen3 and llama)") {
    CpuRuntime rt;
    TempDir tmp;
    for (const std::string arch : {"qwen3", "llama"}) {
      CAPTURE(arch);
      const fs::path dir = make_target(tmp, arch, arch);
      TargetSpec want;
      want.architecture = arch == "qwen3" ? TargetArch::qwen3 : TargetArch::llama;
      want.hidden_size = 32;
      want.intermediate_size = 48;
      want.num_hidden_layers = 3;
      want.num_attention_heads = 4;
      want.num_key_value_heads = 2;
      want.head_dim = 8;
      want.vocab_size = 48;
      want.rms_norm_eps = 1e-6;
      want.max_position_embeddings = 32768;
      want.rope_theta = 10000.0;
      CHECK(read_target_spec(dir) == want);
      const json config = json::parse(std::ifstream(dir / "config.json"));
      CHECK(config["architectures"][0] == (arch == "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM"));
      CHECK(config["torch_dtype"] == "float32");
      CHECK(config["tie_word_embeddings"] == false);

      SafeTensors st(dir / "model.safetensors");
      CHECK(st.names().size() == size_t(3 + 3 * (arch == "qwen3" ? 11 : 9)));
      for (const std::string& name : st.names()) CHECK(st.info(name).dtype == "F32");
      const std::vector<float> norm = st.read_floats("model.layers.1.post_attention_layernorm.weight");
      CHECK(std::all_of(norm.begin(), norm.end(), [](float x) { return x == 1.0f; }));
      const std::vector<float> w = st.read_floats("model.layers.0.mlp.gate_proj.weight");
      double sq = 0;
      for (float x : w) sq += double(x) * x;
      CHECK(std::sqrt(sq / double(w.size())) == doctest::Approx(0.2).epsilon(0.1));  // init_std

      Target t(dir, {1}, 16);
      const Tensor logits = t.logits(Tensor::from_ints({2, 16}, random_ids(32, 48, 1)));
      CHECK(logits.shape() == (Shape{2, 16, 48}));
      const std::vector<float> lv = logits.to_floats();
      CHECK(std::all_of(lv.begin(), lv.end(), [](float x) { return std::isfinite(x); }));
      CHECK(t.features(Tensor::from_ints({1, 5}, {1, 2, 3, 4, 5})).shape() == (Shape{1, 5, 32}));
    }
    // Same seed, same weights; nothing but the two targets is left in the folder.
    const fs::path again = tmp / "again";
    write_random_target(again, small_config("qwen3"));
    CHECK(read_weights(again / "model.safetensors").at("lm_head.weight").values ==
          read_weights(tmp / "qwen3" / "model.safetensors").at("lm_head.weight").values);
    size_t entries = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path)) ++entries;
    CHECK(entries == 3);
    CHECK_ERROR(write_random_target(again, small_config("qwen3")), "already exists");
    SyntheticTargetConfig bad = small_config("mistral");
    CHECK_ERROR(write_random_target(tmp / "bad", bad), "\"qwen3\" or \"llama\"");
    bad = small_config("qwen3");
    bad.num_key_value_heads = 3;
    CHECK_ERROR(write_random_target(tmp / "bad", bad), "does not divide");
    CHECK_FALSE(fs::exists(tmp / "bad"));
  }

  TEST_CASE("tied embeddings: lm_head is embed_tokens") {
    CpuRuntime rt;
    TempDir tmp;
    const fs::path dir = make_target(tmp, "t");
    edit_config(dir, [](json& j) { j["tie_word_embeddings"] = true; });
    edit_weights(dir, [](HostWeights& w) { w.erase("lm_head.weight"); });
    Target t(dir, {0}, 8);
    CHECK(t.spec().tie_word_embeddings);
    CHECK(t.lm_head().raw() == t.embed_tokens().raw());
  }

  TEST_CASE("Target::random: uniform weights of the standard deviation asked, within +-sqrt(3) std") {
    CpuRuntime rt;
    TargetSpec t;
    t.hidden_size = 64, t.intermediate_size = 96, t.num_hidden_layers = 1, t.num_attention_heads = 4;
    t.num_key_value_heads = 2, t.head_dim = 16, t.vocab_size = 256, t.max_position_embeddings = 64;
    const double std = 0.05;
    std::unique_ptr<Target> target = Target::random(t, {0}, 4, 3, std);
    for (const Tensor* w : {&target->embed_tokens(), &target->lm_head()}) {
      const std::vector<float> v = w->to_floats();  // 16384 draws: the sample std is within 2% of std
      double sum = 0, sq = 0, widest = 0;
      for (float x : v) sum += x, sq += double(x) * x, widest = std::max(widest, std::fabs(double(x)));
      const double mean = sum / double(v.size()), sd = std::sqrt(sq / double(v.size()) - mean * mean);
      CHECK(std::fabs(mean) < 0.05 * std);
      CHECK(sd == doctest::Approx(std).epsilon(0.02));
      CHECK(widest <= std * std::sqrt(3.0) * (1 + 1e-6));
      CHECK(widest > 0.99 * std * std::sqrt(3.0));  // uniform: draws reach the edges
    }
  }

  TEST_CASE("causal_attention refuses k and v of another batch size, and a v that is not f32") {
    CpuRuntime rt;
    const Tensor q = randn({1, 8, 4, 16}, 1), k = randn({1, 8, 2, 16}, 2);
    const Tensor k2 = randn({2, 8, 2, 16}, 3), v2 = randn({2, 8, 2, 16}, 4);
    CHECK_ERROR(ops::causal_attention(q, k2, v2, 0.25f), "must be [B, S, nkv, hd] = [1, 8, nkv, 16]");
    const Tensor v_int = Tensor::from_ints({1, 8, 2, 16}, std::vector<int32_t>(size_t(8 * 2 * 16), 1));
    CHECK_ERROR(ops::causal_attention(q, k, v_int, 0.25f), "v is i32[1,8,2,16] but must be f32");
  }
}
