// BucketStep: static buffers and program bodies of one bucket.
#include "train/bucket_step.h"

#include <optional>

#include "model/target.h"
#include "runtime/autograd.h"
#include "runtime/context.h"

namespace dflash {

void HostBatch::resize(const Bucket& b, int64_t feature_width, bool offline) {
  input_ids.assign(size_t(b.batch * b.seq), 0);
  loss_mask.assign(size_t(b.batch * b.seq), 0);
  anchors.assign(size_t(b.batch * b.anchors), 0);
  keep.assign(size_t(b.batch * b.anchors), 0);
  hidden.assign(offline ? size_t(b.batch * b.seq * feature_width) : 0, 0.0f);
  real_tokens = sequences = 0;
}

BucketStep::BucketStep(const Drafter& drafter, const Target* target, const Bucket& bucket, int64_t chunk_rows,
                       bool hidden_on_device)
    : drafter_(drafter), target_(target), staged_hidden_(!target && !hidden_on_device), bucket_(bucket),
      chunk_rows_(chunk_rows) {
  const int64_t B = bucket.batch, S = bucket.seq, N = bucket.anchors;
  const int64_t FH = drafter.spec().num_features() * drafter.spec().hidden_size;
  input_ids_ = io_.input("input_ids", {B, S}, DType::i32);
  loss_mask_ = io_.input("loss_mask", {B, S}, DType::i32);
  anchors_ = io_.input("anchors", {B, N}, DType::i32);
  keep_ = io_.input("keep", {B, N}, DType::i32);
  if (target) target_ids_ = target_io_.input("input_ids", {B, S}, DType::i32);
  if (staged_hidden_) hidden_ = io_.input("target_hidden", {B, S, FH}, DType::f32);
  else hidden_ = Tensor::persistent({B, S, FH}, drafter.params().flat_compute().dtype(), "target_hidden");
  out_ = io_.output("results", {8}, DType::f32);
}

void BucketStep::stage(const HostBatch& b) const {
  io_.staging("input_ids").copy_from_host(b.input_ids.data(), b.input_ids.size() * 4);
  io_.staging("loss_mask").copy_from_host(b.loss_mask.data(), b.loss_mask.size() * 4);
  io_.staging("anchors").copy_from_host(b.anchors.data(), b.anchors.size() * 4);
  io_.staging("keep").copy_from_host(b.keep.data(), b.keep.size() * 4);
  if (target_) target_io_.staging("input_ids").copy_from_host(b.input_ids.data(), b.input_ids.size() * 4);
  if (staged_hidden_) io_.staging("target_hidden").copy_from_host(b.hidden.data(), b.hidden.size() * 4);
}

void BucketStep::target_body() const {
  DF_CHECK(target_, "target_body in offline mode");
  NoGrad no_grad;
  target_io_.stage_in();
  target_->features(target_ids_, hidden_);
}

void BucketStep::forward_and_report(bool train, Recompute recompute) const {
  io_.stage_in();
  // Staged hidden states arrive as f32; the drafter computes in its parameters' dtype.
  DType compute = drafter_.params().flat_compute().dtype();
  Tensor hidden = hidden_.dtype() == compute ? hidden_ : ops::cast(hidden_, compute);
  DrafterInputs in{input_ids_, loss_mask_, anchors_, keep_, hidden};
  std::optional<FreshLeafGrads> fresh;
  if (train && fresh_grads_) fresh.emplace(drafter_.params().leaves());
  DrafterOutputs o = drafter_.forward(in, recompute, chunk_rows_);
  o.output = Tensor();  // the final norm's output is not needed by backward: free it first
  if (train) backward(o.loss);
  if (fresh) fresh->finish();
  ops::copy_(out_.rows(0, 1), o.loss);
  ops::copy_(out_.rows(1, 8), o.sums);
  io_.stage_out();
}

void BucketStep::train_body(bool checkpointing) const {
  forward_and_report(true, Recompute{checkpointing ? layers() : 0, 0});
}
void BucketStep::train_body_recomputing(Recompute recompute) const { forward_and_report(true, recompute); }
int64_t BucketStep::layers() const { return drafter_.spec().num_hidden_layers; }
double BucketStep::partial_recompute_cost() const {
  return dflash::partial_recompute_cost(drafter_.spec(), bucket_.seq, bucket_.anchors * drafter_.spec().block_size);
}

void BucketStep::eval_body() const {
  NoGrad no_grad;
  if (target_) target_body();
  forward_and_report(false, Recompute{});
}

void BucketStep::read_result(StepResult& out) const {
  float v[8];
  io_.result("results").copy_to_host(v, sizeof v);
  out.loss = v[0];
  for (int i = 0; i < 7; ++i) out.sums[i] = v[i + 1];
}

StepResult BucketStep::result() const {
  StepResult r;
  read_result(r);
  return r;
}

}  // namespace dflash
