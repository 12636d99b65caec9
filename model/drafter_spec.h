// The DFlash drafter's dimensions (docs/MODEL.md, "Names") and its parameter list, with the
// exported tensor names (no "model." prefix; embedding and lm_head belong to the target and are not
// listed).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/optimizer.h"

namespace dflash {

struct DrafterSpec {
  int64_t hidden_size = 0;  // H, equal to the target's
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 1;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;  // the target's
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 32768;
  int64_t block_size = 16;
  int64_t mask_token_id = 0;
  std::vector<int64_t> target_layer_ids;  // L_ids, F = size()
  int64_t num_target_layers = 0;          // L of the target
  double loss_decay_gamma = 0;            // training only; not exported

  int64_t num_features() const { return int64_t(target_layer_ids.size()); }  // F
};

// fc.weight [H, F*H], hidden_norm.weight [H], norm.weight [H], and per layer l:
// layers.l.input_layernorm.weight [H], layers.l.post_attention_layernorm.weight [H],
// layers.l.self_attn.{q,k,v,o}_proj.weight, layers.l.self_attn.{q,k}_norm.weight [hd],
// layers.l.mlp.{gate,up,down}_proj.weight. Linear weights are [out, in].
std::vector<ParamSpec> drafter_param_specs(const DrafterSpec& spec);

// The default L_ids (docs/MODEL.md, "Inputs of one sequence"): [L/2] for one drafter layer, else
// round(1 + i (L-4)/(n-1)) with Python's round (ties to even), for i = 0..n-1.
std::vector<int64_t> default_target_layer_ids(int64_t target_layers, int64_t drafter_layers);

}  // namespace dflash
