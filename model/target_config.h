// The target's part of the configuration: where the Hugging Face directory is, which layers feed
// the drafter, and the random target written for tests and the tiny job. train/config.cpp parses
// the TOML's [target] section into these; model/target.h uses them.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace dflash {

// A random Qwen3/Llama target written as a Hugging Face directory at target.path when that
// directory does not exist yet (the tiny default job and tests use it).
struct SyntheticTargetConfig {
  bool enabled = false;
  std::string architecture = "qwen3";  // "qwen3" or "llama"
  int64_t vocab_size = 256, hidden_size = 64, intermediate_size = 128;
  int64_t num_hidden_layers = 4, num_attention_heads = 4, num_key_value_heads = 2, head_dim = 16;
  double rope_theta = 10000.0;
  double init_std = 0.02;  // weights ~ N(0, init_std^2); norms = 1
  uint64_t seed = 0;
};

struct TargetConfig {
  std::filesystem::path path;  // Hugging Face directory (config.json + safetensors)
  std::vector<int64_t> layer_ids;  // empty: the default for the drafter's depth (docs/MODEL.md)
  SyntheticTargetConfig synthetic;
};

}  // namespace dflash
