// The exported drafter: f32/bf16 round trips, config and tensors against the golden
// drafter_config.json / drafter_init.safetensors, the golden files as a warm start, every refusal
// (config keys, dims, shapes, NaN, foreign tensors, unsafe output directories), and checkpoints as drafters
// (a drafter spec that does not describe the store refused on save).
#include "tests/checkpoint_io_util.h"

using namespace dflash;
using namespace dflash::test;
using namespace dflash::test::ckpt;
namespace fs = std::filesystem;
using json = nlohmann::json;

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

namespace {
// The golden drafter_config.json's keys, each with the same value in `config` (an export also holds
// the serving engines' fields, which tests/test_export_fields.cpp checks).
void check_golden_keys(const json& config, const json& gold) {
  for (const auto& [key, value] : gold.items()) {
    INFO(key);
    CHECK(config.value(key, json()) == value);
  }
}
}  // namespace

TEST_SUITE("checkpoint-io") {

TEST_CASE("export: f32 reloads bitwise, bf16 as rounded, config and tensors as the golden drafter's") {
  CpuRuntime rt;
  TempDir dir;
  const DrafterSpec spec = golden_spec();
  Trained a(spec, 3, 0);
  const SafeTensors gold(golden_dir() / "drafter_init.safetensors");
  const json gold_config = json::parse(read_raw(golden_dir() / "drafter_config.json"));

  export_drafter(dir / "f32", spec, a.params, DType::f32);
  CHECK(listing(dir.path) == std::vector<std::string>{"f32"});
  CHECK(listing(dir / "f32") == std::vector<std::string>{"config.json", "model.safetensors", "modeling_dflash.py"});
  check_golden_keys(json::parse(read_raw(dir / "f32" / "config.json")), gold_config);
  {
    const SafeTensors st(dir / "f32" / "model.safetensors");
    CHECK(st.names() == gold.names());
    for (const std::string& n : gold.names()) {
      CHECK(st.info(n).shape == gold.info(n).shape);
      CHECK(st.info(n).dtype == "F32");
    }
  }
  Trained b(spec, 40, 0);
  load_exported_weights(dir / "f32", spec, b.params);
  CHECK(bitwise_equal(b.params.flat_master().to_floats(), a.params.flat_master().to_floats()));

  export_drafter(dir / "bf16", spec, a.params);  // bf16 is the default
  json config = json::parse(read_raw(dir / "bf16" / "config.json"));
  CHECK(config["torch_dtype"] == "bfloat16");
  config["torch_dtype"] = "float32";
  check_golden_keys(config, gold_config);
  {
    const SafeTensors st(dir / "bf16" / "model.safetensors");
    CHECK(st.names() == gold.names());
    for (const std::string& n : st.names()) CHECK(st.info(n).dtype == "BF16");
  }
  load_exported_weights(dir / "bf16", spec, b.params);
  for (const ParamSpec& p : a.params.specs()) {
    std::vector<float> want = a.params.master(p.name).to_floats();
    for (float& x : want) x = bf16_to_f32(f32_to_bf16(x));
    INFO(p.name);
    CHECK(bitwise_equal(b.params.master(p.name).to_floats(), want));
  }
  const ExportedDrafter back = read_exported_config(dir / "bf16");
  CHECK(back.torch_dtype == "bfloat16");
  CHECK(back.spec.hidden_size == 64);
  CHECK(back.spec.intermediate_size == 128);
  CHECK(back.spec.num_hidden_layers == 2);
  CHECK(back.spec.num_attention_heads == 4);
  CHECK(back.spec.num_key_value_heads == 2);
  CHECK(back.spec.head_dim == 16);
  CHECK(back.spec.vocab_size == 320);
  CHECK(back.spec.rms_norm_eps == 1e-6);
  CHECK(back.spec.rope_theta == 10000.0);
  CHECK(back.spec.max_position_embeddings == 256);
  CHECK(back.spec.block_size == 4);
  CHECK(back.spec.mask_token_id == 319);
  CHECK(back.spec.target_layer_ids == std::vector<int64_t>{1, 2});
  CHECK(back.spec.num_target_layers == 4);

  // A previous export is replaced.
  export_drafter(dir / "bf16", spec, a.params, DType::f32);
  CHECK(json::parse(read_raw(dir / "bf16" / "config.json"))["torch_dtype"] == "float32");
  CHECK(listing(dir.path) == std::vector<std::string>{"bf16", "f32"});
}

TEST_CASE("export refuses what it must not write, naming the directory or tensor") {
  CpuRuntime rt;
  TempDir dir;
  const DrafterSpec spec = small_spec();
  Trained a(spec, 3, 0);

  fs::create_directories(dir / "notes");
  write_raw(dir / "notes" / "README.txt", "mine");
  const std::string e = error_of([&] { export_drafter(dir / "notes", spec, a.params); });
  CHECK(e.find("refusing to overwrite '" + (dir / "notes").string() + "'") != std::string::npos);
  CHECK(e.find("'README.txt'") != std::string::npos);
  CHECK(read_raw(dir / "notes" / "README.txt") == "mine");

  write_raw(dir / "file", "x");
  CHECK_THROWS_WITH_AS(export_drafter(dir / "file", spec, a.params), doctest::Contains("exists and is not a directory"),
                       Error);
  CHECK_THROWS_WITH_AS(export_drafter(dir / "out", spec, a.params, DType::i32),
                       doctest::Contains("dtype i32 is not exported"), Error);
  DrafterSpec wider = spec;
  wider.intermediate_size = 24;
  CHECK_THROWS_WITH_AS(export_drafter(dir / "out", wider, a.params),
                       doctest::Contains("is [16,8] in the store but [24,8] in the spec"), Error);

  std::vector<float> v = a.params.master("norm.weight").to_floats();
  v[3] = NAN;
  a.params.master("norm.weight").copy_from_host(v.data(), v.size() * 4);
  CHECK_THROWS_WITH_AS(export_drafter(dir / "out", spec, a.params),
                       doctest::Contains("parameter 'norm.weight' holds nan at flat index 3"), Error);
  v[3] = 3.4e38f;  // finite in f32, infinite once rounded to bf16
  a.params.master("norm.weight").copy_from_host(v.data(), v.size() * 4);
  CHECK_THROWS_WITH_AS(export_drafter(dir / "out", spec, a.params), doctest::Contains("beyond the bf16 range"), Error);
  CHECK_FALSE(fs::exists(dir / "out"));
  CHECK(listing(dir.path) == std::vector<std::string>{"file", "notes"});
}

TEST_CASE("the golden drafter_config.json and drafter_init.safetensors load as an export (warm start)") {
  CpuRuntime rt;
  TempDir dir;
  copy_golden_as_export(dir / "golden");
  const DrafterSpec spec = golden_spec();
  const ExportedDrafter d = read_exported_config(dir / "golden");
  CHECK(d.torch_dtype == "float32");
  CHECK(d.spec.hidden_size == 64);
  CHECK(d.spec.intermediate_size == 128);
  CHECK(d.spec.target_layer_ids == std::vector<int64_t>{1, 2});
  CHECK(d.spec.mask_token_id == 319);
  CHECK(d.spec.rope_theta == 10000.0);

  const SafeTensors gold(golden_dir() / "drafter_init.safetensors");
  for (int via_helper = 0; via_helper < 2; ++via_helper) {
    Trained b(spec, 8, 0);
    if (via_helper) load_drafter_weights(dir / "golden", spec, b.params);
    else load_exported_weights(dir / "golden", spec, b.params);
    for (const ParamSpec& p : b.params.specs()) {
      INFO(p.name);
      CHECK(bitwise_equal(b.params.master(p.name).to_floats(), gold.read_floats(p.name)));
    }
  }
}

TEST_CASE("read_exported_config names the file and the key of every problem") {
  TempDir dir;
  const json gold = json::parse(read_raw(golden_dir() / "drafter_config.json"));
  const fs::path file = dir / "config.json";
  struct Case {
    std::function<void(json&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](json& c) { c.erase("hidden_size"); }, "key 'hidden_size' is missing"},
      {[](json& c) { c["hidden_size"] = "64"; }, "key 'hidden_size' must be an integer, not \"64\""},
      {[](json& c) { c["num_hidden_layers"] = 0; }, "key 'num_hidden_layers' is 0 but must be at least 1"},
      {[](json& c) { c["architectures"] = {"Qwen3ForCausalLM"}; }, "key 'architectures' is [\"Qwen3ForCausalLM\"]"},
      {[](json& c) { c["model_type"] = "llama"; }, "key 'model_type' is \"llama\""},
      {[](json& c) { c["dflash_config"].erase("mask_token_id"); }, "key 'dflash_config.mask_token_id' is missing"},
      {[](json& c) { c["dflash_config"]["mask_token_id"] = 320; }, "'dflash_config.mask_token_id' is 320, outside"},
      {[](json& c) { c["dflash_config"]["target_layer_ids"] = {1, 4}; },
       "key 'dflash_config.target_layer_ids' holds 4"},
      {[](json& c) { c["dflash_config"]["target_layer_ids"] = json::array(); },
       "key 'dflash_config.target_layer_ids' must be a non-empty list"},
      {[](json& c) { c.erase("dflash_config"); }, "key 'dflash_config' is missing"},
      {[](json& c) { c["num_key_value_heads"] = 3; }, "key 'num_key_value_heads' is 3, which does not divide"},
      {[](json& c) { c["rms_norm_eps"] = -1; }, "key 'rms_norm_eps' must be a positive number, not -1"},
      {[](json& c) { c.erase("rope_theta"); }, "key 'rope_theta' is missing"},
      {[](json& c) { c["attention_bias"] = true; }, "key 'attention_bias' is true"},
      {[](json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}}; }, "key 'rope_scaling' asks for rope"},
      {[](json& c) { c["torch_dtype"] = "int8"; }, "key 'torch_dtype' is \"int8\""},
  };
  for (const Case& c : cases) {
    json edited = gold;
    c.edit(edited);
    write_raw(file, edited.dump());
    const std::string e = error_of([&] { read_exported_config(dir.path); });
    INFO(c.message);
    CHECK(e.find("drafter config '" + file.string() + "'") != std::string::npos);
    CHECK(e.find(c.message) != std::string::npos);
  }
  write_raw(file, "{\"hidden_size\": ");
  CHECK_THROWS_WITH_AS(read_exported_config(dir.path), doctest::Contains("is not valid JSON"), Error);
  const std::string none = (dir / "none" / "config.json").string();
  CHECK_THROWS_WITH_AS(read_exported_config(dir / "none"), doctest::Contains(none.c_str()), Error);

  // Accepted spellings: rope_theta under rope_parameters, head_dim absent, "dtype" for torch_dtype.
  json alt = gold;
  alt.erase("rope_theta");
  alt["rope_parameters"] = {{"rope_theta", 5e5}, {"rope_type", "default"}};
  alt.erase("head_dim");
  alt.erase("torch_dtype");
  alt["dtype"] = "bfloat16";
  write_raw(file, alt.dump());
  const ExportedDrafter d = read_exported_config(dir.path);
  CHECK(d.spec.rope_theta == 5e5);
  CHECK(d.spec.head_dim == 16);
  CHECK(d.torch_dtype == "bfloat16");
}

TEST_CASE("load_exported_weights refuses other dims, wrong shapes, NaN and foreign tensors, changing nothing") {
  CpuRuntime rt;
  TempDir dir;
  const DrafterSpec spec = golden_spec();
  copy_golden_as_export(dir / "golden");
  Trained b(spec, 8, 0);
  const Snapshot before(b);

  DrafterSpec other = spec;
  other.intermediate_size = 96;
  other.rope_theta = 1e6;
  Trained c(other, 8, 0);
  const std::string e = error_of([&] { load_exported_weights(dir / "golden", other, c.params); });
  CHECK(e.find("'" + (dir / "golden").string() + "'") != std::string::npos);
  CHECK(e.find("intermediate_size: 128 in the file, 96 expected") != std::string::npos);
  CHECK(e.find("rope_theta: 10000.0 in the file, 1000000.0 expected") != std::string::npos);

  // Rewrites the golden weights with one change.
  const SafeTensors gold(golden_dir() / "drafter_init.safetensors");
  auto variant = [&](const std::string& name, const std::function<void(std::vector<SafeTensorsEntry>&,
                                                                       std::vector<std::vector<float>>&)>& edit) {
    const fs::path d = dir / name;
    fs::create_directories(d);
    fs::copy_file(golden_dir() / "drafter_config.json", d / "config.json");
    std::vector<std::vector<float>> data;
    std::vector<SafeTensorsEntry> entries;
    for (const std::string& n : gold.names()) data.push_back(gold.read_floats(n));
    for (size_t i = 0; i < gold.names().size(); ++i)
      entries.push_back({gold.names()[i], "F32", gold.info(gold.names()[i]).shape, nullptr});
    edit(entries, data);
    for (size_t i = 0; i < entries.size(); ++i) entries[i].data = data[i].data();
    write_safetensors(d / "model.safetensors", entries);
    return d;
  };
  auto index_of = [&](const std::string& n) {
    return size_t(std::find(gold.names().begin(), gold.names().end(), n) - gold.names().begin());
  };

  const fs::path shaped = variant("shaped", [&](auto& entries, auto&) {
    entries[index_of("layers.0.mlp.up_proj.weight")].shape = {64, 128};
  });
  CHECK_THROWS_WITH_AS(load_exported_weights(shaped, spec, b.params),
                       doctest::Contains("tensor 'layers.0.mlp.up_proj.weight' has shape [64,128] but the drafter's "
                                         "parameter is [128,64]"),
                       Error);
  const fs::path nan = variant("nan", [&](auto&, auto& data) { data[index_of("norm.weight")][5] = NAN; });
  const std::string e2 = error_of([&] { load_exported_weights(nan, spec, b.params); });
  CHECK(e2.find("tensor 'norm.weight'") != std::string::npos);
  CHECK(e2.find("holds NaN at index 5") != std::string::npos);
  CHECK(e2.find("load_exported_weights") != std::string::npos);
  const fs::path missing = variant("missing", [&](auto& entries, auto& data) {
    const size_t i = index_of("hidden_norm.weight");
    entries.erase(entries.begin() + long(i));
    data.erase(data.begin() + long(i));
  });
  CHECK_THROWS_WITH_AS(load_exported_weights(missing, spec, b.params),
                       doctest::Contains("has no tensor 'hidden_norm.weight' (shape [64])"), Error);
  const fs::path extra = variant("extra", [&](auto& entries, auto& data) {
    data.push_back(std::vector<float>(320 * 64, 0.0f));
    entries.push_back({"model.embed_tokens.weight", "F32", {320, 64}, nullptr});
  });
  CHECK_THROWS_WITH_AS(load_exported_weights(extra, spec, b.params),
                       doctest::Contains("unexpected tensor 'model.embed_tokens.weight'"), Error);
  check_same(before, Snapshot(b));

  CHECK_THROWS_WITH_AS(load_drafter_weights(dir.path, spec, b.params),
                       doctest::Contains("neither an exported drafter"), Error);
}

TEST_CASE("a checkpoint serves as a drafter for eval and export") {
  CpuRuntime rt;
  TempDir dir;
  const DrafterSpec spec = small_spec();
  Trained a(spec, 1, 1);
  save_checkpoint(dir / "run", 1, a.params, a.opt, {}, &spec);
  const fs::path step1 = dir / "run" / "checkpoints" / "step-1";

  Trained b(spec, 9, 0);
  load_drafter_weights(step1, spec, b.params);
  CHECK(bitwise_equal(b.params.flat_master().to_floats(), a.params.flat_master().to_floats()));
  CHECK(read_drafter_config(step1).spec.intermediate_size == spec.intermediate_size);

  DrafterSpec other = spec;
  other.mask_token_id = 30;
  const std::string e = error_of([&] { load_drafter_weights(step1, other, b.params); });
  CHECK(e.find("drafter_config.json describes a different drafter") != std::string::npos);
  CHECK(e.find("dflash_config.mask_token_id: 31 in the file, 30 expected") != std::string::npos);

  export_checkpoint(step1, dir / "export", DType::f32);
  const SafeTensors st(dir / "export" / "model.safetensors");
  for (const ParamSpec& p : a.params.specs())
    CHECK(bitwise_equal(st.read_floats(p.name), a.params.master(p.name).to_floats()));
  CHECK(json::parse(read_raw(dir / "export" / "config.json")) == json(exported_config_json(spec, DType::f32)));

  // Without its drafter spec: weights still load (names and shapes checked); export needs the spec.
  a.step();
  save_checkpoint(dir / "run", 2, a.params, a.opt, {});
  const fs::path step2 = dir / "run" / "checkpoints" / "step-2";
  load_drafter_weights(step2, spec, b.params);
  CHECK(bitwise_equal(b.params.flat_master().to_floats(), a.params.flat_master().to_floats()));
  CHECK_THROWS_WITH_AS(export_checkpoint(step2, dir / "export2"), doctest::Contains("has no drafter_config.json"),
                       Error);
  fs::remove(step2 / "COMPLETE.json");
  CHECK_THROWS_WITH_AS(load_drafter_weights(step2, spec, b.params),
                       doctest::Contains("not a complete checkpoint: no COMPLETE.json"), Error);
}

TEST_CASE("export and warm start: the remaining refusals name what is wrong") {
  CpuRuntime rt;
  TempDir dir;
  const DrafterSpec spec = small_spec();
  Trained a(spec, 3, 0);

  CHECK_THROWS_WITH_AS(exported_config_json(spec, DType::u8), doctest::Contains("dtype u8 is not exported"), Error);
  DrafterSpec bad = spec;
  bad.mask_token_id = bad.vocab_size;
  const std::string e = error_of([&] { export_drafter(dir / "out", bad, a.params); });
  CHECK(e.find("(the spec being exported)") != std::string::npos);
  CHECK(e.find("key 'dflash_config.mask_token_id' is 32, outside the vocabulary of 32") != std::string::npos);

  // Output directories that are not previous exports, and a parent that cannot be created.
  fs::create_directories(dir / "weights-only");
  write_raw(dir / "weights-only" / "model.safetensors", "x");
  CHECK_THROWS_WITH_AS(export_drafter(dir / "weights-only", spec, a.params),
                       doctest::Contains("it has model.safetensors but no config.json"), Error);
  fs::create_directories(dir / "llm");
  write_raw(dir / "llm" / "config.json", "{\"architectures\": [\"Qwen3ForCausalLM\"]}");
  CHECK_THROWS_WITH_AS(export_drafter(dir / "llm", spec, a.params),
                       doctest::Contains("its config.json is not a DFlash drafter's"), Error);
  write_raw(dir / "file", "x");
  CHECK_THROWS_WITH_AS(export_drafter(dir / "file" / "sub", spec, a.params),
                       doctest::Contains("cannot create the directory"), Error);

  // Stores that do not hold exactly the drafter's parameters.
  DrafterSpec shallow = spec;
  shallow.num_hidden_layers = 1;
  Trained s1(shallow, 3, 0);
  CHECK_THROWS_WITH_AS(export_drafter(dir / "out", spec, s1.params),
                       doctest::Contains("the parameter store has no 'layers.1.input_layernorm.weight'"), Error);
  std::vector<ParamSpec> more = drafter_param_specs(spec);
  more.push_back({"extra.weight", {4}});
  ParameterStore extra(more);
  const std::string count = "holds " + std::to_string(more.size()) + " parameters but the drafter " +
                            std::to_string(more.size() - 1);
  CHECK_THROWS_WITH_AS(export_drafter(dir / "out", spec, extra), doctest::Contains(count.c_str()), Error);

  // Weight files with an integer tensor or a prefixed name.
  export_drafter(dir / "good", spec, a.params, DType::f32);
  const SafeTensors good(dir / "good" / "model.safetensors");
  auto rewritten = [&](const std::string& name, const std::string& rename, const std::string& dtype) {
    fs::create_directories(dir / name);
    fs::copy_file(dir / "good" / "config.json", dir / name / "config.json", fs::copy_options::overwrite_existing);
    std::vector<std::vector<float>> data;
    std::vector<std::vector<int32_t>> ints;
    std::vector<std::vector<uint16_t>> halves;
    std::vector<SafeTensorsEntry> entries;
    for (const std::string& n : good.names()) data.push_back(good.read_floats(n));
    for (size_t i = 0; i < data.size(); ++i) {
      const std::string& n = good.names()[i];
      ints.emplace_back(data[i].size(), 1);
      halves.emplace_back(data[i].size());
      for (size_t k = 0; k < data[i].size(); ++k) halves[i][k] = f32_to_bf16(data[i][k]);
      const bool target = n == "norm.weight";
      const void* bytes = !target || dtype == "F32" ? static_cast<const void*>(data[i].data())
                          : dtype == "I32"          ? static_cast<const void*>(ints[i].data())
                                                    : static_cast<const void*>(halves[i].data());
      entries.push_back({target && !rename.empty() ? rename : n, target ? dtype : "F32", good.info(n).shape, bytes});
    }
    if (!rename.empty()) entries.push_back({"norm.weight", "F32", good.info("norm.weight").shape,
                                            data[size_t(std::find(good.names().begin(), good.names().end(),
                                                                  "norm.weight") - good.names().begin())].data()});
    write_safetensors(dir / name / "model.safetensors", entries);
    return dir / name;
  };
  Trained b(spec, 4, 0);
  CHECK_THROWS_WITH_AS(load_exported_weights(rewritten("ints", "", "I32"), spec, b.params),
                       doctest::Contains("tensor 'norm.weight' is I32; drafter weights are F32, BF16 or F16"), Error);
  CHECK_THROWS_WITH_AS(load_exported_weights(rewritten("prefixed", "model.norm.weight", "F32"), spec, b.params),
                       doctest::Contains("unexpected tensor 'model.norm.weight' (exported names have no 'model.' "
                                         "prefix)"),
                       Error);
  CHECK_THROWS_WITH_AS(load_exported_weights(rewritten("lm", "lm_head.weight", "F32"), spec, b.params),
                       doctest::Contains("(the embedding and lm_head are the target's"), Error);
  // A BF16 tensor among F32 ones is converted to its f32 master.
  load_exported_weights(rewritten("half", "", "BF16"), spec, b.params);
  std::vector<float> want = a.params.master("norm.weight").to_floats();
  for (float& x : want) x = bf16_to_f32(f32_to_bf16(x));
  CHECK(bitwise_equal(b.params.master("norm.weight").to_floats(), want));
  CHECK(bitwise_equal(b.params.master("fc.weight").to_floats(), a.params.master("fc.weight").to_floats()));

  // Config files that are not a drafter's.
  fs::create_directories(dir / "cfg");
  write_raw(dir / "cfg" / "config.json", "[1, 2]");
  CHECK_THROWS_WITH_AS(read_exported_config(dir / "cfg"), doctest::Contains("is not a JSON object"), Error);
  json odd = json::parse(read_raw(golden_dir() / "drafter_config.json"));
  odd.erase("head_dim");
  odd["num_attention_heads"] = 6;
  write_raw(dir / "cfg" / "config.json", odd.dump());
  CHECK_THROWS_WITH_AS(read_exported_config(dir / "cfg"),
                       doctest::Contains("key 'head_dim' is missing and hidden_size 64 is not a multiple of "
                                         "num_attention_heads 6"),
                       Error);
  fs::create_directories(dir / "empty");
  CHECK_THROWS_WITH_AS(read_drafter_config(dir / "empty"), doctest::Contains("has neither config.json"), Error);
  write_raw(dir / "empty" / "drafter_config.json", "{");
  CHECK_THROWS_WITH_AS(read_drafter_config(dir / "empty"), doctest::Contains("drafter_config.json' is not valid JSON"),
                       Error);
  CHECK_THROWS_WITH_AS(export_checkpoint(dir / "empty", dir / "out"),
                       doctest::Contains("export_checkpoint '"), Error);
  CHECK_THROWS_WITH_AS(export_checkpoint(dir / "empty", dir / "out"),
                       doctest::Contains("not a complete checkpoint: no COMPLETE.json"), Error);
}

TEST_CASE("checkpoint save: a drafter spec with the store's names but other shapes is refused") {
  CpuRuntime rt;
  TempDir dir("state-save");
  Trained a(small_spec(), 1, 0);
  DrafterSpec wider = small_spec();
  wider.intermediate_size = 24;
  const std::vector<ParamSpec> specs = drafter_param_specs(wider);
  REQUIRE(specs.size() == a.params.specs().size());
  for (size_t i = 0; i < specs.size(); ++i) REQUIRE(specs[i].name == a.params.specs()[i].name);
  CHECK_ERROR(save_checkpoint(dir.path, 0, a.params, a.opt, {}, &wider),
              "the drafter spec given does not describe this parameter store");
  CHECK_FALSE(fs::exists(dir.path / "checkpoints" / "step-0"));
  const DrafterSpec same = small_spec();
  save_checkpoint(dir.path, 0, a.params, a.opt, {}, &same);
  CHECK(fs::exists(dir.path / "checkpoints" / "step-0" / kCheckpointDrafterConfig));
}

}  // TEST_SUITE
