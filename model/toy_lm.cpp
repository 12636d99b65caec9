// ToyLM and its training-step body.
#include "model/toy_lm.h"

#include <cmath>
#include <random>

#include "graphs/checkpoint.h"
#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/ops.h"

namespace dflash {

namespace {
std::vector<float> normal(size_t n, std::mt19937_64& rng, float stddev) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Tensor on_device(const std::vector<float>& v, const Shape& shape, DType dtype, const std::string& name) {
  if (dtype == DType::f32) return Tensor::from_floats(shape, v, name);
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
  return Tensor::from_host(shape, DType::bf16, b.data(), name);
}

std::string lname(int64_t l, const char* what) { return "layers." + std::to_string(l) + "." + what; }
}  // namespace

ToyLM::ToyLM(const ToyConfig& c) : config_(c) {
  const int64_t V = c.vocab, H = c.hidden, I = c.intermediate;
  DType compute = Context::current().device().is_cuda() ? DType::bf16 : DType::f32;
  std::mt19937_64 rng(c.seed);
  embed_ = on_device(normal(size_t(V * H), rng, 1.0f), {V, H}, compute, "embed");
  head_ = on_device(normal(size_t(V * H), rng, 1.0f / std::sqrt(float(H))), {V, H}, compute, "head");
  std::vector<ParamSpec> specs;
  for (int64_t l = 0; l < c.layers; ++l) {
    specs.push_back({lname(l, "norm"), {H}});
    specs.push_back({lname(l, "gate"), {I, H}});
    specs.push_back({lname(l, "up"), {I, H}});
    specs.push_back({lname(l, "down"), {H, I}});
  }
  specs.push_back({"norm", {H}});
  params_ = std::make_unique<ParameterStore>(specs);
  for (const ParamSpec& s : specs) {
    size_t n = size_t(s.shape.numel());
    std::vector<float> v = s.shape.ndim == 1 ? std::vector<float>(n, 1.0f)
                                             : normal(n, rng, 1.0f / std::sqrt(float(s.shape[1])));
    params_->master(s.name).copy_from_host(v.data(), n * sizeof(float));
  }
  params_->sync_compute_copy();
}

Tensor ToyLM::layer(int64_t l, const Tensor& x) const {
  const ParameterStore& p = *params_;
  Tensor h = ops::rmsnorm(x, p.get(lname(l, "norm")), config_.eps);
  Tensor a = ops::swiglu(ops::linear(h, p.get(lname(l, "gate"))), ops::linear(h, p.get(lname(l, "up"))));
  return ops::add(x, ops::linear(a, p.get(lname(l, "down"))));
}

ToyLM::Loss ToyLM::loss(const Tensor& ids, const Tensor& labels, const Tensor& weights, bool checkpointing) const {
  const int64_t rows = ids.numel();
  Tensor x = ops::embedding(embed_, ids);  // (B, S, H)
  for (int64_t l = 0; l < config_.layers; ++l) {
    if (checkpointing) {
      x = checkpoint("toy_layer", [this, l](const std::vector<Tensor>& in) { return std::vector<Tensor>{layer(l, in[0])}; },
                     {x})[0];
    } else {
      x = layer(l, x);
    }
  }
  Tensor h = ops::rmsnorm(x, params_->get("norm"), config_.eps).reshape({rows, config_.hidden});
  Tensor w = ops::normalize_weights(weights.reshape({rows}));
  Tensor flat_labels = labels.reshape({rows});
  ops::LinearCrossEntropy ce = ops::linear_cross_entropy(h, head_, flat_labels, w, 256);
  return {ce.loss, ops::weighted_accuracy(ce.argmax, flat_labels, weights.reshape({rows}))};
}

ToyStep::ToyStep(ToyLM& model, const Bucket& bucket) : model_(model), bucket_(bucket) {
  Shape s{bucket.batch, bucket.seq};
  ids_ = io_.input("ids", s, DType::i32);
  labels_ = io_.input("labels", s, DType::i32);
  weights_ = io_.input("weights", s, DType::f32);
  out_ = io_.output("out", {2}, DType::f32);
}

void ToyStep::train(bool checkpointing) const {
  io_.stage_in();
  ToyLM::Loss r = model_.loss(ids_, labels_, weights_, checkpointing);
  backward(r.loss);
  ops::copy_(out_.rows(0, 1), r.loss);
  ops::copy_(out_.rows(1, 2), r.accuracy);
  io_.stage_out();
}

void ToyStep::stage(const std::vector<std::vector<int32_t>>& sequences) const {
  DF_CHECK(int64_t(sequences.size()) <= bucket_.batch,
           "ToyStep::stage: " << sequences.size() << " sequences for bucket " << bucket_.str());
  const int64_t B = bucket_.batch, S = bucket_.seq;
  std::vector<int32_t> ids(size_t(B * S), 0), labels(size_t(B * S), -1);
  std::vector<float> weights(size_t(B * S), 0.0f);
  for (size_t b = 0; b < sequences.size(); ++b) {
    const auto& seq = sequences[b];
    DF_CHECK(int64_t(seq.size()) <= S, "ToyStep::stage: a sequence of " << seq.size() << " tokens in bucket "
                                                                         << bucket_.str());
    for (size_t t = 0; t < seq.size(); ++t) {
      ids[b * size_t(S) + t] = seq[t];
      if (t + 1 < seq.size()) {
        labels[b * size_t(S) + t] = seq[t + 1];
        weights[b * size_t(S) + t] = 1.0f;
      }
    }
  }
  io_.staging("ids").copy_from_host(ids.data(), ids.size() * 4);
  io_.staging("labels").copy_from_host(labels.data(), labels.size() * 4);
  io_.staging("weights").copy_from_host(weights.data(), weights.size() * 4);
}

float ToyStep::loss() const { return io_.result("out").to_floats()[0]; }
float ToyStep::accuracy() const { return io_.result("out").to_floats()[1]; }

}  // namespace dflash
