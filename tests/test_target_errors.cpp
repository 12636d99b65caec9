// The frozen target's refusals: unsupported configs by name, broken config.json keys, broken
// weights (missing, misshapen, non-finite, biases, wrong dtype, unexplained), bad shard indexes, bad arguments.
#include "tests/target_fixtures.h"

using namespace dflash;
using namespace dflash::test;

TEST_SUITE("target") {
  TEST_CASE("unsupported configs are refused by name") {
    CpuRuntime rt;
    TempDir tmp;
    const fs::path qwen = make_target(tmp, "qwen"), llama = make_target(tmp, "llama", "llama");
    auto refused = [&](const fs::path& dir, const std::function<void(json&)>& edit, const std::string& text) {
      const fs::path copy = tmp / "copy";
      fs::remove_all(copy);
      fs::copy(dir, copy);
      edit_config(copy, edit);
      CAPTURE(text);
      CHECK_ERROR(read_target_spec(copy), text);
      CHECK_ERROR(Target(copy, {0}, 8), text);
    };
    refused(qwen, [](json& j) { j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0}}; },
            "rope_type \"yarn\"");
    refused(llama, [](json& j) { j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}}; },
            "rope_type \"dynamic\"");
    refused(llama, [](json& j) { j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; }, "rope_type \"linear\"");
    refused(qwen, [](json& j) { j["attention_bias"] = true; }, "attention_bias: true");
    refused(llama, [](json& j) { j["mlp_bias"] = true; }, "mlp_bias: true");
    refused(qwen, [](json& j) { j["use_sliding_window"] = true; j["sliding_window"] = 4096; },
            "sliding window (use_sliding_window: true)");
    refused(qwen, [](json& j) { j["layer_types"] = {"full_attention", "full_attention", "sliding_attention"}; },
            "sliding window (layer_types[2]");
    refused(llama, [](json& j) { j["sliding_window"] = 4096; }, "sliding window (sliding_window: 4096");
    refused(qwen, [](json& j) { j["num_experts"] = 8; }, "mixture of experts (num_experts: 8)");
    refused(llama, [](json& j) { j["num_local_experts"] = 8; }, "mixture of experts (num_local_experts: 8)");
    refused(qwen, [](json& j) { j["model_type"] = "qwen3_moe"; }, "mixture of experts (model_type \"qwen3_moe\")");
    refused(llama, [](json& j) { j["model_type"] = "mistral"; }, "model_type \"mistral\" is not supported");
    refused(qwen, [](json& j) { j["architectures"] = {"DFlashDraftModel"}; }, "\"DFlashDraftModel\"");
    refused(llama, [](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act \"gelu\" is not supported");

    // What transformers ignores is accepted: a Qwen3 sliding_window without use_sliding_window,
    // null rope_scaling, no model_type when architectures says it.
    const fs::path copy = tmp / "accepted";
    fs::copy(qwen, copy);
    edit_config(copy, [](json& j) {
      j["sliding_window"] = 4096;
      j["rope_scaling"] = nullptr;
      j["num_experts"] = 0;
      j.erase("model_type");
    });
    CHECK(read_target_spec(copy).architecture == TargetArch::qwen3);
  }

  TEST_CASE("config.json: missing, not JSON, missing or wrongly typed keys name the file and the key") {
    CpuRuntime rt;
    TempDir tmp;
    const fs::path base = make_target(tmp, "base", "llama");
    CHECK_ERROR(read_target_spec(tmp / "nowhere"), "is not a directory");
    fs::create_directories(tmp / "empty");
    CHECK_ERROR(Target(tmp / "empty", {0}, 8), "no config.json in");

    auto broken = [&](const std::function<void(json&)>& edit, const std::vector<std::string>& texts) {
      const fs::path copy = tmp / "copy";
      fs::remove_all(copy);
      fs::copy(base, copy);
      edit_config(copy, edit);
      for (const std::string& text : texts) {
        CAPTURE(text);
        CHECK_ERROR(read_target_spec(copy), text);
      }
      CHECK_ERROR(read_target_spec(copy), (copy / "config.json").string());
    };
    broken([](json& j) { j.erase("hidden_size"); }, {"key 'hidden_size' is missing"});
    broken([](json& j) { j.erase("rms_norm_eps"); }, {"key 'rms_norm_eps' is missing"});
    broken([](json& j) { j["num_key_value_heads"] = "2"; }, {"key 'num_key_value_heads' is a JSON string"});
    broken([](json& j) { j["vocab_size"] = -3; }, {"key 'vocab_size' is -3, expected a positive integer"});
    broken([](json& j) { j["intermediate_size"] = 1.5; }, {"key 'intermediate_size'", "expected a positive integer"});
    broken([](json& j) { j["tie_word_embeddings"] = "no"; }, {"key 'tie_word_embeddings'", "expected true or false"});
    broken([](json& j) { j["attention_bias"] = 0; }, {"key 'attention_bias'", "expected true or false"});
    broken([](json& j) { j.erase("rope_theta"); }, {"key 'rope_theta' is missing"});
    broken([](json& j) { j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", "big"}}; },
           {"key 'rope_parameters.rope_theta' is a JSON string"});
    broken([](json& j) { j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 5e5}, {"factor", 8.0}}; },
           {"key 'rope_parameters.low_freq_factor' is missing"});
    broken([](json& j) { j["rope_scaling"] = "llama3"; }, {"key 'rope_scaling' is a JSON string"});
    broken(
        [](json& j) {
          j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
          j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
        },
        {"key 'rope_scaling.rope_type' names rope type \"llama3\" but rope_parameters names \"default\""});
    broken(
        [](json& j) {
          j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0},
                               {"high_freq_factor", 1.0}, {"original_max_position_embeddings", 8192}};
        },
        {"key 'rope_scaling.high_freq_factor'", "needs high_freq_factor > low_freq_factor"});
    // Equal factors leave no band to blend over (the blend divides by their difference).
    broken(
        [](json& j) {
          j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 2.0},
                               {"high_freq_factor", 2.0}, {"original_max_position_embeddings", 8192}};
        },
        {"key 'rope_scaling.high_freq_factor' is 2.000000, not above low_freq_factor 2.000000"});
    broken([](json& j) { j["hidden_size"] = 0; }, {"key 'hidden_size' is 0, expected a positive integer"});
    broken([](json& j) { j["head_dim"] = 15; }, {"key 'head_dim' is 15", "needs an even head_dim"});
    broken([](json& j) { j["num_key_value_heads"] = 3; }, {"key 'num_key_value_heads' is 3", "does not divide"});
    broken([](json& j) { j.erase("head_dim"); j["num_attention_heads"] = 5; }, {"key 'head_dim' is missing"});
    broken([](json& j) { j.erase("model_type"); j.erase("architectures"); }, {"key 'model_type' is missing"});
    broken([](json& j) { j["num_experts"] = "eight"; }, {"key 'num_experts'"});
    broken([](json& j) { j["model_type"] = 3; }, {"key 'model_type' is a JSON number (3), expected a string"});

    // head_dim absent: hidden / heads.
    const fs::path copy = tmp / "copy";
    fs::remove_all(copy);
    fs::copy(base, copy);
    edit_config(copy, [](json& j) { j.erase("head_dim"); j["num_attention_heads"] = 2; j["num_key_value_heads"] = 1; });
    CHECK(read_target_spec(copy).head_dim == 16);
    // Llama 3.1's original layout: rope_theta at the top, llama3 scaling under rope_scaling.
    edit_config(copy, [](json& j) {
      j["rope_theta"] = 500000.0;
      j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
    });
    const TargetSpec llama31 = read_target_spec(copy);
    CHECK(llama31.rope_type == RopeType::llama3);
    CHECK((llama31.rope_theta == 5e5 && llama31.rope_factor == 8 && llama31.rope_low_freq_factor == 1 &&
           llama31.rope_high_freq_factor == 4 && llama31.rope_original_max_position_embeddings == 8192));
    write_text(copy / "config.json", "{\"hidden_size\": 32,");
    CHECK_ERROR(read_target_spec(copy), "is not valid JSON");
  }

  TEST_CASE("weights: missing tensor, wrong shape, NaN, bias, bad dtype, layer ids and sequence length") {
    CpuRuntime rt;
    TempDir tmp;
    const fs::path base = make_target(tmp, "base");
    auto broken = [&](const std::function<void(HostWeights&)>& edit, const std::vector<std::string>& texts) {
      const fs::path copy = tmp / "copy";
      fs::remove_all(copy);
      fs::copy(base, copy);
      edit_weights(copy, edit);
      for (const std::string& text : texts) {
        CAPTURE(text);
        CHECK_ERROR(Target(copy, {0}, 8), text);
      }
    };
    broken([](HostWeights& w) { w.erase("model.layers.1.mlp.up_proj.weight"); },
           {"tensor 'model.layers.1.mlp.up_proj.weight' is missing", "model.safetensors"});
    broken([](HostWeights& w) { w.erase("model.layers.2.self_attn.k_norm.weight"); },
           {"tensor 'model.layers.2.self_attn.k_norm.weight' is missing"});
    broken([](HostWeights& w) { w.erase("lm_head.weight"); }, {"tensor 'lm_head.weight' is missing"});
    broken([](HostWeights& w) { w["model.layers.0.self_attn.k_proj.weight"] = {{32, 32}, std::vector<float>(1024, 0.1f)}; },
           {"tensor 'model.layers.0.self_attn.k_proj.weight'", "has shape [32,32] but config.json implies [16,32]"});
    broken([](HostWeights& w) { w["model.layers.2.mlp.down_proj.weight"].values[77] = NAN; },
           {"model.layers.2.mlp.down_proj.weight", "NaN"});
    broken([](HostWeights& w) { w["model.norm.weight"].values[3] = INFINITY; }, {"model.norm.weight", "+Inf"});
    broken([](HostWeights& w) { w["model.layers.0.self_attn.q_proj.bias"] = {{32}, std::vector<float>(32, 0.0f)}; },
           {"model.layers.0.self_attn.q_proj.bias", "biases are not supported"});

    const fs::path copy = tmp / "ints";
    fs::copy(base, copy);
    {
      HostWeights w = read_weights(copy / "model.safetensors");
      std::vector<int32_t> ints(32, 1);
      std::vector<SafeTensorsEntry> entries;
      for (const auto& [name, t] : w)
        if (name == "model.norm.weight") entries.push_back({name, "I32", {32}, ints.data()});
        else entries.push_back({name, "F32", t.shape, t.values.data()});
      write_safetensors(copy / "model.safetensors", entries);
    }
    CHECK_ERROR(Target(copy, {0}, 8), "must be F32, BF16 or F16");

    CHECK_ERROR(Target(base, {0, 3}, 8), "layer id 3 is outside [0, 2]");
    CHECK_ERROR(Target(base, {-1}, 8), "layer id -1");
    CHECK_ERROR(Target(base, {0}, 0), "max_seq_len is 0");
    Target t(base, {0}, 8);
    CHECK_ERROR(t.features(Tensor::from_ints({1, 9}, random_ids(9, 48, 1))), "max_seq_len = 8");
    CHECK_ERROR(t.logits(Tensor::from_floats({1, 4}, {1, 2, 3, 4})), "must be i32 [B, S]");
    CHECK_ERROR(t.layer_outputs(Tensor::from_ints({4}, {1, 2, 3, 4})), "must be i32 [B, S]");
    Target none(base, {}, 8);
    CHECK_ERROR(none.features(Tensor::from_ints({1, 4}, {1, 2, 3, 4})), "no layer ids");
  }

  TEST_CASE("sharded checkpoints: an index loads; a missing shard, bad JSON or a wrong map is refused") {
    CpuRuntime rt;
    TempDir tmp;
    const fs::path single = make_target(tmp, "single", "llama");
    const fs::path sharded = tmp / "sharded";
    fs::copy(single, sharded);
    shard(sharded);
    const Tensor ids = Tensor::from_ints({1, 12}, random_ids(12, 48, 2));
    CHECK(bitwise_equal(Target(sharded, {1}, 12).logits(ids).to_floats(), Target(single, {1}, 12).logits(ids).to_floats()));

    auto broken = [&](const std::function<void(const fs::path&)>& edit, const std::vector<std::string>& texts) {
      const fs::path copy = tmp / "copy";
      fs::remove_all(copy);
      fs::copy(sharded, copy);
      edit(copy);
      for (const std::string& text : texts) {
        CAPTURE(text);
        CHECK_ERROR(Target(copy, {0}, 8), text);
      }
    };
    broken([](const fs::path& d) { fs::remove(d / "model-00002-of-00002.safetensors"); },
           {"model.safetensors.index.json", "model-00002-of-00002.safetensors', which is missing"});
    broken([](const fs::path& d) { write_text(d / "model.safetensors.index.json", "{\"weight_map\": {"); },
           {"model.safetensors.index.json", "is not valid JSON"});
    broken([](const fs::path& d) { write_text(d / "model.safetensors.index.json", "{\"metadata\": {}}"); },
           {"has no \"weight_map\" object"});
    broken(
        [](const fs::path& d) {
          json j = json::parse(std::ifstream(d / "model.safetensors.index.json"));
          j["weight_map"]["model.norm.weight"] = j["weight_map"]["model.norm.weight"] == "model-00001-of-00002.safetensors"
                                                     ? "model-00002-of-00002.safetensors"
                                                     : "model-00001-of-00002.safetensors";
          write_text(d / "model.safetensors.index.json", j.dump());
        },
        {"maps 'model.norm.weight'", "that shard has no such tensor"});
    broken(
        [](const fs::path& d) {
          json j = json::parse(std::ifstream(d / "model.safetensors.index.json"));
          j["weight_map"].erase("model.layers.0.mlp.up_proj.weight");
          write_text(d / "model.safetensors.index.json", j.dump());
        },
        {"tensor 'model.layers.0.mlp.up_proj.weight' is missing", "weight_map of"});
    broken([](const fs::path& d) { fs::remove(d / "model.safetensors.index.json"); },
           {"neither model.safetensors nor model.safetensors.index.json"});
  }

  TEST_CASE("target config: n_routed_experts is refused; rope_parameters' theta wins; a class name is no model_type") {
    CpuRuntime rt;
    TempDir tmp("state-target");
    const fs::path qwen = make_target(tmp, "qwen");
    auto edited = [&](const std::function<void(json&)>& edit) {
      const fs::path copy = tmp / "copy";
      fs::remove_all(copy);
      fs::copy(qwen, copy);
      edit_config(copy, edit);
      return copy;
    };
    CHECK_ERROR(read_target_spec(edited([](json& j) { j["n_routed_experts"] = 8; })),
                "a mixture of experts (n_routed_experts: 8) is not supported");
    const TargetSpec s = read_target_spec(edited([](json& j) {
      j["rope_theta"] = 10000.0;
      j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
    }));
    CHECK(s.rope_theta == 1e6);
    CHECK_ERROR(read_target_spec(edited([](json& j) { j["model_type"] = "Qwen3ForCausalLM"; })),
                "model_type \"Qwen3ForCausalLM\" is not supported");
  }

  TEST_CASE("target: ten unexplained tensors list eight and say 2 more") {
    CpuRuntime rt;
    TempDir tmp("target-extra");
    const fs::path dir = make_target(tmp, "t");
    edit_weights(dir, [](HostWeights& w) {
      for (int i = 0; i < 10; ++i) w["model.extra" + std::to_string(i) + ".weight"] = w.at("model.norm.weight");
    });
    CHECK_ERROR(Target(dir, {1}, 16), "the weights hold 10 tensors that config.json does not explain: ");
    CHECK_ERROR(Target(dir, {1}, 16), "'model.extra7.weight' (in 'model.safetensors'), and 2 more; fix:");
  }
}
