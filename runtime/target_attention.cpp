// The choice of the target's attention implementation: the environment, a process-wide override.
#include "runtime/target_attention.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "runtime/error.h"

namespace dflash {

namespace {
// -1: no override; otherwise a TargetAttention value.
std::atomic<int> g_override{-1};
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
  if (int o = g_override.load(); o >= 0) {
    DF_CHECK(TargetAttention(o) == TargetAttention::own || cudnn_attention_built(),
             "cuDNN attention was asked for (set_target_attention), but this build has no cuDNN path: run "
             "scripts/setup.sh and rebuild, or ask for own");
    return TargetAttention(o);
  }
  const char* env = std::getenv("DFLASH_TARGET_ATTENTION");
  if (!env || !*env) return cudnn_attention_built() ? TargetAttention::cudnn : TargetAttention::own;
  const std::string v = env;
  if (v == "own") return TargetAttention::own;
  DF_CHECK(v == "cudnn", "DFLASH_TARGET_ATTENTION=" << v
                             << " is not an attention implementation: use cudnn (cuDNN's fused flash attention) or "
                                "own (dflash's kernel), or unset it for the default");
  DF_CHECK(cudnn_attention_built(),
           "DFLASH_TARGET_ATTENTION=cudnn, but this build has no cuDNN path (CMake found no cuDNN or no "
           "cudnn-frontend headers in .deps/cudnn-frontend): run scripts/setup.sh and rebuild, or set "
           "DFLASH_TARGET_ATTENTION=own");
  return TargetAttention::cudnn;
}

CudnnPlanRequest cudnn_plan_request() {
  const char* env = std::getenv("DFLASH_CUDNN_SDPA_PLAN");
  if (!env || !*env) return {};
  const std::string v = env;
  const size_t colon = v.find(':');
  CudnnPlanRequest r{v.substr(0, colon), colon == std::string::npos ? "" : v.substr(colon + 1)};
  DF_CHECK(r.implementation == "unified" || r.implementation == "composite",
           "DFLASH_CUDNN_SDPA_PLAN=" << v << ": '" << r.implementation
                                     << "' is not a cuDNN SDPA implementation; use unified or composite, optionally "
                                        "followed by :ENGINE as `dflash-bench causal-attention --plans` lists them, "
                                        "or unset it for cuDNN's default plan");
  DF_CHECK(colon == std::string::npos || !r.engine.empty(),
           "DFLASH_CUDNN_SDPA_PLAN=" << v << " names no engine after the colon; write " << r.implementation
                                     << ":ENGINE with an engine `dflash-bench causal-attention --plans` lists, or just "
                                     << r.implementation);
  return r;
}

void set_target_attention(std::optional<TargetAttention> a) { g_override.store(a ? int(*a) : -1); }

TargetAttentionScope::TargetAttentionScope(TargetAttention a) {
  const int old = g_override.exchange(int(a));
  if (old >= 0) previous_ = TargetAttention(old);
}
TargetAttentionScope::~TargetAttentionScope() { set_target_attention(previous_); }

}  // namespace dflash
