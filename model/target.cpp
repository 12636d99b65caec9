// The frozen target: weight loading (one file or index + shards, shape- and finiteness-checked),
// the decoder forward through runtime ops under NoGrad, and the random-target writer.
#include "model/target.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>

#include "model/tiny_tokenizer.h"
#include "runtime/autograd.h"
#include "runtime/checksum.h"
#include "runtime/context.h"
#include "runtime/fileio.h"
#include "runtime/ops.h"
#include "runtime/safetensors.h"

namespace dflash {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// Where each tensor of a checkpoint lives: model.safetensors, or the shards that
// model.safetensors.index.json's weight_map names (each shard opened once, memory-mapped).
class WeightFiles {
 public:
  explicit WeightFiles(const fs::path& dir) : dir_(dir) {
    const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
    if (fs::exists(single)) {
      files_.push_back(std::make_unique<SafeTensors>(single));
      for (const std::string& name : files_[0]->names()) where_[name] = files_[0].get();
      searched_ = "'" + single.string() + "'";
      return;
    }
    DF_CHECK(fs::exists(index), "target '" << dir.string() << "': neither model.safetensors nor "
                                           << "model.safetensors.index.json is there; fix: download the "
                                           << "checkpoint's weights into the directory");
    read_index(index);
    searched_ = "the weight_map of '" + index.string() + "'";
  }

  // The tensor converted into `into` (its dtype), after its shape and finiteness are checked.
  void load_into(const std::string& key, const Tensor& into) const {
    const Shape& shape = into.shape();
    auto it = where_.find(key);
    DF_CHECK(it != where_.end(), "target '" << dir_.string() << "': tensor '" << key << "' is missing (searched "
                                            << searched_ << "); fix: the checkpoint does not match config.json "
                                            << "(check model_type and num_hidden_layers) or is incomplete");
    const SafeTensors& f = *it->second;
    const SafeTensorInfo& info = f.info(key);
    DF_CHECK(info.shape == shape.vec(),
             "target '" << dir_.string() << "': tensor '" << key << "' in '" << f.path().string() << "' has shape "
                        << shape_str(info.shape) << " but config.json implies " << shape.str()
                        << "; fix: the weights do not match config.json (check the sizes, heads and vocab)");
    DF_CHECK(info.dtype == "F32" || info.dtype == "BF16" || info.dtype == "F16",
             "target '" << dir_.string() << "': tensor '" << key << "' in '" << f.path().string() << "' is "
                        << info.dtype << "; target weights must be F32, BF16 or F16; fix: convert the checkpoint");
    f.check_finite(key);
    f.load_into(key, into);
  }

  // CRC-32 of a tensor's bytes as stored in its file.
  std::string crc32_of(const std::string& key) const {
    auto it = where_.find(key);
    DF_CHECK(it != where_.end(), "target '" << dir_.string() << "': tensor '" << key << "' is missing (searched "
                                            << searched_ << "); fix: the checkpoint is incomplete");
    return crc32_hex(crc32(it->second->bytes(key), it->second->info(key).nbytes));
  }

  // Every tensor of the weights must be one the forward loads (`expected`), or one HF checkpoints
  // carry without it changing the computation (rotary inv_freq buffers, lm_head beside tied
  // embeddings). Anything else means the weights and config.json describe different models.
  void refuse_unexplained(const std::set<std::string>& expected, const TargetSpec& s) const {
    std::vector<std::string> extra;
    int64_t highest_layer = -1;
    for (const auto& [name, file] : where_) {
      if (expected.count(name)) continue;
      const std::string tail = "rotary_emb.inv_freq";
      if (name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0) continue;
      if (name == "lm_head.weight" && s.tie_word_embeddings) continue;
      extra.push_back("'" + name + "' (in '" + file->path().filename().string() + "')");
      const std::string prefix = "model.layers.";
      if (name.rfind(prefix, 0) == 0) {
        size_t end = name.find('.', prefix.size());
        const std::string digits = name.substr(prefix.size(), end == std::string::npos ? std::string::npos : end - prefix.size());
        if (!digits.empty() && digits.size() < 10 && digits.find_first_not_of("0123456789") == std::string::npos)
          highest_layer = std::max(highest_layer, int64_t(std::stoll(digits)));
      }
    }
    if (extra.empty()) return;
    std::string list;
    for (size_t i = 0; i < extra.size() && i < 8; ++i) list += (i ? ", " : "") + extra[i];
    if (extra.size() > 8) list += ", and " + std::to_string(extra.size() - 8) + " more";
    std::string hint;
    if (highest_layer >= s.num_hidden_layers)
      hint = " (config.json says num_hidden_layers = " + std::to_string(s.num_hidden_layers) +
             ", but the weights hold layer " + std::to_string(highest_layer) + ")";
    DF_FAIL("target '" << dir_.string() << "': the weights hold " << extra.size() << " tensor"
                       << (extra.size() == 1 ? "" : "s") << " that config.json does not explain" << hint << ": "
                       << list << "; fix: the weights and config.json describe different models; use the "
                       << "config.json that came with these weights (check num_hidden_layers, model_type and "
                       << "tie_word_embeddings)");
  }

  // A bias tensor means a model with biases that config.json did not announce.
  void refuse_biases() const {
    for (const auto& [name, file] : where_)
      DF_CHECK(name.size() < 5 || name.compare(name.size() - 5, 5, ".bias") != 0,
               "target '" << dir_.string() << "': the checkpoint holds '" << name << "' in '" << file->path().string()
                          << "': biases are not supported; fix: use a Qwen3 or Llama target without biases");
  }

 private:
  void read_index(const fs::path& index) {
    const std::string w = "target index '" + index.string() + "'";
    json j;
    try {
      j = json::parse(read_file_text(index));
    } catch (const json::exception& e) {
      DF_FAIL(w << " is not valid JSON (" << e.what() << "); fix: restore the checkpoint's index file");
    }
    DF_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
             w << " has no \"weight_map\" object (tensor name -> shard file); fix: restore the checkpoint's index file");
    std::map<std::string, const SafeTensors*> opened;
    for (const auto& [key, value] : j["weight_map"].items()) {
      DF_CHECK(value.is_string(), w << ": weight_map['" << key << "'] is a JSON " << value.type_name() << " ("
                                    << value.dump() << "), not a shard file name");
      const std::string shard = value.get<std::string>();
      const fs::path rel(shard);
      DF_CHECK(!shard.empty() && rel.is_relative() && rel.filename() == rel,
               w << ": weight_map['" << key << "'] is \"" << shard << "\", not a file name in the checkpoint "
                 << "directory; fix: restore the checkpoint's index file");
      auto it = opened.find(shard);
      if (it == opened.end()) {
        const fs::path p = dir_ / rel;
        DF_CHECK(fs::is_regular_file(p), w << " maps '" << key << "' to '" << shard << "', which is missing ("
                                           << p.string() << "); fix: the download is incomplete; fetch the shard");
        files_.push_back(std::make_unique<SafeTensors>(p));
        it = opened.emplace(shard, files_.back().get()).first;
      }
      DF_CHECK(it->second->has(key), w << " maps '" << key << "' to '" << shard
                                       << "', but that shard has no such tensor; fix: the index and the shards "
                                          "disagree; download the checkpoint again");
      where_[key] = it->second;
    }
  }

  fs::path dir_;
  std::string searched_;
  std::vector<std::unique_ptr<SafeTensors>> files_;
  std::map<std::string, const SafeTensors*> where_;
};

std::string layer_key(int64_t l, const char* what) { return "model.layers." + std::to_string(l) + "." + what; }

// The names of every tensor the forward loads for this config.
std::set<std::string> expected_keys(const TargetSpec& s) {
  std::set<std::string> keys = {"model.embed_tokens.weight", "model.norm.weight"};
  if (!s.tie_word_embeddings) keys.insert("lm_head.weight");
  for (int64_t l = 0; l < s.num_hidden_layers; ++l) {
    for (const char* w : {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
                          "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
      keys.insert(layer_key(l, w));
    if (s.has_qk_norm())
      for (const char* w : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"}) keys.insert(layer_key(l, w));
  }
  return keys;
}

}  // namespace

Target::Target(const fs::path& dir, std::vector<int64_t> layer_ids, int64_t max_seq_len)
    : spec_(read_target_spec(dir)), layer_ids_(std::move(layer_ids)), max_seq_len_(max_seq_len) {
  const WeightFiles w(dir);
  w.refuse_biases();
  w.refuse_unexplained(expected_keys(spec_), spec_);
  build("target '" + dir.string() + "'", [&w](const std::string& key, const Tensor& into) { w.load_into(key, into); });
}

void Target::build(const std::string& what, const Loader& load_into) {
  const TargetSpec& s = spec_;
  const int64_t L = s.num_hidden_layers, H = s.hidden_size, I = s.intermediate_size, V = s.vocab_size;
  const int64_t hd = s.head_dim, q_out = s.num_attention_heads * hd, kv_out = s.num_key_value_heads * hd;
  for (int64_t id : layer_ids_)
    DF_CHECK(id >= 0 && id < L, what << ": layer id " << id << " is outside [0, " << L - 1 << "] (the target has " << L
                                     << " decoder layers); fix: target.layer_ids are 0-based decoder layer indices");
  DF_CHECK(max_seq_len_ >= 1, what << ": max_seq_len is " << max_seq_len_
                                   << "; it must be >= 1 (the longest bucket's sequence length)");
  const DType dt = Context::current().device().is_cuda() ? DType::bf16 : DType::f32;
  auto load = [&](const std::string& key, const Shape& shape) {
    Tensor t = Tensor::persistent(shape, dt, key);
    load_into(key, t);
    return t;
  };
  embed_ = load("model.embed_tokens.weight", {V, H});
  layers_.resize(size_t(L));
  for (int64_t l = 0; l < L; ++l) {
    Layer& p = layers_[size_t(l)];
    p.input_norm = load(layer_key(l, "input_layernorm.weight"), {H});
    p.post_norm = load(layer_key(l, "post_attention_layernorm.weight"), {H});
    // q_proj, k_proj and v_proj packed as the rows of one weight, so that decoding makes all three
    // with one GEMM (one pass over them, wide enough to keep the GPU's bandwidth busy at few rows).
    p.qkv = Tensor::persistent({q_out + 2 * kv_out, H}, dt, layer_key(l, "self_attn.qkv_proj.weight"));
    p.q = p.qkv.rows(0, q_out);
    p.k = p.qkv.rows(q_out, q_out + kv_out);
    p.v = p.qkv.rows(q_out + kv_out, q_out + 2 * kv_out);
    load_into(layer_key(l, "self_attn.q_proj.weight"), p.q);
    load_into(layer_key(l, "self_attn.k_proj.weight"), p.k);
    load_into(layer_key(l, "self_attn.v_proj.weight"), p.v);
    p.o = load(layer_key(l, "self_attn.o_proj.weight"), {H, q_out});
    if (s.has_qk_norm()) {
      p.q_norm = load(layer_key(l, "self_attn.q_norm.weight"), {hd});
      p.k_norm = load(layer_key(l, "self_attn.k_norm.weight"), {hd});
    }
    // gate_proj and up_proj packed as the rows of one weight, so one GEMM makes both.
    p.gate_up = Tensor::persistent({2 * I, H}, dt, layer_key(l, "mlp.gate_up_proj.weight"));
    p.gate = p.gate_up.rows(0, I);
    p.up = p.gate_up.rows(I, 2 * I);
    load_into(layer_key(l, "mlp.gate_proj.weight"), p.gate);
    load_into(layer_key(l, "mlp.up_proj.weight"), p.up);
    p.down = load(layer_key(l, "mlp.down_proj.weight"), {H, I});
  }
  final_norm_ = load("model.norm.weight", {H});
  lm_head_ = s.tie_word_embeddings ? embed_ : load("lm_head.weight", {V, H});

  std::vector<int32_t> iota(static_cast<size_t>(max_seq_len_));
  std::iota(iota.begin(), iota.end(), 0);
  positions_ = Tensor::from_ints({max_seq_len_}, iota, "target.positions");
  inv_freq_ = Tensor::from_floats({hd / 2}, rope_inv_freq(s), "target.inv_freq");
}

TargetChecksums target_checksums(const fs::path& dir, const TargetSpec& spec) {
  const WeightFiles w(dir);
  TargetChecksums c;
  c.embed_tokens = w.crc32_of("model.embed_tokens.weight");
  c.lm_head = spec.tie_word_embeddings ? c.embed_tokens : w.crc32_of("lm_head.weight");
  return c;
}

void Target::check_ids(const char* what, const Tensor& ids) const {
  DF_CHECK(ids.defined() && ids.dtype() == DType::i32 && ids.ndim() == 2,
           "Target::" << what << ": ids is " << ids.describe() << " but must be i32 [B, S]");
  DF_CHECK(ids.dim(0) >= 1 && ids.dim(1) >= 1 && ids.dim(1) <= max_seq_len_,
           "Target::" << what << ": ids " << ids.describe() << " has S = " << ids.dim(1) << " (B = " << ids.dim(0)
                      << "); S must be in [1, max_seq_len = " << max_seq_len_
                      << "]; fix: construct the Target with max_seq_len >= the longest bucket");
}

// Positions 0..S-1 for every sequence, from the persistent positions tensor: its first S rows,
// doubled along the batch by concat until there are B copies. No host writes, so recordable.
Tensor Target::positions(int64_t B, int64_t S) const {
  Tensor pos = positions_.rows(0, S).reshape({1, S});
  while (pos.dim(0) < B) pos = ops::concat(pos, pos, 0);
  return pos.dim(0) == B ? pos : pos.rows(0, B);
}

// HF's Qwen3/Llama decoder layer: pre-norm attention (per-head q/k norm for Qwen3, rope, causal
// GQA attention with scale hd^-0.5) and a pre-norm SwiGLU MLP, each added to the residual. x is
// rmsnorm(h, p.input_norm). Each residual add runs fused with the RMSNorm after it (the next
// layer's input norm, or the final norm, when `next_norm` is given) and the q/k norms with rope:
// the same values as the unfused ops (tests/test_fused_norms.cpp), each activation read once
// less; and gate_proj and up_proj run as one GEMM over their packed weight.
Target::LayerOut Target::decoder_layer(const Layer& p, const Tensor& h, const Tensor& x, const Tensor& pos,
                                       const Tensor* next_norm) const {
  const TargetSpec& s = spec_;
  const int64_t B = h.dim(0), S = h.dim(1), nh = s.num_attention_heads, nkv = s.num_key_value_heads;
  const int64_t hd = s.head_dim;
  const float eps = float(s.rms_norm_eps);
  auto add_norm = [&](const Tensor& a, const Tensor& b, const Tensor* w) {  // a + b, and it normed by *w
    if (w) return ops::add_rmsnorm(a, b, *w, eps);
    return ops::AddRmsnorm{ops::add(a, b), Tensor()};
  };
  Tensor q = ops::linear(x, p.q).reshape({B, S, nh, hd});   // (B, S, nh, hd)
  Tensor k = ops::linear(x, p.k).reshape({B, S, nkv, hd});  // (B, S, nkv, hd)
  Tensor v = ops::linear(x, p.v).reshape({B, S, nkv, hd});  // (B, S, nkv, hd)
  if (s.has_qk_norm()) {
    ops::RopedQK qk = ops::rmsnorm_rope(q, k, p.q_norm, p.k_norm, pos, inv_freq_, eps);
    q = qk.q;
    k = qk.k;
  } else {
    q = ops::rope(q, pos, inv_freq_);
    k = ops::rope(k, pos, inv_freq_);
  }
  const float scale = float(1.0 / std::sqrt(double(hd)));
  Tensor a = ops::causal_attention(q, k, v, scale).reshape({B, S, nh * hd});  // (B, S, nh*hd)
  ops::AddRmsnorm r = add_norm(h, ops::linear(a, p.o), &p.post_norm);         // (B, S, H) each
  const Tensor act = ops::swiglu_halves(ops::linear(r.normed, p.gate_up));  // (B, S, 2I) -> (B, S, I)
  Tensor mlp = ops::linear(act, p.down);
  ops::AddRmsnorm out = add_norm(r.sum, mlp, next_norm);
  return {out.sum, out.normed};
}

// Layers 0..last from the embedded ids; `each` sees every layer's output. Returns the last
// layer's output normed by `final_norm` when given (else undefined).
Tensor Target::run_layers(const Tensor& ids, int64_t last, const Tensor* final_norm,
                          const std::function<void(int64_t, const Tensor&)>& each) const {
  const Tensor pos = positions(ids.dim(0), ids.dim(1));
  Tensor h = ops::embedding(embed_, ids);  // (B, S, H)
  Tensor x = ops::rmsnorm(h, layers_[0].input_norm, float(spec_.rms_norm_eps));
  for (int64_t l = 0; l <= last; ++l) {
    const Tensor* next = l < last ? &layers_[size_t(l + 1)].input_norm : final_norm;
    LayerOut o = decoder_layer(layers_[size_t(l)], h, x, pos, next);
    h = o.h;
    x = o.x_next;
    each(l, h);
  }
  return x;
}

Tensor Target::features(const Tensor& ids, const Tensor& into) const {
  check_ids("features", ids);
  DF_CHECK(!layer_ids_.empty(), "Target::features: the target was constructed with no layer ids; fix: pass the "
                                "drafter's target_layer_ids to the Target constructor");
  NoGrad no_grad;
  const int64_t last = *std::max_element(layer_ids_.begin(), layer_ids_.end());
  const std::set<int64_t> wanted(layer_ids_.begin(), layer_ids_.end());
  std::vector<Tensor> kept(size_t(last + 1));  // only the wanted layers' outputs stay alive
  run_layers(ids, last, nullptr, [&](int64_t l, const Tensor& h) {
    if (wanted.count(l)) kept[size_t(l)] = h;
  });
  std::vector<Tensor> parts;
  for (int64_t id : layer_ids_) parts.push_back(kept[size_t(id)]);
  return ops::concat_all(parts, 2, into);  // (B, S, F*H)
}

std::vector<Tensor> Target::layer_outputs(const Tensor& ids, int64_t layers) const {
  check_ids("layer_outputs", ids);
  const int64_t L = spec_.num_hidden_layers;
  if (layers < 0) layers = L;
  DF_CHECK(layers >= 1 && layers <= L,
           "Target::layer_outputs: layers = " << layers << " but the target has " << L << " decoder layers");
  NoGrad no_grad;
  std::vector<Tensor> out;
  run_layers(ids, layers - 1, nullptr, [&](int64_t, const Tensor& h) { out.push_back(h); });
  return out;
}

Tensor Target::logits(const Tensor& ids) const {
  check_ids("logits", ids);
  NoGrad no_grad;
  const Tensor normed = run_layers(ids, spec_.num_hidden_layers - 1, &final_norm_, [](int64_t, const Tensor&) {});
  return ops::linear(normed, lm_head_);  // (B, S, V)
}

void write_random_target(const fs::path& dir_in, const SyntheticTargetConfig& c) {
  const fs::path dir = dir_in.has_filename() ? dir_in : dir_in.parent_path();
  const std::string w = "write_random_target '" + dir.string() + "'";
  DF_CHECK(c.architecture == "qwen3" || c.architecture == "llama",
           w << ": architecture is \"" << c.architecture << "\"; it must be \"qwen3\" or \"llama\"");
  for (auto [name, value] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
                             {"hidden_size", c.hidden_size}, {"intermediate_size", c.intermediate_size},
                             {"num_hidden_layers", c.num_hidden_layers}, {"num_attention_heads", c.num_attention_heads},
                             {"num_key_value_heads", c.num_key_value_heads}, {"head_dim", c.head_dim}})
    DF_CHECK(value >= 1, w << ": " << name << " is " << value << "; it must be >= 1");
  DF_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
           w << ": num_key_value_heads " << c.num_key_value_heads << " does not divide num_attention_heads "
             << c.num_attention_heads);
  DF_CHECK(c.head_dim % 2 == 0, w << ": head_dim " << c.head_dim << " must be even (rotate-half rope)");
  DF_CHECK(std::isfinite(c.init_std) && c.init_std > 0, w << ": init_std is " << c.init_std << "; it must be > 0");
  DF_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 0, w << ": rope_theta is " << c.rope_theta << "; it must be > 0");
  DF_CHECK(!fs::exists(dir), w << ": the directory already exists; fix: remove it, or point target.path at it "
                               << "with target.synthetic off to use it as it is");

  const bool qwen3 = c.architecture == "qwen3";
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, hd = c.head_dim;
  nlohmann::ordered_json config = {
      {"architectures", {qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", c.architecture},
      {"hidden_size", H},
      {"intermediate_size", I},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", hd},
      {"vocab_size", V},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", c.rope_theta},
      {"max_position_embeddings", 32768},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"tie_word_embeddings", false},
      {"torch_dtype", "float32"}};
  if (qwen3) config["use_sliding_window"] = false;
  else config["mlp_bias"] = false;

  // Tensors in checkpoint order, each drawn in turn from one seeded stream; norms are 1.
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> normal(0.0f, float(c.init_std));
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  shapes.push_back({"model.embed_tokens.weight", {V, H}});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    shapes.push_back({layer_key(l, "input_layernorm.weight"), {H}});
    shapes.push_back({layer_key(l, "self_attn.q_proj.weight"), {c.num_attention_heads * hd, H}});
    shapes.push_back({layer_key(l, "self_attn.k_proj.weight"), {c.num_key_value_heads * hd, H}});
    shapes.push_back({layer_key(l, "self_attn.v_proj.weight"), {c.num_key_value_heads * hd, H}});
    shapes.push_back({layer_key(l, "self_attn.o_proj.weight"), {H, c.num_attention_heads * hd}});
    if (qwen3) {
      shapes.push_back({layer_key(l, "self_attn.q_norm.weight"), {hd}});
      shapes.push_back({layer_key(l, "self_attn.k_norm.weight"), {hd}});
    }
    shapes.push_back({layer_key(l, "post_attention_layernorm.weight"), {H}});
    shapes.push_back({layer_key(l, "mlp.gate_proj.weight"), {I, H}});
    shapes.push_back({layer_key(l, "mlp.up_proj.weight"), {I, H}});
    shapes.push_back({layer_key(l, "mlp.down_proj.weight"), {H, I}});
  }
  shapes.push_back({"model.norm.weight", {H}});
  shapes.push_back({"lm_head.weight", {V, H}});
  std::vector<std::vector<float>> values;
  std::vector<SafeTensorsEntry> entries;
  for (const auto& [name, shape] : shapes) {
    std::vector<float>& v = values.emplace_back(size_t(shape.size() == 1 ? shape[0] : shape[0] * shape[1]));
    if (shape.size() == 1) std::fill(v.begin(), v.end(), 1.0f);
    else for (float& x : v) x = normal(rng);
  }
  for (size_t i = 0; i < shapes.size(); ++i) entries.push_back({shapes[i].first, "F32", shapes[i].second, values[i].data()});

  // Assembled beside dir and renamed into place: dir is complete or absent, never half-written.
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  const fs::path tmp = parent / (dir.filename().string() + ".tmp-" + std::to_string(::getpid()));
  std::error_code ec;
  try {
    fs::create_directories(parent);
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    write_file_atomic(tmp / "config.json", config.dump(2) + "\n");
    write_safetensors(tmp / "model.safetensors", entries, {{"format", "pt"}});
    write_tiny_tokenizer(tmp, V);  // tokenizer.json and tokenizer_config.json, when V holds them
    fs::rename(tmp, dir, ec);
    DF_CHECK(!ec, w << ": renaming '" << tmp.string() << "' into place failed (" << ec.message()
                    << "); fix: check that nothing else creates the directory at the same time");
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    DF_FAIL(w << ": " << e.what() << "; fix: check the path and its permissions");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace dflash
