// Trainable parameters in flat persistent buffers (master values, gradients, Adam moments), and
// the AdamW update as recordable kernel calls. The learning rate is computed on the device from
// the step counter, so a schedule never needs a new recording.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/tensor.h"

namespace dflash {

struct ParamSpec {
  std::string name;
  Shape shape;
};

// How the flat buffers are split across `world` ranks (ZeRO-1 when `sharded`). With world > 1 the
// flat length is padded to a multiple of world * 16, so rank r's shard is the equal slice
// [r * shard, (r + 1) * shard); the gradient norm is summed from those slices in either mode.
struct ShardLayout {
  int world = 1, rank = 0;
  bool sharded = false;  // this rank keeps only its slice of the f32 masters and Adam moments
};

// One contiguous f32 buffer each for master values and gradients; every parameter is a view at
// a 64-byte aligned offset (padding stays 0 and is ignored by AdamW). On a GPU the compute copy
// is bf16 and the optimizer rewrites it after each update; on the CPU it is the master itself,
// except when sharded: then the masters are this rank's slice and the compute copy (f32 on the
// CPU) is a full buffer that the update all-gathers.
class ParameterStore {
 public:
  explicit ParameterStore(std::vector<ParamSpec> specs, ShardLayout layout = {});

  // The trainable leaf that ops use (its gradient is the matching view of grads()).
  const Tensor& get(const std::string& name) const;
  // The parameter's f32 master values (refused when sharded: this rank holds only a slice).
  Tensor master(const std::string& name) const;
  // Writes a parameter's full f32 values from the host: the master (this rank's part of it when
  // sharded) and, when sharded, the compute copy (rounded to bf16 on a GPU, as the update does).
  void set_values(const std::string& name, const float* values);
  Tensor grad(const std::string& name) const;
  bool has(const std::string& name) const { return index_.count(name) != 0; }

  const std::vector<ParamSpec>& specs() const { return specs_; }
  const std::vector<Tensor>& leaves() const { return leaves_; }  // in the order of specs()
  const Tensor& flat_master() const { return master_; }
  const Tensor& flat_grads() const { return grads_; }
  const Tensor& flat_compute() const { return compute_; }
  int64_t padded_numel() const { return grads_.numel(); }
  int64_t parameter_count() const { return count_; }
  int64_t offset_of(const std::string& name) const;  // elements into the flat buffers

  const ShardLayout& layout() const { return layout_; }
  bool sharded() const { return layout_.sharded; }
  int64_t shard_numel() const { return padded_numel() / layout_.world; }  // world > 1: exact
  int64_t shard_begin() const { return shard_numel() * layout_.rank; }

  // After master values were written from the host: refresh the compute copy (GPU).
  void sync_compute_copy();

 private:
  std::vector<ParamSpec> specs_;
  ShardLayout layout_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<int64_t> offsets_;
  std::vector<Tensor> leaves_;
  Tensor master_, grads_, compute_;
  int64_t count_ = 0;
};

struct OptimizerConfig {
  float lr = 6e-4f;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.01f;
  float max_grad_norm = 1.0f;  // 0 turns clipping off
  float min_lr_ratio = 0.0f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // 0: constant lr (no schedule)
};

class AdamWOptimizer {
 public:
  AdamWOptimizer(ParameterStore& params, const OptimizerConfig& config);

  // Kernel calls of one update: grads *= grad_scale; norm; clip; lr from the step counter;
  // AdamW; zero grads (unless set_zero_grads(false)); step + 1. Writes {grad norm before
  // clipping, lr used} to stats_out f32[2].
  void update(float grad_scale, const Tensor& stats_out);

  // The step over world > 1 ranks (sharded or not) is DistributedAdamW's
  // (dist/optimizer_distributed.h); it records its kernel calls on this optimizer's state.

  ParameterStore& params() const { return params_; }
  const Tensor& step_counter() const { return step_; }  // i32 [1]: optimizer steps done
  const Tensor& adam_m() const { return m_; }
  const Tensor& adam_v() const { return v_; }
  const OptimizerConfig& config() const { return config_; }
  // false: the update leaves the gradients as they are, because the next step's first backward
  // overwrites them (FreshLeafGrads, runtime/autograd.h); saves a write of every gradient.
  // Set before recording the update.
  void set_zero_grads(bool on) { zero_grads_ = on; }
  bool zero_grads() const { return zero_grads_; }
  // The update's own buffers: f32 [1] the lr and the gradient norm of the step in progress, and on a
  // GPU the norm's f32 [1024] partial sums (undefined on the CPU).
  const Tensor& lr_buffer() const { return lr_; }
  const Tensor& norm_buffer() const { return norm_; }
  const Tensor& norm_partials() const { return partials_; }

 private:
  ParameterStore& params_;
  OptimizerConfig config_;
  bool zero_grads_ = true;
  Tensor m_, v_, step_, lr_, norm_, partials_;
};

}  // namespace dflash
