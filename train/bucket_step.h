// One bucket's programs for the DFlash drafter, over fixed buffers: the target forward (online
// mode), the training step and the eval step. The host stages a micro-batch into the staging
// buffers; each program begins by copying them in and ends by copying its results out.
#pragma once
#include <cstdint>
#include <vector>

#include "graphs/buckets.h"
#include "graphs/static_io.h"
#include "model/drafter.h"

namespace dflash {

class Target;

// A micro-batch on the host, laid out as the program's static inputs (row-major, padded).
struct HostBatch {
  std::vector<int32_t> input_ids;  // [B*S], padding 0
  std::vector<int32_t> loss_mask;  // [B*S], padding 0
  std::vector<int32_t> anchors;    // [B*N]
  std::vector<int32_t> keep;       // [B*N]
  std::vector<float> hidden;       // [B*S*F*H] (offline mode only), padding 0
  int64_t real_tokens = 0;         // unpadded tokens of the micro-batch's sequences
  int64_t sequences = 0;
  void resize(const Bucket& b, int64_t feature_width, bool offline);
};

// What one replay reports (read after the program ran).
struct StepResult {
  float loss = 0;      // the micro-batch's objective
  double sums[7] = {};  // dflash_metrics sums
  double accuracy() const { return sums[2] / (sums[3] + 1e-6); }
  double tau() const { return sums[5] > 0 ? sums[4] / sums[5] : 0.0; }
};

class BucketStep {
 public:
  // target: the frozen target for online mode, or null (offline: hidden states are staged).
  // hidden_on_device (no target): the features live in a device tensor the caller fills once
  // (hidden()); the benchmark's setting, where the target forward is not timed.
  BucketStep(const Drafter& drafter, const Target* target, const Bucket& bucket, int64_t chunk_rows,
             bool hidden_on_device = false);

  void stage(const HostBatch& batch) const;  // host copies into the staging buffers
  void target_body() const;                  // online: ids -> target features (static)
  void train_body(bool checkpointing) const; // forward, loss, backward (grads +=, or = when fresh), results
  void train_body_recomputing(Recompute recompute) const;  // the same, checkpointing as `recompute` says
  // true: the train bodies write the parameters' gradients instead of adding to them (runtime/
  // autograd.h, FreshLeafGrads): for one micro-batch per step, with an optimizer that leaves its
  // gradients unzeroed (AdamWOptimizer::set_zero_grads(false)). Set before recording.
  void set_fresh_grads(bool on) { fresh_grads_ = on; }
  int64_t layers() const;
  double partial_recompute_cost() const;  // Drafter::partial_recompute_cost at this bucket's shapes
  void eval_body() const;                    // (online: target forward, then) drafter forward, results
  // After replay (the device synchronised): the results, read without allocating.
  void read_result(StepResult& out) const;
  StepResult result() const;
  const Tensor& hidden() const { return hidden_; }  // online: the target features of the last run

  const Bucket& bucket() const { return bucket_; }
  bool online() const { return target_ != nullptr; }

 private:
  void forward_and_report(bool train, Recompute recompute) const;
  const Drafter& drafter_;
  const Target* target_;
  bool staged_hidden_;
  Bucket bucket_;
  int64_t chunk_rows_;
  bool fresh_grads_ = false;
  StaticIO io_, target_io_;
  Tensor input_ids_, loss_mask_, anchors_, keep_, hidden_, out_;
  Tensor target_ids_;
};

}  // namespace dflash
