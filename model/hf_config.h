// A Hugging Face target's config.json (Qwen3 or Llama, docs/MODEL.md, "Files"): the
// dimensions and rope the target forward needs, and rope's inverse frequencies computed like HF.
#pragma once
#include <cstdint>
#include <filesystem>
#include <vector>

namespace dflash {

enum class TargetArch { qwen3, llama };  // qwen3 adds per-head q_norm / k_norm
enum class RopeType { standard, llama3 };  // standard: rope_type "default" (or none given)

struct TargetSpec {
  TargetArch architecture = TargetArch::qwen3;
  int64_t hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0, vocab_size = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 0;  // informational; 0 when config.json has none
  double rope_theta = 10000.0;
  RopeType rope_type = RopeType::standard;
  // llama3 only (rope_parameters / rope_scaling): inverse frequencies are rescaled by these.
  double rope_factor = 1.0, rope_low_freq_factor = 1.0, rope_high_freq_factor = 4.0;
  int64_t rope_original_max_position_embeddings = 0;

  bool has_qk_norm() const { return architecture == TargetArch::qwen3; }
  bool operator==(const TargetSpec&) const = default;
};

const char* target_arch_name(TargetArch arch);  // "qwen3", "llama"

// Parses dir/config.json. Throws Error naming the file and key for a missing or wrongly typed
// field, and refuses by name (with the fix) what this forward does not compute: another
// model_type, a rope_type other than default/llama3, attention or MLP biases, a sliding window,
// a mixture of experts, an activation other than silu.
TargetSpec read_target_spec(const std::filesystem::path& dir);

// Rope's inverse frequencies f32 [head_dim/2], computed in f32 as transformers does:
// 1 / theta^(2i/hd); for llama3 each is then rescaled by its wavelength 2pi/f (docs/MODEL.md, "Files").
std::vector<float> rope_inv_freq(const TargetSpec& spec);

}  // namespace dflash
