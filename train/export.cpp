// Exported drafter: config.json in the golden/SGLang format, model.safetensors in bf16 or f32,
// written via a staging directory; reading both back with every key, name and shape checked.
#include "train/export.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "runtime/fileio.h"
#include "runtime/safetensors.h"
#include "train/checkpoint.h"
#include "train/sharded_checkpoint.h"

namespace dflash {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kConfigFile = "config.json";
constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kArchitecture = "DFlashDraftModel";

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

bool has_entry(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// Why an export may not replace `dir` ("" when it may: it is empty or a previous export).
std::string replace_refusal(const fs::path& dir) {
  std::vector<std::string> others;
  bool config = false, weights = false;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) return "it cannot be listed (" + ec.message() + ")";
  for (; it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == kConfigFile) config = true;
    else if (name == kWeightsFile) weights = true;
    else others.push_back(name);
  }
  std::sort(others.begin(), others.end());
  if (!others.empty()) {
    std::string list;
    for (size_t i = 0; i < others.size() && i < 4; ++i) list += (i ? ", '" : "'") + others[i] + "'";
    if (others.size() > 4) list += ", ...";
    return "it holds " + list + ", which an export does not";
  }
  if (!config) return weights ? "it has model.safetensors but no config.json" : "";
  try {
    const json c = json::parse(read_file_text(dir / kConfigFile));
    const json* arch = c.is_object() && c.contains("architectures") ? &c["architectures"] : nullptr;
    if (arch && arch->is_array() && std::find(arch->begin(), arch->end(), kArchitecture) != arch->end()) return "";
  } catch (const std::exception&) {
  }
  return "its config.json is not a DFlash drafter's";
}

// Refuses a store that does not hold exactly the drafter's parameters.
void check_store(const std::vector<ParamSpec>& specs, const ParameterStore& params, const std::string& what) {
  for (const ParamSpec& p : specs) {
    DF_CHECK(params.has(p.name), what << ": the parameter store has no '" << p.name
                                      << "'; fix: build the store from drafter_param_specs of the same spec");
    const Shape have = params.get(p.name).shape();
    DF_CHECK(have == p.shape, what << ": parameter '" << p.name << "' is " << have.str() << " in the store but "
                                   << p.shape.str() << " in the spec; fix: build the store from the same spec");
  }
  DF_CHECK(params.specs().size() == specs.size(),
           what << ": the parameter store holds " << params.specs().size() << " parameters but the drafter "
                << specs.size() << "; fix: build the store from drafter_param_specs of the same spec");
}

// Loads every drafter parameter from a weights file into the f32 masters, after checking all of
// them: names (exactly the drafter's), shapes, float dtypes, finite values.
void load_weights_file(const fs::path& file, const DrafterSpec& expect, ParameterStore& params,
                       const std::string& what) {
  const std::vector<ParamSpec> specs = drafter_param_specs(expect);
  check_store(specs, params, what);
  const SafeTensors st(file);
  const std::string f = what + ": " + quoted(file);
  for (const ParamSpec& p : specs) {
    DF_CHECK(st.has(p.name), f << " has no tensor '" << p.name << "' (shape " << p.shape.str()
                               << "); fix: export the drafter with dflash-train export, which writes every parameter");
    const SafeTensorInfo& t = st.info(p.name);
    DF_CHECK(t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16",
             f << ": tensor '" << p.name << "' is " << t.dtype << "; drafter weights are F32, BF16 or F16");
    DF_CHECK(Shape::of(t.shape) == p.shape, f << ": tensor '" << p.name << "' has shape " << Shape::of(t.shape).str()
                                              << " but the drafter's parameter is " << p.shape.str()
                                              << "; fix: the drafter config does not match these weights");
    try {
      st.check_finite(p.name);
    } catch (const Error& e) {
      DF_FAIL(what << ": " << e.what());
    }
  }
  for (const std::string& name : st.names()) {
    bool known = false;
    for (const ParamSpec& p : specs) known = known || p.name == name;
    std::string hint = "the drafter has no such parameter";
    if (name.rfind("model.", 0) == 0) hint = "exported names have no 'model.' prefix";
    if (name.find("embed_tokens") != std::string::npos || name.find("lm_head") != std::string::npos)
      hint = "the embedding and lm_head are the target's and are not part of the drafter";
    DF_CHECK(known, f << ": unexpected tensor '" << name << "' (" << hint
                      << "); fix: export the drafter with dflash-train export");
  }
  for (const ParamSpec& p : specs) {
    const std::vector<float> v = st.read_floats(p.name);
    params.set_values(p.name, v.data());
  }
  params.sync_compute_copy();
}

template <class T>
std::string text(const T& value) {
  return json(value).dump();
}

}  // namespace

nlohmann::ordered_json exported_config_json(const DrafterSpec& s, DType dtype) {
  DF_CHECK(dtype == DType::f32 || dtype == DType::bf16,
           "exported drafter config: dtype " << dtype_name(dtype) << " is not exported; fix: use bf16 or f32");
  nlohmann::ordered_json c;
  c["architectures"] = {kArchitecture};
  c["model_type"] = "qwen3";
  c["hidden_size"] = s.hidden_size;
  c["intermediate_size"] = s.intermediate_size;
  c["num_hidden_layers"] = s.num_hidden_layers;
  c["num_attention_heads"] = s.num_attention_heads;
  c["num_key_value_heads"] = s.num_key_value_heads;
  c["head_dim"] = s.head_dim;
  c["rms_norm_eps"] = s.rms_norm_eps;
  c["rope_theta"] = s.rope_theta;
  c["vocab_size"] = s.vocab_size;
  c["max_position_embeddings"] = s.max_position_embeddings;
  c["block_size"] = s.block_size;
  c["num_target_layers"] = s.num_target_layers;
  c["tie_word_embeddings"] = false;
  c["torch_dtype"] = dtype == DType::bf16 ? "bfloat16" : "float32";
  c["dflash_config"] = {{"mask_token_id", s.mask_token_id}, {"target_layer_ids", s.target_layer_ids}};
  return c;
}

ExportedDrafter parse_exported_config(const json& c, const std::string& source) {
  const std::string f = "drafter config " + source;
  const char* fix = "; fix: write the drafter with dflash-train export, or correct the file";
  DF_CHECK(c.is_object(), f << " is not a JSON object" << fix);
  auto get = [&](const json& obj, const char* key, const std::string& full) -> const json& {
    DF_CHECK(obj.contains(key), f << ": key '" << full << "' is missing" << fix);
    return obj[key];
  };
  auto integer = [&](const json& obj, const char* key, const std::string& full, int64_t min) {
    const json& v = get(obj, key, full);
    DF_CHECK(v.is_number_integer(), f << ": key '" << full << "' must be an integer, not " << v.dump() << fix);
    const int64_t x = v.get<int64_t>();
    DF_CHECK(x >= min, f << ": key '" << full << "' is " << x << " but must be at least " << min << fix);
    return x;
  };
  auto positive = [&](const json& obj, const char* key, const std::string& full) {
    const json& v = get(obj, key, full);
    DF_CHECK(v.is_number() && v.get<double>() > 0 && std::isfinite(v.get<double>()),
             f << ": key '" << full << "' must be a positive number, not " << v.dump() << fix);
    return v.get<double>();
  };

  const json& arch = get(c, "architectures", "architectures");
  DF_CHECK(arch.is_array() && std::find(arch.begin(), arch.end(), kArchitecture) != arch.end(),
           f << ": key 'architectures' is " << arch.dump() << " but must list \"" << kArchitecture << "\"" << fix);
  const json& type = get(c, "model_type", "model_type");
  DF_CHECK(type == "qwen3", f << ": key 'model_type' is " << type.dump()
                              << " but DFlash drafters are \"qwen3\" (q/k norms, no attention bias)" << fix);
  DF_CHECK(!c.contains("attention_bias") || c["attention_bias"] == false,
           f << ": key 'attention_bias' is " << c["attention_bias"].dump() << "; attention biases are not supported");
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!c.contains(key) || c[key].is_null()) continue;
    const json& r = c[key];
    const json type = r.is_object() ? r.value("rope_type", r.value("type", json("default"))) : json(nullptr);
    DF_CHECK(type == "default", f << ": key '" << key << "' asks for rope " << r.dump()
                                  << "; the drafter supports plain rope only (rope_type \"default\")");
  }

  ExportedDrafter d;
  DrafterSpec& s = d.spec;
  s.hidden_size = integer(c, "hidden_size", "hidden_size", 1);
  s.intermediate_size = integer(c, "intermediate_size", "intermediate_size", 1);
  s.num_hidden_layers = integer(c, "num_hidden_layers", "num_hidden_layers", 1);
  s.num_attention_heads = integer(c, "num_attention_heads", "num_attention_heads", 1);
  s.num_key_value_heads = integer(c, "num_key_value_heads", "num_key_value_heads", 1);
  DF_CHECK(s.num_attention_heads % s.num_key_value_heads == 0,
           f << ": key 'num_key_value_heads' is " << s.num_key_value_heads << ", which does not divide "
             << "num_attention_heads " << s.num_attention_heads << fix);
  if (c.contains("head_dim")) {
    s.head_dim = integer(c, "head_dim", "head_dim", 1);
  } else {
    DF_CHECK(s.hidden_size % s.num_attention_heads == 0,
             f << ": key 'head_dim' is missing and hidden_size " << s.hidden_size << " is not a multiple of "
               << "num_attention_heads " << s.num_attention_heads << fix);
    s.head_dim = s.hidden_size / s.num_attention_heads;
  }
  s.rms_norm_eps = positive(c, "rms_norm_eps", "rms_norm_eps");
  if (!c.contains("rope_theta") && c.contains("rope_parameters") && c["rope_parameters"].is_object())
    s.rope_theta = positive(c["rope_parameters"], "rope_theta", "rope_parameters.rope_theta");
  else
    s.rope_theta = positive(c, "rope_theta", "rope_theta");
  s.vocab_size = integer(c, "vocab_size", "vocab_size", 1);
  s.max_position_embeddings = integer(c, "max_position_embeddings", "max_position_embeddings", 1);
  s.block_size = integer(c, "block_size", "block_size", 1);
  s.num_target_layers = integer(c, "num_target_layers", "num_target_layers", 1);

  const json& dc = get(c, "dflash_config", "dflash_config");
  DF_CHECK(dc.is_object(), f << ": key 'dflash_config' must be an object, not " << dc.dump() << fix);
  s.mask_token_id = integer(dc, "mask_token_id", "dflash_config.mask_token_id", 0);
  DF_CHECK(s.mask_token_id < s.vocab_size, f << ": key 'dflash_config.mask_token_id' is " << s.mask_token_id
                                             << ", outside the vocabulary of " << s.vocab_size << fix);
  const json& ids = get(dc, "target_layer_ids", "dflash_config.target_layer_ids");
  DF_CHECK(ids.is_array() && !ids.empty(),
           f << ": key 'dflash_config.target_layer_ids' must be a non-empty list, not " << ids.dump() << fix);
  for (const json& id : ids) {
    DF_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < s.num_target_layers,
             f << ": key 'dflash_config.target_layer_ids' holds " << id.dump() << ", not a layer of the "
               << s.num_target_layers << "-layer target (0-based)" << fix);
    s.target_layer_ids.push_back(id.get<int64_t>());
  }

  const char* dtype_key = c.contains("torch_dtype") ? "torch_dtype" : c.contains("dtype") ? "dtype" : nullptr;
  if (dtype_key) {
    const json& t = c[dtype_key];
    DF_CHECK(t == "bfloat16" || t == "float32" || t == "float16",
             f << ": key '" << dtype_key << "' is " << t.dump() << "; expected \"bfloat16\", \"float32\" or \"float16\""
               << fix);
    d.torch_dtype = t.get<std::string>();
  }
  return d;
}

ExportedDrafter read_exported_config(const fs::path& dir) {
  const fs::path file = dir / kConfigFile;
  json c;
  try {
    c = json::parse(read_file_text(file));
  } catch (const json::exception& e) {
    DF_FAIL("drafter config " << quoted(file) << " is not valid JSON (" << e.what() << "); fix: correct the file");
  }
  return parse_exported_config(c, quoted(file));
}

std::vector<std::string> drafter_spec_differences(const DrafterSpec& a, const DrafterSpec& b) {
  std::vector<std::string> out;
  auto compare = [&](const char* key, const auto& found, const auto& expected) {
    if (!(found == expected))
      out.push_back(std::string(key) + ": " + text(found) + " in the file, " + text(expected) + " expected");
  };
  compare("hidden_size", a.hidden_size, b.hidden_size);
  compare("intermediate_size", a.intermediate_size, b.intermediate_size);
  compare("num_hidden_layers", a.num_hidden_layers, b.num_hidden_layers);
  compare("num_attention_heads", a.num_attention_heads, b.num_attention_heads);
  compare("num_key_value_heads", a.num_key_value_heads, b.num_key_value_heads);
  compare("head_dim", a.head_dim, b.head_dim);
  compare("vocab_size", a.vocab_size, b.vocab_size);
  compare("rms_norm_eps", a.rms_norm_eps, b.rms_norm_eps);
  compare("rope_theta", a.rope_theta, b.rope_theta);
  compare("num_target_layers", a.num_target_layers, b.num_target_layers);
  compare("dflash_config.mask_token_id", a.mask_token_id, b.mask_token_id);
  compare("dflash_config.target_layer_ids", a.target_layer_ids, b.target_layer_ids);
  return out;
}

void export_drafter(const fs::path& out_dir, const DrafterSpec& spec, const ParameterStore& params, DType dtype) {
  const fs::path out = out_dir.has_filename() ? out_dir : out_dir.parent_path();
  const std::string what = "export_drafter " + quoted(out);
  DF_CHECK(dtype == DType::f32 || dtype == DType::bf16,
           what << ": dtype " << dtype_name(dtype) << " is not exported; fix: use bf16 (the default) or f32");
  const nlohmann::ordered_json config = exported_config_json(spec, dtype);
  parse_exported_config(json(config), "(the spec being exported)");
  const std::vector<ParamSpec> specs = drafter_param_specs(spec);
  check_store(specs, params, what);

  const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  std::error_code ec, probe;
  fs::create_directories(parent, ec);
  DF_CHECK(fs::is_directory(parent, probe), what << ": cannot create the directory " << quoted(parent) << ": "
                                          << (ec ? ec.message() : "a file of that name is in the way"));
  if (has_entry(out)) {
    DF_CHECK(fs::is_directory(out, ec), what << ": " << quoted(out) << " exists and is not a directory; fix: choose "
                                         << "another output directory");
    const std::string refusal = replace_refusal(out);
    DF_CHECK(refusal.empty(), what << ": refusing to overwrite " << quoted(out) << ": " << refusal
                                   << "; fix: choose another output directory or empty this one");
  }

  const fs::path staged = parent / ("." + out.filename().string() + ".tmp-export-" + std::to_string(::getpid()));
  fs::remove_all(staged, ec);
  try {
    DF_CHECK(fs::create_directory(staged, ec) && !ec, "cannot create the staging directory " << quoted(staged)
                                                          << ": " << ec.message());
    write_file_atomic(staged / kConfigFile, config.dump(2) + "\n");
    // One pass over the masters: refuse non-finite values (after rounding, for bf16).
    std::vector<std::vector<uint16_t>> halves;
    for (const ParamSpec& p : specs) {
      const std::vector<float> v = params.master(p.name).to_floats();
      std::vector<uint16_t> h(dtype == DType::bf16 ? v.size() : 0);
      for (size_t i = 0; i < v.size(); ++i) {
        const float x = dtype == DType::bf16 ? bf16_to_f32(h[i] = f32_to_bf16(v[i])) : v[i];
        DF_CHECK(std::isfinite(x), "parameter '" << p.name << "' holds " << v[i] << " at flat index " << i
                                                 << (std::isfinite(v[i]) ? ", beyond the bf16 range" : "")
                                                 << "; fix: the training diverged; export an earlier checkpoint");
      }
      halves.push_back(std::move(h));
    }
    const std::map<std::string, std::string> meta = {{"format", "pt"}};
    if (dtype == DType::f32) {
      std::vector<std::pair<std::string, Tensor>> tensors;
      for (const ParamSpec& p : specs) tensors.emplace_back(p.name, params.master(p.name));
      write_safetensors(staged / kWeightsFile, tensors, meta);
    } else {
      std::vector<SafeTensorsEntry> entries;
      for (size_t i = 0; i < specs.size(); ++i)
        entries.push_back({specs[i].name, "BF16", specs[i].shape.vec(), halves[i].data()});
      write_safetensors(staged / kWeightsFile, entries, meta);
    }
    publish_directory(staged, out);
  } catch (const std::exception& e) {
    fs::remove_all(staged, ec);
    DF_FAIL(what << " failed: " << e.what() << "; " << quoted(out) << " is unchanged");
  }
}

void load_exported_weights(const fs::path& dir, const DrafterSpec& expect, ParameterStore& params) {
  const std::string what = "load_exported_weights " + quoted(dir);
  const ExportedDrafter found = read_exported_config(dir);
  const std::vector<std::string> diffs = drafter_spec_differences(found.spec, expect);
  if (!diffs.empty()) {
    std::string list;
    for (const std::string& d : diffs) list += (list.empty() ? "" : "; ") + d;
    DF_FAIL(what << ": its config.json describes a different drafter: " << list
                 << "; fix: make the [drafter] config (and target layers) match the export, or train from scratch");
  }
  load_weights_file(dir / kWeightsFile, expect, params, what);
}

std::optional<std::string> drafter_dir_problem(const fs::path& dir) {
  std::error_code ec;
  const std::string export_kind = "an exported drafter (a folder with config.json + model.safetensors, written by "
                                  "`dflash-train export`)";
  const std::string checkpoint_kind = "a checkpoints/step-N folder of a run";
  const std::string expects = export_kind + " or " + checkpoint_kind;
  if (!fs::exists(dir, ec)) return "the folder does not exist; it must be " + expects;
  if (!fs::is_directory(dir, ec)) return "it is a file; it must be " + expects;
  if (has_entry(dir / kConfigFile)) {
    if (!has_entry(dir / kWeightsFile)) return "it has config.json but no model.safetensors; it must be " + expects;
    return std::nullopt;
  }
  if (has_entry(dir / kCheckpointMarker) || has_entry(dir / "params.safetensors")) {
    if (auto problem = checkpoint_problem(dir, false))
      return "it is not a complete checkpoint: " + *problem + "; it must be " + expects;
    return std::nullopt;
  }
  std::string hint;
  const fs::path run = has_entry(dir / "checkpoints") ? dir : dir.filename() == "checkpoints" ? dir.parent_path() : fs::path();
  if (!run.empty()) {
    if (auto latest = latest_complete_checkpoint(run)) hint = "; the newest complete checkpoint here is " + quoted(*latest);
    else hint = "; this run has no complete checkpoint yet";
  }
  return "it is neither " + export_kind + " nor " + checkpoint_kind + ": it has no config.json" +
         (has_entry(dir / kWeightsFile) ? " (only model.safetensors)" : "") + " and no " + kCheckpointMarker + hint;
}

void load_drafter_weights(const fs::path& dir, const DrafterSpec& expect, ParameterStore& params) {
  const std::string what = "load_drafter_weights " + quoted(dir);
  if (auto problem = drafter_dir_problem(dir)) DF_FAIL(what << ": " << *problem);
  if (has_entry(dir / kConfigFile)) return load_exported_weights(dir, expect, params);
  if (auto problem = checkpoint_problem(dir, true))
    DF_FAIL(what << ": not a complete checkpoint: " << *problem << "; fix: choose another checkpoint");
  if (has_entry(dir / kCheckpointDrafterConfig)) {
    const ExportedDrafter found = read_drafter_config(dir);
    const std::vector<std::string> diffs = drafter_spec_differences(found.spec, expect);
    std::string list;
    for (const std::string& d : diffs) list += (list.empty() ? "" : "; ") + d;
    DF_CHECK(diffs.empty(), what << ": its " << kCheckpointDrafterConfig << " describes a different drafter: " << list
                                 << "; fix: make the [drafter] config (and target layers) match the checkpoint");
  }
  if (is_sharded_checkpoint(dir)) return load_sharded_params(dir, params, what);
  load_weights_file(dir / "params.safetensors", expect, params, what);
}

ExportedDrafter read_drafter_config(const fs::path& dir) {
  if (has_entry(dir / kConfigFile)) return read_exported_config(dir);
  const fs::path file = dir / kCheckpointDrafterConfig;
  DF_CHECK(has_entry(file), "drafter config: " << quoted(dir) << " has neither config.json (an export) nor "
                                               << kCheckpointDrafterConfig << " (a checkpoint saved with its "
                                               << "drafter spec); fix: pass an export or such a checkpoint");
  json c;
  try {
    c = json::parse(read_file_text(file));
  } catch (const json::exception& e) {
    DF_FAIL("drafter config " << quoted(file) << " is not valid JSON (" << e.what() << ")");
  }
  return parse_exported_config(c, quoted(file));
}

void export_checkpoint(const fs::path& checkpoint, const fs::path& out_dir, DType dtype) {
  const std::string what = "export_checkpoint " + quoted(checkpoint);
  if (auto problem = checkpoint_problem(checkpoint, true))
    DF_FAIL(what << ": not a complete checkpoint: " << *problem << "; fix: choose another checkpoint");
  DF_CHECK(has_entry(checkpoint / kCheckpointDrafterConfig),
           what << ": the checkpoint has no " << kCheckpointDrafterConfig << " (it was saved without its drafter "
                << "spec); fix: load it into a store built from the run's spec and call export_drafter");
  const ExportedDrafter d = read_drafter_config(checkpoint);
  ParameterStore store(drafter_param_specs(d.spec));
  load_drafter_weights(checkpoint, d.spec, store);
  export_drafter(out_dir, d.spec, store, dtype);
}

}  // namespace dflash
