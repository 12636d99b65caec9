// The choice of the target's attention implementation: the config's, held process-wide, or the rule.
#include "runtime/target_attention.h"

#include <atomic>
#include <string>

#include "kernels/heuristics.h"
#include "runtime/error.h"

namespace dflash {

namespace {
// -1: no choice set (the rule); otherwise a TargetAttention value.
std::atomic<int> g_choice{-1};
}  // namespace

const char* target_attention_name(TargetAttention a) { return a == TargetAttention::cudnn ? "cudnn" : "own"; }

bool cudnn_attention_built() {
#ifdef DFLASH_CUDNN
  return true;
#else
  return false;
#endif
}

TargetAttention target_attention() {
  if (int o = g_choice.load(); o >= 0) {
    DF_CHECK(TargetAttention(o) == TargetAttention::own || cudnn_attention_built(),
             "cuDNN attention was asked for (runtime.target_attention = \"cudnn\"), but this build has no cuDNN "
             "path: run scripts/setup.sh and rebuild, or set runtime.target_attention = \"own\"");
    return TargetAttention(o);
  }
  return kernels::heuristics::target_attention_cudnn("auto", cudnn_attention_built()) ? TargetAttention::cudnn
                                                                                      : TargetAttention::own;
}

std::optional<TargetAttention> parse_target_attention(const std::string& value) {
  DF_CHECK(value == "auto" || value == "cudnn" || value == "own",
           "runtime.target_attention = \"" << value
                                           << "\" is not an attention implementation: use \"auto\" (cuDNN where the "
                                              "build has it), \"cudnn\" (cuDNN's fused flash attention) or \"own\" "
                                              "(dflash's kernel)");
  DF_CHECK(value != "cudnn" || cudnn_attention_built(),
           "runtime.target_attention = \"cudnn\", but this build has no cuDNN path (CMake found no cuDNN or no "
           "cudnn-frontend headers in .deps/cudnn-frontend): run scripts/setup.sh and rebuild, or set "
           "runtime.target_attention = \"auto\" or \"own\"");
  if (value == "auto") return std::nullopt;
  return value == "cudnn" ? TargetAttention::cudnn : TargetAttention::own;
}

void set_target_attention(std::optional<TargetAttention> a) { g_choice.store(a ? int(*a) : -1); }

TargetAttentionScope::TargetAttentionScope(TargetAttention a) {
  const int old = g_choice.exchange(int(a));
  if (old >= 0) previous_ = TargetAttention(old);
}
TargetAttentionScope::~TargetAttentionScope() { set_target_attention(previous_); }

}  // namespace dflash
