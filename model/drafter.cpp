// Drafter: parameters, initialisation and the forward pass.
#include "model/drafter.h"

#include <cmath>
#include <random>

#include "graphs/checkpoint.h"
#include "runtime/autograd.h"
#include "runtime/context.h"

namespace dflash {

namespace {
std::string P(int64_t l, const char* name) { return "layers." + std::to_string(l) + "." + name; }
}  // namespace

void validate_drafter_spec(const DrafterSpec& s) {
  DF_CHECK(s.hidden_size > 0 && s.intermediate_size > 0 && s.num_hidden_layers > 0 && s.num_attention_heads > 0 &&
               s.num_key_value_heads > 0 && s.head_dim > 0 && s.vocab_size > 0,
           "drafter: every dimension must be positive (hidden " << s.hidden_size << ", intermediate "
                                                                << s.intermediate_size << ", layers "
                                                                << s.num_hidden_layers << ", heads "
                                                                << s.num_attention_heads << "/" << s.num_key_value_heads
                                                                << ", head_dim " << s.head_dim << ")");
  DF_CHECK(s.num_attention_heads % s.num_key_value_heads == 0,
           "drafter: num_attention_heads " << s.num_attention_heads << " is not a multiple of num_key_value_heads "
                                           << s.num_key_value_heads);
  DF_CHECK(s.head_dim % 2 == 0, "drafter: head_dim " << s.head_dim << " must be even (rotary embedding)");
  DF_CHECK(s.mask_token_id >= 0 && s.mask_token_id < s.vocab_size,
           "drafter.mask_token_id = " << s.mask_token_id << " is outside the target's vocabulary [0, " << s.vocab_size
                                      << "); pick an id the tokenizer never emits");
  DF_CHECK(!s.target_layer_ids.empty(), "drafter: no target layers to read features from");
  for (int64_t id : s.target_layer_ids)
    DF_CHECK(id >= 0 && id < s.num_target_layers,
             "target.layer_ids holds " << id << " but the target has layers 0.." << s.num_target_layers - 1);
  DF_CHECK(s.block_size >= 2, "drafter.block_size = " << s.block_size << ": a block needs at least 2 slots");
}

Drafter::Drafter(const DrafterSpec& spec, Tensor embed_tokens, Tensor lm_head, ShardLayout layout, bool random_init)
    : spec_(spec), embed_(std::move(embed_tokens)), lm_head_(std::move(lm_head)) {
  validate_drafter_spec(spec_);
  DF_CHECK(embed_.dim(0) == spec_.vocab_size && embed_.dim(1) == spec_.hidden_size,
           "drafter: the target's embedding " << embed_.describe() << " does not match the drafter's vocab "
                                              << spec_.vocab_size << " and hidden size " << spec_.hidden_size
                                              << "; the drafter's hidden size must equal the target's");
  DF_CHECK(lm_head_.shape() == embed_.shape(), "drafter: the target's lm_head " << lm_head_.describe()
                                                                                << " and embedding " << embed_.describe()
                                                                                << " differ in shape");
  params_ = std::make_unique<ParameterStore>(drafter_param_specs(spec_), layout);
  const int64_t half = spec_.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv[size_t(i)] = float(1.0 / std::pow(spec_.rope_theta, double(2 * i) / double(spec_.head_dim)));
  inv_freq_ = Tensor::from_floats({half}, inv, "drafter.inv_freq");
  if (random_init) init_random(0, 0.02);
}

void Drafter::init_random(uint64_t seed, double std) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, std);
  for (const ParamSpec& p : params_->specs()) {
    std::vector<float> v(size_t(p.shape.numel()));
    for (float& x : v) x = p.shape.ndim == 1 ? 1.0f : float(normal(rng));
    params_->set_values(p.name, v.data());
  }
  params_->sync_compute_copy();
}

Tensor Drafter::layer(int64_t l, const Tensor& h, const Tensor& context, const Tensor& q_pos, const Tensor& k_pos,
                      const Tensor& anchors, const Tensor& keep, int64_t S, CheckpointStash* stash,
                      bool partial) const {
  const ParameterStore& p = *params_;
  const float eps = float(spec_.rms_norm_eps);
  const int64_t B = h.dim(0), T = h.dim(1), nh = spec_.num_attention_heads, nkv = spec_.num_key_value_heads,
                hd = spec_.head_dim;
  Tensor x = ops::rmsnorm(h, p.get(P(l, "input_layernorm.weight")), eps);                        // (B, T, H)
  Tensor q = ops::linear(x, p.get(P(l, "self_attn.q_proj.weight"))).reshape({B, T, nh, hd});
  q = ops::rope(ops::rmsnorm(q, p.get(P(l, "self_attn.q_norm.weight")), eps), q_pos, inv_freq_);  // (B, T, nh, hd)
  // K and V over the context then the block, (B, S+T, ...), without materialising concat(context, x).
  Tensor k = ops::linear_concat_rows(context, x, p.get(P(l, "self_attn.k_proj.weight"))).reshape({B, S + T, nkv, hd});
  k = ops::rope(ops::rmsnorm(k, p.get(P(l, "self_attn.k_norm.weight")), eps), k_pos, inv_freq_);  // (B, S+T, nkv, hd)
  Tensor v = ops::linear_concat_rows(context, x, p.get(P(l, "self_attn.v_proj.weight"))).reshape({B, S + T, nkv, hd});
  // Checkpointed: the attention's output and lse (small) are kept from the first run, so the
  // recomputation skips the attention forward (the costliest part at long contexts).
  const float scale = float(1.0 / std::sqrt(double(hd)));
  const bool replay = stash && stash->replaying();
  ops::Attention a;
  if (replay) {
    std::vector<Tensor> kept = stash->take();
    ops::Attention saved{kept[0], kept[1], Tensor()};
    a = ops::dflash_attention(q, k, v, anchors, keep, S, spec_.block_size, scale, 64, &saved);
  } else {
    a = ops::dflash_attention(q, k, v, anchors, keep, S, spec_.block_size, scale);
    if (stash && stash->active()) stash->put({a.out, a.lse});
  }
  // Recomputed in part: the post-attention residual h1 and the MLP's gate and up projections are
  // kept from the first run too (4.5x the memory of a layer recomputed entirely, ~1/5 of its
  // GEMM work at 4096:512), so in the recomputation the o projection (with its residual add), gate
  // and up only record their tapes and take the kept values.
  const bool kept_mlp = partial && stash && stash->active();
  std::vector<Tensor> kept;
  if (kept_mlp && replay) kept = stash->take();
  Tensor h1;
  {
    SkipLaunches skip_o(kept_mlp && replay);
    h1 = ops::linear_residual(a.out.reshape({B, T, nh * hd}), p.get(P(l, "self_attn.o_proj.weight")), h);
  }
  if (kept_mlp && replay) adopt_kept_values(h1, kept[0]);
  // h1's gradient is complete once the MLP half's backward (down, gate, up, the norm) has run.
  if (layer_hook_) h1 = grad_hook(h1, [hook = layer_hook_, l] { hook(l, LayerGrads::mlp); });
  Tensor y = ops::rmsnorm(h1, p.get(P(l, "post_attention_layernorm.weight")), eps);  // (B, T, H)
  Tensor gate, up;                                                                     // (B, T, I)
  {
    SkipLaunches skip_gate_up(kept_mlp && replay);
    gate = ops::linear(y, p.get(P(l, "mlp.gate_proj.weight")));
    up = ops::linear(y, p.get(P(l, "mlp.up_proj.weight")));
  }
  if (kept_mlp && replay) {
    adopt_kept_values(gate, kept[1]);
    adopt_kept_values(up, kept[2]);
  } else if (kept_mlp) {
    stash->put({h1, gate, up});
  }
  Tensor mlp = ops::swiglu(gate, up);
  // The recomputation needs only the tape of the down projection with its residual add: its
  // backward rule reads mlp and the weight, never the output, and the layer's output itself
  // lives on as the next layer's input. So its kernels run in the first pass only.
  SkipLaunches tail(replay);
  return ops::linear_residual(mlp, p.get(P(l, "mlp.down_proj.weight")), h1);
}

double partial_recompute_cost(const DrafterSpec& spec, int64_t S, int64_t T) {
  const double H = double(spec.hidden_size), I = double(spec.intermediate_size),
               q = double(spec.num_attention_heads * spec.head_dim), kv = double(spec.num_key_value_heads * spec.head_dim);
  const double qkv = double(T) * H * q + 2.0 * double(S + T) * H * kv;  // multiply-adds
  const double rest = double(T) * q * H + 2.0 * double(T) * H * I;      // o, gate and up
  return qkv / (qkv + rest);
}

DrafterOutputs Drafter::forward(const DrafterInputs& in, bool checkpointing, int64_t chunk_rows) const {
  return forward(in, Recompute{checkpointing ? spec_.num_hidden_layers : int64_t(0), 0}, chunk_rows);
}

DrafterOutputs Drafter::forward(const DrafterInputs& in, Recompute recompute, int64_t chunk_rows) const {
  DF_CHECK(recompute.full >= 0 && recompute.partial >= 0 &&
               recompute.full + recompute.partial <= spec_.num_hidden_layers,
           "drafter: recompute " << recompute.full << " layers entirely and " << recompute.partial
                                 << " in part, but it has " << spec_.num_hidden_layers << " layers");
  const ParameterStore& p = *params_;
  const int64_t B = in.input_ids.dim(0), S = in.input_ids.dim(1), N = in.anchors.dim(1), H = spec_.hidden_size;
  const int64_t T = N * spec_.block_size;
  DF_CHECK(in.target_hidden.dim(0) == B && in.target_hidden.dim(1) == S &&
               in.target_hidden.shape().last() == spec_.num_features() * H,
           "drafter: target_hidden " << in.target_hidden.describe() << " must be [" << B << ", " << S << ", "
                                     << spec_.num_features() * H << "] (F = " << spec_.num_features()
                                     << " target layers of hidden size " << H << ")");
  DrafterOutputs out;
  out.prepared = dflash_prepare(in.input_ids, in.loss_mask, in.anchors, in.keep, spec_.block_size,
                                spec_.mask_token_id, spec_.loss_decay_gamma);
  const DFlashPrepared& prep = out.prepared;
  const float eps = float(spec_.rms_norm_eps);
  Tensor context = ops::rmsnorm(ops::linear(in.target_hidden, p.get("fc.weight")), p.get("hidden_norm.weight"), eps);
  Tensor h = ops::embedding(embed_, prep.noise_ids);  // (B, T, H)
  for (int64_t l = 0; l < spec_.num_hidden_layers; ++l) {
    if (layer_hook_ && l >= 1) h = grad_hook(h, [hook = layer_hook_, l] { hook(l, LayerGrads::all); });
    // The first layers' activations would live longest: they are recomputed first.
    if (l < recompute.full + recompute.partial) {
      Tensor q_pos = prep.q_pos, k_pos = prep.k_pos, anchors = in.anchors, keep = in.keep;
      const bool partial = l >= recompute.full;
      auto segment = [this, l, q_pos, k_pos, anchors, keep, S, partial](const std::vector<Tensor>& x,
                                                                       CheckpointStash& st) {
        return std::vector<Tensor>{layer(l, x[0], x[1], q_pos, k_pos, anchors, keep, S, &st, partial)};
      };
      h = checkpoint_with_stash("drafter_layer", segment, {h, context})[0];
    } else {
      h = layer(l, h, context, prep.q_pos, prep.k_pos, in.anchors, in.keep, S, nullptr, false);
    }
  }
  out.output = ops::rmsnorm(h, p.get("norm.weight"), eps);  // (B, T, H)
  Tensor weights = ops::normalize_weights(prep.lw.reshape({B * T}));
  // Slot 0 of every block has weight 0 (docs/MODEL.md, "Loss weights and the loss"), so the
  // lm_head runs over slots 1..bs-1 only:
  // (B*N*(bs-1), H). Per slot, ce and argmax are put back at [B*T] with slot 0's ce 0, argmax -1.
  const int64_t bs = spec_.block_size;
  ops::LinearCrossEntropy ce = ops::linear_cross_entropy(
      ops::drop_group_heads(out.output.reshape({B * T, H}), bs), lm_head_,
      ops::drop_group_heads(prep.labels.reshape({B * T}), bs), ops::drop_group_heads(weights, bs), chunk_rows);
  out.ce = ce;
  out.ce.ce = ops::with_group_heads(ce.ce, bs, 0);
  out.ce.argmax = ops::with_group_heads(ce.argmax, bs, 0xFF);
  out.loss = out.ce.loss;
  out.sums = dflash_metrics(out.ce.ce, out.ce.argmax, prep, in.keep, spec_.block_size);
  return out;
}

}  // namespace dflash
