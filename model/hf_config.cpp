// Parsing and validation of a Hugging Face target's config.json, and rope's inverse frequencies
// (transformers' _compute_default_rope_parameters and _compute_llama3_parameters, in f32).
#include "model/hf_config.h"

#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "runtime/error.h"
#include "runtime/fileio.h"

namespace dflash {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kSupported = "supported: Qwen3 (model_type \"qwen3\", Qwen3ForCausalLM) and Llama "
                                   "(model_type \"llama\", LlamaForCausalLM)";

// Typed access to config.json with messages that name the file and the key.
struct Reader {
  std::string file;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    DF_FAIL("target config '" << file << "': key '" << key << "' " << what);
  }
  [[noreturn]] void refuse(const std::string& what, const std::string& fix) const {
    DF_FAIL("target config '" << file << "': " << what << " is not supported; fix: " << fix
                              << " (it is refused rather than computed wrong)");
  }
  static std::string got(const json& v) { return std::string("is a JSON ") + v.type_name() + " (" + v.dump() + ")"; }

  // obj[key], or nullptr when it is absent or null.
  const json* find(const json& obj, const std::string& key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  const json& need(const json& obj, const std::string& key, const std::string& shown) const {
    const json* v = find(obj, key);
    if (!v) fail(shown, "is missing; fix: add it (copy it from the model's original config.json)");
    return *v;
  }
  int64_t positive_int(const json& v, const std::string& shown) const {
    if (!v.is_number_integer()) fail(shown, got(v) + ", expected a positive integer");
    if (!v.is_number_unsigned() || v.get<int64_t>() <= 0) fail(shown, "is " + v.dump() + ", expected a positive integer");
    return v.get<int64_t>();
  }
  int64_t count(const json& v, const std::string& shown) const {  // an integer >= 0
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() != 0))
      fail(shown, got(v) + ", expected an integer >= 0");
    return v.get<int64_t>();
  }
  double positive_number(const json& v, const std::string& shown) const {
    if (!v.is_number()) fail(shown, got(v) + ", expected a number > 0");
    const double x = v.get<double>();
    if (!(std::isfinite(x) && x > 0)) fail(shown, "is " + v.dump() + ", expected a finite number > 0");
    return x;
  }
  bool boolean(const json& v, const std::string& shown) const {
    if (!v.is_boolean()) fail(shown, got(v) + ", expected true or false");
    return v.get<bool>();
  }
  std::string string(const json& v, const std::string& shown) const {
    if (!v.is_string()) fail(shown, got(v) + ", expected a string");
    return v.get<std::string>();
  }
  bool flag(const json& obj, const std::string& key) const {
    const json* v = find(obj, key);
    return v && boolean(*v, key);
  }
};

bool looks_like_moe(const std::string& name) {
  std::string lower;
  for (char c : name) lower += char(std::tolower(static_cast<unsigned char>(c)));
  for (const char* m : {"moe", "mixtral", "deepseek", "dbrx", "jamba", "arctic"})
    if (lower.find(m) != std::string::npos) return true;
  return false;
}

TargetArch read_architecture(const Reader& r, const json& j) {
  std::optional<std::string> model_type;
  if (const json* v = r.find(j, "model_type")) model_type = r.string(*v, "model_type");
  std::vector<std::string> classes;
  if (const json* v = r.find(j, "architectures")) {
    if (!v->is_array()) r.fail("architectures", Reader::got(*v) + ", expected an array of class names");
    for (const json& c : *v) classes.push_back(r.string(c, "architectures"));
  }
  if (!model_type && classes.empty())
    r.fail("model_type", "is missing and so is 'architectures'; fix: add \"model_type\": \"qwen3\" or \"llama\"");
  const std::string name = model_type ? *model_type : classes.front();
  const std::string key = model_type ? "model_type" : "architectures";
  if (looks_like_moe(name))
    r.refuse("a mixture of experts (" + key + " \"" + name + "\")", "use a dense Qwen3 or Llama target");
  TargetArch arch;
  if (name == "qwen3" || (!model_type && name == "Qwen3ForCausalLM")) arch = TargetArch::qwen3;
  else if (name == "llama" || (!model_type && name == "LlamaForCausalLM")) arch = TargetArch::llama;
  else r.refuse(key + " \"" + name + "\"", std::string(kSupported) + "; point target.path at such a checkpoint");
  const char* want = arch == TargetArch::qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM";
  for (const std::string& c : classes)
    if (c != want)
      r.refuse("architectures entry \"" + c + "\" with model_type \"" + target_arch_name(arch) + "\"",
               std::string("a target must be a ") + want +
                   " checkpoint (an exported DFlash drafter or another head is not a target)");
  return arch;
}

// Everything this forward would silently compute wrong is refused by name.
void refuse_unsupported(const Reader& r, const json& j, TargetArch arch) {
  if (const json* v = r.find(j, "hidden_act"); v && r.string(*v, "hidden_act") != "silu")
    r.refuse("hidden_act " + v->dump(), "use a target whose MLP is SwiGLU with hidden_act \"silu\"");
  if (r.flag(j, "attention_bias"))
    r.refuse("attention_bias: true (biases on the q/k/v/o projections)", "use a target without attention biases");
  if (r.flag(j, "mlp_bias")) r.refuse("mlp_bias: true (biases on the MLP projections)", "use a target without MLP biases");
  if (r.flag(j, "use_sliding_window"))
    r.refuse("a sliding window (use_sliding_window: true)",
             "use a full-attention target, or set use_sliding_window to false if the model was trained without one");
  if (const json* v = r.find(j, "layer_types")) {
    if (!v->is_array()) r.fail("layer_types", Reader::got(*v) + ", expected an array of strings");
    for (size_t l = 0; l < v->size(); ++l)
      if (const std::string t = r.string((*v)[l], "layer_types"); t != "full_attention")
        r.refuse("a sliding window (layer_types[" + std::to_string(l) + "] is \"" + t + "\")",
                 "use a target whose layer_types are all \"full_attention\"");
  }
  if (const json* v = r.find(j, "sliding_window"); v && arch == TargetArch::llama)
    r.refuse("a sliding window (sliding_window: " + v->dump() + " in a Llama config)",
             "use a full-attention target, or set sliding_window to null if the model has none");
  for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"})
    if (const json* v = r.find(j, key); v && r.count(*v, key) > 0)
      r.refuse("a mixture of experts (" + std::string(key) + ": " + v->dump() + ")", "use a dense Qwen3 or Llama target");
}

// The rope type an object names ("rope_type", or the legacy "type"); "default" when it names none.
std::string rope_type_of(const Reader& r, const json& rope, const std::string& rope_key, std::string& type_key) {
  for (const char* k : {"rope_type", "type"})
    if (const json* v = r.find(rope, k)) {
      type_key = rope_key + "." + k;
      return r.string(*v, type_key);
    }
  return "default";
}

// Theta and the rope type: rope_parameters (transformers >= 5) or rope_scaling, else plain rope
// with a top-level rope_theta. When both objects are given they must agree on the type.
void read_rope(const Reader& r, const json& j, TargetSpec& s) {
  const json* rope = nullptr;
  std::string rope_key, type = "default", type_key;
  for (const char* k : {"rope_parameters", "rope_scaling"}) {
    const json* v = r.find(j, k);
    if (!v) continue;
    if (!v->is_object()) r.fail(k, Reader::got(*v) + ", expected an object");
    std::string other_key;
    const std::string t = rope_type_of(r, *v, k, other_key);
    if (!rope) {
      rope = v;
      rope_key = k;
      type = t;
      type_key = other_key;
    } else if (t != type) {
      r.fail(other_key.empty() ? std::string(k) : other_key,
             "names rope type \"" + t + "\" but rope_parameters names \"" + type +
                 "\"; fix: keep one of rope_parameters and rope_scaling, with the model's rope");
    }
  }
  auto key = [&](const char* k) { return rope_key + "." + k; };
  if (rope && r.find(*rope, "rope_theta")) {
    s.rope_theta = r.positive_number(*r.find(*rope, "rope_theta"), key("rope_theta"));
  } else if (const json* v = r.find(j, "rope_theta")) {
    s.rope_theta = r.positive_number(*v, "rope_theta");
  } else {
    r.fail("rope_theta", "is missing (neither 'rope_theta' nor 'rope_parameters.rope_theta' is given); "
                         "fix: add the model's rope theta");
  }
  if (type == "default") {
    s.rope_type = RopeType::standard;
  } else if (type == "llama3") {
    s.rope_type = RopeType::llama3;
    s.rope_factor = r.positive_number(r.need(*rope, "factor", key("factor")), key("factor"));
    s.rope_low_freq_factor =
        r.positive_number(r.need(*rope, "low_freq_factor", key("low_freq_factor")), key("low_freq_factor"));
    s.rope_high_freq_factor =
        r.positive_number(r.need(*rope, "high_freq_factor", key("high_freq_factor")), key("high_freq_factor"));
    const std::string orig = key("original_max_position_embeddings");
    s.rope_original_max_position_embeddings =
        r.positive_int(r.need(*rope, "original_max_position_embeddings", orig), orig);
    if (!(s.rope_high_freq_factor > s.rope_low_freq_factor))
      r.fail(key("high_freq_factor"), "is " + std::to_string(s.rope_high_freq_factor) +
                                          ", not above low_freq_factor " + std::to_string(s.rope_low_freq_factor) +
                                          "; fix: llama3 rope needs high_freq_factor > low_freq_factor");
  } else {
    r.refuse("rope_type \"" + type + "\" (key '" + type_key + "')",
             "use a target with rope_type \"default\" or \"llama3\"; other scalings (yarn, dynamic, linear, "
             "longrope) are not supported");
  }
}

}  // namespace

const char* target_arch_name(TargetArch arch) { return arch == TargetArch::qwen3 ? "qwen3" : "llama"; }

TargetSpec read_target_spec(const fs::path& dir) {
  const fs::path file = dir / "config.json";
  DF_CHECK(fs::is_directory(dir), "target: '" << dir.string() << "' is not a directory; fix: target.path must be a "
                                              << "Hugging Face model directory (config.json + model.safetensors)");
  DF_CHECK(fs::is_regular_file(file), "target: no config.json in '" << dir.string() << "'; fix: target.path must be "
                                                                    << "a Hugging Face model directory (config.json "
                                                                    << "+ model.safetensors or its shards)");
  json j;
  try {
    j = json::parse(read_file_text(file));
  } catch (const json::exception& e) {
    DF_FAIL("target config '" << file.string() << "' is not valid JSON (" << e.what()
                              << "); fix: restore the model's config.json");
  }
  const Reader r{file.string()};
  DF_CHECK(j.is_object(), "target config '" << file.string() << "' is a JSON " << j.type_name()
                                            << ", not an object; fix: restore the model's config.json");

  TargetSpec s;
  s.architecture = read_architecture(r, j);
  refuse_unsupported(r, j, s.architecture);
  auto positive = [&](const char* key) { return r.positive_int(r.need(j, key, key), key); };
  s.hidden_size = positive("hidden_size");
  s.intermediate_size = positive("intermediate_size");
  s.num_hidden_layers = positive("num_hidden_layers");
  s.num_attention_heads = positive("num_attention_heads");
  s.num_key_value_heads = positive("num_key_value_heads");
  s.vocab_size = positive("vocab_size");
  s.rms_norm_eps = r.positive_number(r.need(j, "rms_norm_eps", "rms_norm_eps"), "rms_norm_eps");
  if (const json* v = r.find(j, "head_dim")) {
    s.head_dim = r.positive_int(*v, "head_dim");
  } else {
    if (s.hidden_size % s.num_attention_heads != 0)
      r.fail("head_dim", "is missing and hidden_size " + std::to_string(s.hidden_size) +
                             " is not a multiple of num_attention_heads " + std::to_string(s.num_attention_heads) +
                             "; fix: give head_dim");
    s.head_dim = s.hidden_size / s.num_attention_heads;
  }
  if (s.num_attention_heads % s.num_key_value_heads != 0)
    r.fail("num_key_value_heads", "is " + std::to_string(s.num_key_value_heads) +
                                      ", which does not divide num_attention_heads " +
                                      std::to_string(s.num_attention_heads) + " (GQA shares each kv head by a group)");
  if (s.head_dim % 2 != 0)
    r.fail("head_dim", "is " + std::to_string(s.head_dim) + "; rotate-half rope needs an even head_dim");
  if (const json* v = r.find(j, "tie_word_embeddings")) s.tie_word_embeddings = r.boolean(*v, "tie_word_embeddings");
  if (const json* v = r.find(j, "max_position_embeddings"))
    s.max_position_embeddings = r.positive_int(*v, "max_position_embeddings");
  read_rope(r, j, s);
  return s;
}

std::vector<float> rope_inv_freq(const TargetSpec& s) {
  DF_CHECK(s.head_dim >= 2 && s.head_dim % 2 == 0,
           "rope_inv_freq: head_dim " << s.head_dim << " must be even and >= 2");
  const int64_t half = s.head_dim / 2;
  std::vector<float> f(static_cast<size_t>(half));
  // inv_freq = 1.0 / (base ** (arange(0, dim, 2).float() / dim)), every step in f32.
  const float base = float(s.rope_theta), dim = float(s.head_dim);
  for (int64_t i = 0; i < half; ++i) f[size_t(i)] = 1.0f / std::pow(base, float(2 * i) / dim);
  if (s.rope_type == RopeType::standard) return f;

  // llama3: wavelength 2pi/f; kept when short, divided by factor when long, blended in between.
  const float factor = float(s.rope_factor), low = float(s.rope_low_freq_factor),
              high = float(s.rope_high_freq_factor), orig = float(s.rope_original_max_position_embeddings);
  const float low_freq_wavelen = orig / low, high_freq_wavelen = orig / high;
  const float two_pi = float(2.0 * M_PI);
  for (float& x : f) {
    const float wavelen = (1.0f / x) * two_pi;
    if (wavelen < high_freq_wavelen) continue;
    if (wavelen > low_freq_wavelen) {
      x = x / factor;
      continue;
    }
    const float smooth = ((1.0f / wavelen) * orig - low) / (high - low);
    x = (1.0f - smooth) * x / factor + smooth * x;
  }
  return f;
}

}  // namespace dflash
