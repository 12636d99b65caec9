// SlotTargetDecoder: the target's decoder layers (model/target.cpp's decoder_layer, fused as there,
// with q, k and v made by one GEMM and written into the cache by one op) over a KV cache of fixed slots.
#include "model/target_slots.h"

#include <cmath>
#include <vector>

#include "runtime/autograd.h"
#include "runtime/decode_ops.h"
#include "runtime/ops.h"

namespace dflash {

SlotTargetDecoder::SlotTargetDecoder(const Target& target, int64_t slots, int64_t capacity)
    : target_(target), slots_(slots), capacity_(capacity) {
  const TargetSpec& s = target.spec();
  DF_CHECK(slots >= 1 && capacity >= 1,
           "SlotTargetDecoder: " << slots << " slots of " << capacity << " positions; both must be >= 1");
  for (int64_t l = 0; l < s.num_hidden_layers; ++l) {
    const std::string name = "target.slot_kv." + std::to_string(l);
    const Shape shape{slots, capacity, s.num_key_value_heads, s.head_dim};
    k_cache_.push_back(Tensor::persistent(shape, target.embed_.dtype(), name + ".k"));
    v_cache_.push_back(Tensor::persistent(shape, target.embed_.dtype(), name + ".v"));
    // Rows are always written before they are read; zeros keep a timing replay over slots that
    // were never prefilled (BatchGenerator::fill_slots_for_timing) finite.
    ops::fill_(k_cache_.back(), 0.0f);
    ops::fill_(v_cache_.back(), 0.0f);
  }
}

uint64_t SlotTargetDecoder::cache_bytes(const TargetSpec& s, int64_t slots, int64_t capacity, int64_t element_bytes) {
  return 2ull * uint64_t(s.num_hidden_layers) * uint64_t(slots) * uint64_t(capacity) *
         uint64_t(s.num_key_value_heads) * uint64_t(s.head_dim) * uint64_t(element_bytes);
}

Tensor SlotTargetDecoder::pass(const Tensor& ids, const Tensor& slot, const Tensor& pos) const {
  const Target& t = target_;
  const TargetSpec& s = t.spec();
  DF_CHECK(ids.defined() && ids.dtype() == DType::i32 && ids.ndim() == 1,
           "SlotTargetDecoder::pass: ids is " << ids.describe() << " but must be i32 [n]");
  NoGrad no_grad;
  const int64_t n = ids.dim(0), nh = s.num_attention_heads, nkv = s.num_key_value_heads, hd = s.head_dim;
  const float eps = float(s.rms_norm_eps), scale = float(1.0 / std::sqrt(double(hd)));
  Tensor h = ops::embedding(t.embed_, ids);                 // (n, H)
  Tensor x = ops::rmsnorm(h, t.layers_[0].input_norm, eps);  // (n, H)
  for (size_t l = 0; l < t.layers_.size(); ++l) {
    const Target::Layer& p = t.layers_[l];
    // One GEMM over the packed q, k and v weights; q, k and v made from it and k, v written into the
    // cache (with q and k norms, one fused op).
    const Tensor qkv = ops::linear_rowwise(x, p.qkv);  // (n, (nh + 2 nkv) hd)
    Tensor q;
    if (s.has_qk_norm()) {
      q = ops::rmsnorm_rope_into_slots(qkv, p.q_norm, p.k_norm, pos, t.inv_freq_, slot, k_cache_[l], v_cache_[l], eps);
    } else {
      const std::vector<Tensor> parts = ops::split_columns(qkv, {nh * hd, nkv * hd, nkv * hd});
      q = ops::rope(parts[0].reshape({n, nh, hd}), pos, t.inv_freq_);
      ops::scatter_slot_rows_(k_cache_[l], ops::rope(parts[1].reshape({n, nkv, hd}), pos, t.inv_freq_), slot, pos);
      ops::scatter_slot_rows_(v_cache_[l], parts[2].reshape({n, nkv, hd}), slot, pos);
    }
    Tensor a = ops::slot_attention(q, k_cache_[l], v_cache_[l], slot, pos, scale).reshape({n, nh * hd});  // (n, nh*hd)
    ops::AddRmsnorm r = ops::add_rmsnorm(h, ops::linear_rowwise(a, p.o), p.post_norm, eps);             // (n, H) each
    Tensor act = ops::swiglu_halves(ops::linear_rowwise(r.normed, p.gate_up));                          // (n, I)
    const Tensor& next_norm = l + 1 < t.layers_.size() ? t.layers_[l + 1].input_norm : t.final_norm_;
    ops::AddRmsnorm out = ops::add_rmsnorm(r.sum, ops::linear_rowwise(act, p.down), next_norm, eps);
    h = out.sum;
    x = out.normed;
  }
  return x;  // the final norm's output: the last layer's next_norm is final_norm
}

}  // namespace dflash
