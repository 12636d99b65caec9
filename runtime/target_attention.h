// Which implementation runs the frozen target's causal attention on CUDA in bf16: cuDNN's fused
// flash attention (runtime/cuda/cudnn_attention.cpp) or dflash's own kernel
// (kernels/cuda/causal_attention.cu). f32 and the CPU always run dflash's kernels.
#pragma once
#include <optional>
#include <string>

namespace dflash {

enum class TargetAttention { cudnn, own };

const char* target_attention_name(TargetAttention a);  // "cudnn", "own"

// Whether this build has the cuDNN path (CMake found cuDNN and the cudnn-frontend headers).
bool cudnn_attention_built();

// The implementation asked for: the override below when set, else DFLASH_TARGET_ATTENTION
// (cudnn or own), else cudnn where the build has it and own otherwise. Throws, naming the fix,
// on another value or on cudnn in a build without the cuDNN path.
TargetAttention target_attention();

// The cuDNN plan asked for by DFLASH_CUDNN_SDPA_PLAN: an SDPA implementation, "unified" or
// "composite", optionally followed by ":" and an engine tag as `dflash-bench causal-attention
// --plans` prints it. Both fields empty when it is unset or empty: cuDNN's default plan. Throws,
// naming the fix, on another implementation or an empty tag after the colon.
struct CudnnPlanRequest {
  std::string implementation, engine;
};
CudnnPlanRequest cudnn_plan_request();

// Overrides DFLASH_TARGET_ATTENTION for the whole process (benchmarks and tests); nullopt goes
// back to the environment. Set it between steps, not while programs are being recorded.
void set_target_attention(std::optional<TargetAttention> a);

// Sets the override for a scope and restores the previous one.
class TargetAttentionScope {
 public:
  explicit TargetAttentionScope(TargetAttention a);
  ~TargetAttentionScope();
  TargetAttentionScope(const TargetAttentionScope&) = delete;
  TargetAttentionScope& operator=(const TargetAttentionScope&) = delete;

 private:
  std::optional<TargetAttention> previous_;
};

}  // namespace dflash
