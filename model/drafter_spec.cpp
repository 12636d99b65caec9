// The drafter's parameter list and default target layers.
#include "model/drafter_spec.h"

#include <cmath>

#include "runtime/error.h"

namespace dflash {

std::vector<ParamSpec> drafter_param_specs(const DrafterSpec& s) {
  const int64_t H = s.hidden_size, I = s.intermediate_size, hd = s.head_dim;
  const int64_t q = s.num_attention_heads * hd, kv = s.num_key_value_heads * hd;
  std::vector<ParamSpec> p = {{"fc.weight", {H, s.num_features() * H}}, {"hidden_norm.weight", {H}}};
  for (int64_t l = 0; l < s.num_hidden_layers; ++l) {
    std::string L = "layers." + std::to_string(l) + ".";
    p.push_back({L + "input_layernorm.weight", {H}});
    p.push_back({L + "self_attn.q_proj.weight", {q, H}});
    p.push_back({L + "self_attn.k_proj.weight", {kv, H}});
    p.push_back({L + "self_attn.v_proj.weight", {kv, H}});
    p.push_back({L + "self_attn.o_proj.weight", {H, q}});
    p.push_back({L + "self_attn.q_norm.weight", {hd}});
    p.push_back({L + "self_attn.k_norm.weight", {hd}});
    p.push_back({L + "post_attention_layernorm.weight", {H}});
    p.push_back({L + "mlp.gate_proj.weight", {I, H}});
    p.push_back({L + "mlp.up_proj.weight", {I, H}});
    p.push_back({L + "mlp.down_proj.weight", {H, I}});
  }
  p.push_back({"norm.weight", {H}});
  return p;
}

std::vector<int64_t> default_target_layer_ids(int64_t L, int64_t n) {
  DF_CHECK(L >= 1 && n >= 1, "default target layers: target has " << L << " layers and the drafter " << n);
  if (n == 1) return {L / 2};
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) {
    double x = 1.0 + double(i) * double(L - 4) / double(n - 1);
    ids.push_back(int64_t(std::nearbyint(x)));  // round half to even (default rounding mode)
  }
  return ids;
}

}  // namespace dflash
