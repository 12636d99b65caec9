// DrafterDecoder: the drafter layers of model/drafter.cpp over a context KV cache, forward only.
#include "model/drafter_decode.h"

#include <cmath>

#include "runtime/autograd.h"
#include "runtime/decode_ops.h"
#include "runtime/ops.h"

namespace dflash {

namespace {
std::string P(int64_t l, const char* name) { return "layers." + std::to_string(l) + "." + name; }
}  // namespace

DrafterDecoder::DrafterDecoder(const Drafter& drafter, Tensor embed_tokens, int64_t context_capacity)
    : drafter_(drafter), embed_(std::move(embed_tokens)), capacity_(context_capacity) {
  const DrafterSpec& s = drafter.spec();
  DF_CHECK(context_capacity >= 1, "DrafterDecoder: context capacity " << context_capacity << " must be >= 1");
  DF_CHECK(embed_.dim(0) == s.vocab_size && embed_.dim(1) == s.hidden_size,
           "DrafterDecoder: the target's embedding " << embed_.describe() << " does not match the drafter's vocab "
                                                     << s.vocab_size << " and hidden size " << s.hidden_size);
  // The drafter's rope, computed as Drafter's constructor computes it.
  const int64_t half = s.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv[size_t(i)] = float(1.0 / std::pow(s.rope_theta, double(2 * i) / double(s.head_dim)));
  inv_freq_ = Tensor::from_floats({half}, inv, "drafter_decode.inv_freq");
  keep_ = Tensor::from_ints({1, 1}, {1}, "drafter_decode.keep");
  const DType dt = drafter.params().flat_compute().dtype();
  for (int64_t l = 0; l < s.num_hidden_layers; ++l) {
    const std::string name = "drafter.kv." + std::to_string(l);
    k_cache_.push_back(Tensor::persistent({capacity_ + s.block_size, s.num_key_value_heads, s.head_dim}, dt, name + ".k"));
    v_cache_.push_back(Tensor::persistent({capacity_ + s.block_size, s.num_key_value_heads, s.head_dim}, dt, name + ".v"));
  }
}

void DrafterDecoder::append_context(const Tensor& features, const Tensor& at, const Tensor& count) const {
  const DrafterSpec& s = drafter_.spec();
  const ParameterStore& p = drafter_.params();
  DF_CHECK(features.ndim() == 2 && features.dim(1) == s.num_features() * s.hidden_size,
           "DrafterDecoder::append_context: features " << features.describe() << " must be [R, "
                                                       << s.num_features() * s.hidden_size << "]");
  NoGrad no_grad;
  const int64_t R = features.dim(0), nkv = s.num_key_value_heads, hd = s.head_dim;
  const float eps = float(s.rms_norm_eps);
  const Tensor pos = ops::arange_from(at, R);  // (R)
  Tensor ctx = ops::rmsnorm(ops::linear_rowwise(features, p.get("fc.weight")), p.get("hidden_norm.weight"), eps);  // (R, H)
  for (int64_t l = 0; l < s.num_hidden_layers; ++l) {
    Tensor k = ops::linear_rowwise(ctx, p.get(P(l, "self_attn.k_proj.weight"))).reshape({R, nkv, hd});
    k = ops::rope(ops::rmsnorm(k, p.get(P(l, "self_attn.k_norm.weight")), eps), pos, inv_freq_);  // (R, nkv, hd)
    Tensor v = ops::linear_rowwise(ctx, p.get(P(l, "self_attn.v_proj.weight"))).reshape({R, nkv, hd});
    // Only the context rows [0, capacity) take appended rows; the block's rows stay apart.
    ops::copy_rows_(k_cache_[size_t(l)].rows(0, capacity_), at, k, Tensor(), R, count);
    ops::copy_rows_(v_cache_[size_t(l)].rows(0, capacity_), at, v, Tensor(), R, count);
  }
}

Tensor DrafterDecoder::block(const Tensor& ids, const Tensor& start) const {
  const DrafterSpec& s = drafter_.spec();
  const ParameterStore& p = drafter_.params();
  const int64_t nh = s.num_attention_heads, nkv = s.num_key_value_heads, hd = s.head_dim;
  DF_CHECK(ids.defined() && ids.dtype() == DType::i32 && ids.numel() >= 1 && ids.numel() <= s.block_size,
           "DrafterDecoder::block: ids is " << ids.describe() << " but must be i32 [L], 1 <= L <= " << s.block_size
                                            << " (one block)");
  const int64_t bs = ids.numel();
  NoGrad no_grad;
  const float eps = float(s.rms_norm_eps), scale = float(1.0 / std::sqrt(double(hd)));
  const Tensor pos = ops::arange_from(start, bs);  // (bs): start + k
  const Tensor anchor = start.reshape({1, 1});
  Tensor h = ops::embedding(embed_, ids.reshape({bs}));  // (bs, H)
  for (int64_t l = 0; l < s.num_hidden_layers; ++l) {
    const Tensor &kc = k_cache_[size_t(l)], &vc = v_cache_[size_t(l)];
    Tensor x = ops::rmsnorm(h, p.get(P(l, "input_layernorm.weight")), eps);  // (bs, H)
    Tensor q = ops::linear_rowwise(x, p.get(P(l, "self_attn.q_proj.weight"))).reshape({bs, nh, hd});
    q = ops::rope(ops::rmsnorm(q, p.get(P(l, "self_attn.q_norm.weight")), eps), pos, inv_freq_);  // (bs, nh, hd)
    Tensor k = ops::linear_rowwise(x, p.get(P(l, "self_attn.k_proj.weight"))).reshape({bs, nkv, hd});
    k = ops::rope(ops::rmsnorm(k, p.get(P(l, "self_attn.k_norm.weight")), eps), pos, inv_freq_);  // (bs, nkv, hd)
    Tensor v = ops::linear_rowwise(x, p.get(P(l, "self_attn.v_proj.weight"))).reshape({bs, nkv, hd});
    ops::copy_(kc.rows(capacity_, capacity_ + bs), k);
    ops::copy_(vc.rows(capacity_, capacity_ + bs), v);
    // Training's attention with one block (N = 1) anchored at start over capacity_ context keys:
    // context keys j < start, then the whole block.
    ops::Attention a = ops::dflash_attention(q.reshape({1, bs, nh, hd}), kc.rows(0, capacity_ + bs).reshape({1, capacity_ + bs, nkv, hd}),
                                             vc.rows(0, capacity_ + bs).reshape({1, capacity_ + bs, nkv, hd}), anchor, keep_, capacity_, bs, scale);
    Tensor h1 = ops::add(h, ops::linear_rowwise(a.out.reshape({bs, nh * hd}), p.get(P(l, "self_attn.o_proj.weight"))));
    Tensor y = ops::rmsnorm(h1, p.get(P(l, "post_attention_layernorm.weight")), eps);
    Tensor mlp = ops::swiglu(ops::linear_rowwise(y, p.get(P(l, "mlp.gate_proj.weight"))),
                             ops::linear_rowwise(y, p.get(P(l, "mlp.up_proj.weight"))));
    h = ops::add(h1, ops::linear_rowwise(mlp, p.get(P(l, "mlp.down_proj.weight"))));
  }
  return ops::rmsnorm(h, p.get("norm.weight"), eps);  // (bs, H)
}

}  // namespace dflash
