// Which implementation runs the frozen target's causal attention on CUDA in bf16: cuDNN's fused
// flash attention (runtime/cuda/cudnn_attention.cpp) or dflash's own kernel
// (kernels/cuda/causal_attention.cu). f32 and the CPU always run dflash's kernels. The choice is
// the config key runtime.target_attention ("auto", "cudnn" or "own"; docs/config.md), whose rule
// for "auto" is kernels/heuristics.h's target_attention_cudnn.
#pragma once
#include <optional>
#include <string>

namespace dflash {

enum class TargetAttention { cudnn, own };

const char* target_attention_name(TargetAttention a);  // "cudnn", "own"

// Whether this build has the cuDNN path (CMake found cuDNN and the cudnn-frontend headers).
bool cudnn_attention_built();

// The implementation asked for: the process-wide choice below when set, else the rule for "auto"
// (cudnn where the build has it, own otherwise). Throws, naming the fix, on cudnn in a build
// without the cuDNN path.
TargetAttention target_attention();

// The implementation runtime.target_attention names: "auto" (nullopt: the rule), "cudnn" or "own".
// Throws, naming the key and the choices, on another value, and on "cudnn" in a build without it.
std::optional<TargetAttention> parse_target_attention(const std::string& value);

// Sets the choice for the whole process (a job's config at setup; benchmarks and tests); nullopt
// goes back to the rule. Set it between steps, not while programs are being recorded.
void set_target_attention(std::optional<TargetAttention> a);

// Sets the choice for a scope and restores the previous one.
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
