// A tiny per-token language model that exercises the runtime end to end: a frozen embedding,
// layers of RMSNorm + SiLU-gated MLP with residual adds (one checkpointed segment per layer), a
// final RMSNorm and a fused frozen-head cross-entropy. Used by the record/replay tests, the
// CPU/GPU checks and dflash-bench; the DFlash drafter follows the same patterns.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "graphs/buckets.h"
#include "graphs/static_io.h"
#include "runtime/optimizer.h"

namespace dflash {

struct ToyConfig {
  int64_t vocab = 96, hidden = 32, intermediate = 64, layers = 2;
  float eps = 1e-5f;
  uint64_t seed = 7;
};

class ToyLM {
 public:
  explicit ToyLM(const ToyConfig& config);  // in the current context; seeded random weights

  struct Loss {
    Tensor loss, accuracy;  // f32 [1] each
  };
  // Weighted mean cross-entropy of next-token labels: ids, labels i32 [B, S]; weights f32 [B, S]
  // (0 on padding). With `checkpointing`, each layer is one recomputed segment.
  Loss loss(const Tensor& ids, const Tensor& labels, const Tensor& weights, bool checkpointing) const;

  ParameterStore& params() { return *params_; }
  const ToyConfig& config() const { return config_; }

 private:
  Tensor layer(int64_t l, const Tensor& x) const;
  ToyConfig config_;
  Tensor embed_, head_;  // frozen [V, H]
  std::unique_ptr<ParameterStore> params_;
};

// One bucket's static buffers and the body of its training step.
class ToyStep {
 public:
  ToyStep(ToyLM& model, const Bucket& bucket);
  // Stage inputs, loss, backward (grads +=), write {loss, accuracy}, stage outputs.
  void train(bool checkpointing) const;
  // Host side: write a batch into the staging buffers (lengths <= bucket.seq; the rest padded).
  void stage(const std::vector<std::vector<int32_t>>& sequences) const;
  float loss() const;      // after replay (and synchronize)
  float accuracy() const;
  const Bucket& bucket() const { return bucket_; }

 private:
  ToyLM& model_;
  Bucket bucket_;
  StaticIO io_;
  Tensor ids_, labels_, weights_, out_;
};

}  // namespace dflash
