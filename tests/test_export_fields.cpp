// The serving engines' config.json fields against a fresh export: tests/golden/serving-fields/fields.json
// lists every field SGLang 0.5.23, vLLM 0.33.0 and z-lab's dflash 0.1.0 read for a DFlash drafter, with
// who reads it. Each written field must be present with its type and value, each other one absent,
// and nothing else written; modeling_dflash.py (auto_map's class) sits beside config.json, equal to
// python/export's. read_exported_config reads the export back and refuses fields it cannot honour.
#include <map>
#include <set>

#include "tests/checkpoint_io_util.h"

using namespace dflash;
using namespace dflash::test;
using namespace dflash::test::ckpt;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

fs::path fields_dir() { return fs::path(DFLASH_SOURCE_DIR) / "tests/golden/serving-fields"; }

json read_fields() { return json::parse(read_raw(fields_dir() / "fields.json")); }

// A drafter unlike every default: head_dim is not hidden / heads, the layer ids are not the default's.
DrafterSpec serving_spec() {
  DrafterSpec s;
  s.hidden_size = 32;
  s.intermediate_size = 48;
  s.num_hidden_layers = 3;
  s.num_attention_heads = 4;
  s.num_key_value_heads = 2;
  s.head_dim = 16;
  s.vocab_size = 100;
  s.rms_norm_eps = 1e-5;
  s.rope_theta = 500000.0;
  s.max_position_embeddings = 4096;
  s.block_size = 8;
  s.mask_token_id = 99;
  s.target_layer_ids = {1, 5, 9};
  s.num_target_layers = 12;
  return s;
}

// fields.json's "from" names, evaluated for `s` exported as `dtype` ("bfloat16" or "float32").
json from_value(const std::string& name, const DrafterSpec& s, const std::string& dtype) {
  const std::map<std::string, json> v = {
      {"hidden_size", s.hidden_size},
      {"intermediate_size", s.intermediate_size},
      {"num_hidden_layers", s.num_hidden_layers},
      {"num_attention_heads", s.num_attention_heads},
      {"num_key_value_heads", s.num_key_value_heads},
      {"head_dim", s.head_dim},
      {"rms_norm_eps", s.rms_norm_eps},
      {"rope_theta", s.rope_theta},
      {"vocab_size", s.vocab_size},
      {"max_position_embeddings", s.max_position_embeddings},
      {"block_size", s.block_size},
      {"num_target_layers", s.num_target_layers},
      {"mask_token_id", s.mask_token_id},
      {"target_layer_ids", s.target_layer_ids},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", s.rope_theta}}},
      {"layer_types", std::vector<std::string>(size_t(s.num_hidden_layers), "full_attention")},
      {"dflash_config", {{"mask_token_id", s.mask_token_id}, {"target_layer_ids", s.target_layer_ids}}},
      {"dtype", dtype},
  };
  auto it = v.find(name);
  REQUIRE_MESSAGE(it != v.end(), "fields.json names an unknown 'from': " << name);
  return it->second;
}

bool has_type(const json& v, const std::string& type) {
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "array") return v.is_array();
  if (type == "object") return v.is_object();
  FAIL("fields.json names an unknown type: " << type);
  return false;
}

// "a.b" -> the value at config["a"]["b"], or nullptr when a step is missing.
const json* lookup(const json& config, const std::string& path) {
  const json* at = &config;
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    const std::string key = path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (!at->is_object() || !at->contains(key)) return nullptr;
    at = &(*at)[key];
    if (dot == std::string::npos) return at;
    begin = dot + 1;
  }
}

// Every key path of config (objects only; arrays are leaves).
void key_paths(const json& j, const std::string& prefix, std::set<std::string>& out) {
  for (const auto& [key, value] : j.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    out.insert(path);
    if (value.is_object()) key_paths(value, path, out);
  }
}

void check_export(const fs::path& dir, const DrafterSpec& s, const std::string& dtype) {
  const json fields = read_fields();
  const json config = json::parse(read_raw(dir / "config.json"));
  std::set<std::string> listed;
  for (const json& f : fields.at("written")) {
    const std::string name = f.at("field");
    listed.insert(name);
    INFO("written field " << name);
    const json* v = lookup(config, name);
    REQUIRE(v != nullptr);
    CHECK(has_type(*v, f.at("type")));
    const json want = f.contains("value") ? f.at("value") : from_value(f.at("from"), s, dtype);
    CHECK(*v == want);
  }
  for (const json& f : fields.at("not_written")) {
    INFO("field left out: " << f.at("field").get<std::string>());
    CHECK(lookup(config, f.at("field")) == nullptr);
  }
  std::set<std::string> paths;
  key_paths(config, "", paths);
  for (const std::string& p : paths) {
    INFO("config.json holds " << p << ", which fields.json does not list as written");
    const bool inside_listed_value = p.rfind("auto_map.", 0) == 0 || p.rfind("rope_parameters.", 0) == 0;
    CHECK((listed.count(p) == 1 || inside_listed_value));
  }
  const std::string model_file = read_raw(dir / "modeling_dflash.py");
  CHECK(model_file == read_raw(fs::path(DFLASH_SOURCE_DIR) / "python/export/modeling_dflash.py"));
  CHECK(model_file == exported_model_file());
  const std::string auto_model = config.at("auto_map").at("AutoModel");
  REQUIRE(auto_model == "modeling_dflash.DFlashDraftModel");
  CHECK(model_file.find("\nclass DFlashDraftModel(PreTrainedModel):") != std::string::npos);
}

}  // namespace

TEST_SUITE("export") {
  TEST_CASE("serving-fields/fields.json: every field has a type or a reason, and readers from the named sources") {
    const json fields = read_fields();
    const json& sources = fields.at("sources");
    for (const char* engine : {"sglang", "vllm", "zlab", "transformers"}) CHECK(sources.contains(engine));
    std::set<std::string> seen;
    for (const char* list : {"written", "not_written"}) {
      for (const json& f : fields.at(list)) {
        const std::string name = f.at("field");
        INFO(list << " " << name);
        CHECK(seen.insert(name).second);  // listed once
        CHECK(f.at("read_by").size() >= 1);
        for (const json& r : f.at("read_by")) {
          CHECK(sources.contains(r.at("engine").get<std::string>()));
          CHECK(!r.at("file").get<std::string>().empty());
          CHECK(!r.at("reads").get<std::string>().empty());
        }
        if (std::string(list) == "written") CHECK((f.contains("value") != f.contains("from")));
        else CHECK(!f.at("why_not_written").get<std::string>().empty());
      }
    }
    CHECK(fs::exists(fields_dir() / "README.md"));
  }

  TEST_CASE("a fresh export writes every serving field with its value, nothing else, and modeling_dflash.py") {
    CpuRuntime rt;
    TempDir dir;
    const DrafterSpec spec = serving_spec();
    Trained a(spec, 5, 0);
    export_drafter(dir / "bf16", spec, a.params);
    CHECK(listing(dir / "bf16") == std::vector<std::string>{"config.json", "model.safetensors", "modeling_dflash.py"});
    check_export(dir / "bf16", spec, "bfloat16");
    export_drafter(dir / "f32", spec, a.params, DType::f32);
    check_export(dir / "f32", spec, "float32");

    const ExportedDrafter back = read_exported_config(dir / "f32");
    CHECK(drafter_spec_differences(back.spec, spec).empty());
    CHECK(back.spec.block_size == spec.block_size);
    CHECK(back.spec.max_position_embeddings == spec.max_position_embeddings);
    CHECK(back.torch_dtype == "float32");
    // An export (with its model file) is replaced by the next one.
    export_drafter(dir / "f32", spec, a.params);
    check_export(dir / "f32", spec, "bfloat16");
  }

  TEST_CASE("read_exported_config refuses serving fields that describe another drafter") {
    const json good = exported_config_json(serving_spec(), DType::f32);
    CHECK(drafter_spec_differences(parse_exported_config(good, "good").spec, serving_spec()).empty());
    struct Bad {
      const char* key;
      json value;
      const char* message;
    };
    const std::vector<Bad> bad = {
        {"hidden_act", "gelu", "SiLU-gated"},
        {"is_causal", true, "no causal mask"},
        {"use_sliding_window", true, "sliding-window attention is not supported"},
        {"layer_types", json::array({"full_attention", "sliding_attention", "full_attention"}), "all \"full_attention\""},
        {"layer_types", json::array({"full_attention"}), "has 1 entries but num_hidden_layers is 3"},
        {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}}, "they must agree"},
        {"rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 500000.0}, {"factor", 4.0}}, "plain rope only"},
    };
    for (const Bad& b : bad) {
      json c = good;
      c[b.key] = b.value;
      INFO(b.key << " = " << b.value.dump());
      CHECK_THROWS_WITH_AS(parse_exported_config(c, "case"), doctest::Contains(b.message), Error);
    }
    // Absent, they take the drafter's meaning (the golden exports have none of them).
    json minimal = good;
    for (const char* key : {"hidden_act", "is_causal", "use_sliding_window", "layer_types", "rope_parameters",
                            "rope_scaling", "sliding_window", "auto_map", "dtype"})
      minimal.erase(key);
    CHECK(drafter_spec_differences(parse_exported_config(minimal, "minimal").spec, serving_spec()).empty());
  }
}
