// The DFlash drafter (docs/MODEL.md, "The drafter forward"): context features from the target's
// layers, noise blocks embedded with the target's frozen embedding, layers of block-sparse
// attention over [context; draft] plus a SiLU-gated MLP, a final norm, and the fused frozen
// lm_head cross-entropy with DFlash's loss weights. One recompute segment per layer.
#pragma once
#include <functional>
#include <memory>

#include "graphs/checkpoint.h"
#include "graphs/overlap.h"
#include "model/dflash_ops.h"
#include "model/drafter_spec.h"
#include "runtime/ops.h"

namespace dflash {

// A micro-batch as the program sees it (all on the device; i32 unless noted).
struct DrafterInputs {
  Tensor input_ids;      // [B, S]
  Tensor loss_mask;      // [B, S] (0/1)
  Tensor anchors, keep;  // [B, N]
  Tensor target_hidden;  // f32/bf16 [B, S, F*H]
};

struct DrafterOutputs {
  Tensor loss;     // f32 [1]: sum lw CE / (sum lw + 1e-6), differentiable
  Tensor sums;     // f32 [7]: see dflash_metrics
  Tensor output;   // [B, T, H] after the final norm
  ops::LinearCrossEntropy ce;  // per-slot ce and argmax, [B*T]; slot 0 (weight 0) is not computed: ce 0, argmax -1
  DFlashPrepared prepared;
};

// What recomputing a drafter layer in part costs against recomputing it entirely, for S context
// and T block rows: the share of the recomputation's GEMM work it keeps (q, k and v against q, k,
// v, o, gate and up; k and v run over S + T rows, so the share grows with the context).
double partial_recompute_cost(const DrafterSpec& spec, int64_t S, int64_t T);

class Drafter {
 public:
  // embed_tokens and lm_head [V, H] are the target's, frozen.
  // layout: how the parameters' flat buffers are split across ranks (runtime/optimizer.h).
  // The weights start as init_random(0, 0.02); with random_init = false they are left unset for a
  // caller that sets every one itself (the trainer's seeded init, a benchmark's fill), which skips
  // a single-threaded pass over ~10^9 values at qwen3-8b dims.
  Drafter(const DrafterSpec& spec, Tensor embed_tokens, Tensor lm_head, ShardLayout layout = {},
          bool random_init = true);

  // Linear weights ~ N(0, std^2) (seeded), norm weights 1. Eager, before recording.
  void init_random(uint64_t seed, double std);

  DrafterOutputs forward(const DrafterInputs& in, bool checkpointing, int64_t chunk_rows) const;
  // Checkpoints (recomputes in backward) the first recompute.full layers entirely and the next
  // recompute.partial in part (their o, gate and up projections' outputs kept); the rest are
  // not checkpointed. Every choice computes the same values and gradients, bit for bit.
  DrafterOutputs forward(const DrafterInputs& in, Recompute recompute, int64_t chunk_rows) const;

  ParameterStore& params() { return *params_; }
  const ParameterStore& params() const { return *params_; }
  const DrafterSpec& spec() const { return spec_; }

  // Called during the backward once layer l's MLP half is done (every layer), and once the whole
  // layer is (l >= 1): the named parameters' gradients are then complete, and the overlapped
  // gradient reduction starts there (graphs/overlap.h). Set before recording.
  void set_layer_backward_hook(std::function<void(int64_t layer, LayerGrads done)> hook) {
    layer_hook_ = std::move(hook);
  }

 private:
  Tensor layer(int64_t l, const Tensor& h, const Tensor& context, const Tensor& q_pos, const Tensor& k_pos,
               const Tensor& anchors, const Tensor& keep, int64_t S, CheckpointStash* stash, bool partial) const;
  DrafterSpec spec_;
  Tensor embed_, lm_head_, inv_freq_;
  std::unique_ptr<ParameterStore> params_;
  std::function<void(int64_t, LayerGrads)> layer_hook_;
};

// Checks a spec against the target's dims and itself; messages name the keys and the fix.
void validate_drafter_spec(const DrafterSpec& spec);

}  // namespace dflash
