// TargetDecoder: the target's decoder layers (model/target.cpp's decoder_layer) over a KV cache.
#include "model/target_decode.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "runtime/autograd.h"
#include "runtime/decode_ops.h"
#include "runtime/ops.h"

namespace dflash {

TargetDecoder::TargetDecoder(const Target& target, int64_t capacity) : target_(target), capacity_(capacity) {
  const TargetSpec& s = target.spec();
  DF_CHECK(capacity >= 1, "TargetDecoder: capacity " << capacity << " must be >= 1 position");
  for (int64_t l = 0; l < s.num_hidden_layers; ++l) {
    const std::string name = "target.kv." + std::to_string(l);
    k_cache_.push_back(Tensor::persistent({capacity, s.num_key_value_heads, s.head_dim}, target.embed_.dtype(), name + ".k"));
    v_cache_.push_back(Tensor::persistent({capacity, s.num_key_value_heads, s.head_dim}, target.embed_.dtype(), name + ".v"));
  }
}

TargetDecoder::Pass TargetDecoder::pass(const Tensor& ids, const Tensor& pos0, const Tensor& count,
                                        bool want_features) const {
  const Target& t = target_;
  const TargetSpec& s = t.spec();
  DF_CHECK(ids.defined() && ids.dtype() == DType::i32 && ids.ndim() == 1,
           "TargetDecoder::pass: ids is " << ids.describe() << " but must be i32 [n]");
  NoGrad no_grad;
  const int64_t n = ids.dim(0), nh = s.num_attention_heads, nkv = s.num_key_value_heads, hd = s.head_dim;
  const float eps = float(s.rms_norm_eps), scale = float(1.0 / std::sqrt(double(hd)));
  const Tensor pos = ops::arange_from(pos0, n);  // (n)
  const std::set<int64_t> wanted(t.layer_ids_.begin(), t.layer_ids_.end());
  std::vector<Tensor> kept(t.layers_.size());
  Tensor h = ops::embedding(t.embed_, ids);  // (n, H)
  for (size_t l = 0; l < t.layers_.size(); ++l) {
    const Target::Layer& p = t.layers_[l];
    Tensor x = ops::rmsnorm(h, p.input_norm, eps);                               // (n, H)
    Tensor q = ops::linear_rowwise(x, p.q).reshape({n, nh, hd});                 // (n, nh, hd)
    Tensor k = ops::linear_rowwise(x, p.k).reshape({n, nkv, hd});                // (n, nkv, hd)
    Tensor v = ops::linear_rowwise(x, p.v).reshape({n, nkv, hd});                // (n, nkv, hd)
    if (s.has_qk_norm()) {
      q = ops::rmsnorm(q, p.q_norm, eps);
      k = ops::rmsnorm(k, p.k_norm, eps);
    }
    q = ops::rope(q, pos, t.inv_freq_);
    k = ops::rope(k, pos, t.inv_freq_);
    ops::copy_rows_(k_cache_[l], pos0, k, Tensor(), n, count);
    ops::copy_rows_(v_cache_[l], pos0, v, Tensor(), n, count);
    Tensor a = ops::cached_attention(q, k_cache_[l], v_cache_[l], pos0, scale).reshape({n, nh * hd});  // (n, nh*hd)
    Tensor r = ops::add(h, ops::linear_rowwise(a, p.o));                                                // (n, H)
    x = ops::rmsnorm(r, p.post_norm, eps);
    h = ops::add(r, ops::linear_rowwise(ops::swiglu(ops::linear_rowwise(x, p.gate), ops::linear_rowwise(x, p.up)), p.down));
    if (want_features && wanted.count(int64_t(l))) kept[l] = h;
  }
  Pass out;
  if (want_features) {
    DF_CHECK(!t.layer_ids_.empty(), "TargetDecoder::pass: the target was constructed with no layer ids; pass the "
                                    "drafter's target_layer_ids to the Target constructor");
    out.features = kept[size_t(t.layer_ids_[0])];  // (n, F*H) once all are joined
    for (size_t i = 1; i < t.layer_ids_.size(); ++i) out.features = ops::concat(out.features, kept[size_t(t.layer_ids_[i])], 1);
  }
  out.hidden = ops::rmsnorm(h, t.final_norm_, eps);  // (n, H)
  return out;
}

}  // namespace dflash
