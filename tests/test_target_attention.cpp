// The choice of the target's attention implementation (runtime/target_attention.h):
// DFLASH_TARGET_ATTENTION, its default, the process-wide override and the refusals with their fix;
// and the refusals of `dflash-bench causal-attention` (its timings need the GPU host).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "runtime/error.h"
#include "runtime/target_attention.h"
#include "tests/test_util.h"

using namespace dflash;

namespace {
// Sets an environment variable (DFLASH_TARGET_ATTENTION unless named; unset for nullptr) for a
// scope and restores the old value.
class EnvScope {
 public:
  explicit EnvScope(const char* value, const char* name = "DFLASH_TARGET_ATTENTION") : name_(name) {
    if (const char* old = std::getenv(name_)) old_ = old;
    if (value)
      setenv(name_, value, 1);
    else
      unsetenv(name_);
  }
  ~EnvScope() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};
}  // namespace

TEST_SUITE("target-attention") {
  TEST_CASE("DFLASH_TARGET_ATTENTION: default cudnn where built, own and cudnn by name") {
    set_target_attention(std::nullopt);
    const TargetAttention best = cudnn_attention_built() ? TargetAttention::cudnn : TargetAttention::own;
    {
      EnvScope env(nullptr);
      CHECK(target_attention() == best);
    }
    {
      EnvScope env("");
      CHECK(target_attention() == best);
    }
    {
      EnvScope env("own");
      CHECK(target_attention() == TargetAttention::own);
    }
    EnvScope env("cudnn");
    if (cudnn_attention_built()) {
      CHECK(target_attention() == TargetAttention::cudnn);
    } else {
      CHECK_THROWS_WITH_AS(target_attention(),
                           doctest::Contains("DFLASH_TARGET_ATTENTION=cudnn, but this build has no cuDNN path"), Error);
      CHECK_THROWS_WITH_AS(target_attention(), doctest::Contains("run scripts/setup.sh and rebuild"), Error);
    }
    CHECK(std::string(target_attention_name(TargetAttention::cudnn)) == "cudnn");
    CHECK(std::string(target_attention_name(TargetAttention::own)) == "own");
  }

  TEST_CASE("DFLASH_TARGET_ATTENTION refuses another value and names the choices") {
    set_target_attention(std::nullopt);
    EnvScope env("flash");
    CHECK_THROWS_WITH_AS(target_attention(),
                         doctest::Contains("DFLASH_TARGET_ATTENTION=flash is not an attention implementation: use "
                                           "cudnn (cuDNN's fused flash attention) or own"),
                         Error);
  }

  TEST_CASE("DFLASH_CUDNN_SDPA_PLAN: unset is cuDNN's default; an implementation, with or without an engine") {
    const char* kPlan = "DFLASH_CUDNN_SDPA_PLAN";
    {
      EnvScope env(nullptr, kPlan);
      const CudnnPlanRequest r = cudnn_plan_request();
      CHECK(r.implementation.empty());
      CHECK(r.engine.empty());
    }
    {
      EnvScope env("", kPlan);
      CHECK(cudnn_plan_request().implementation.empty());
    }
    {
      EnvScope env("composite", kPlan);
      const CudnnPlanRequest r = cudnn_plan_request();
      CHECK(r.implementation == "composite");
      CHECK(r.engine.empty());
    }
    {
      EnvScope env("unified:eng7_k2=3:x", kPlan);  // the engine is everything after the first colon
      const CudnnPlanRequest r = cudnn_plan_request();
      CHECK(r.implementation == "unified");
      CHECK(r.engine == "eng7_k2=3:x");
    }
    {
      EnvScope env("flash:eng0", kPlan);
      CHECK_THROWS_WITH_AS(cudnn_plan_request(),
                           doctest::Contains("DFLASH_CUDNN_SDPA_PLAN=flash:eng0: 'flash' is not a cuDNN SDPA "
                                             "implementation; use unified or composite"),
                           Error);
    }
    {
      EnvScope env("composite:", kPlan);
      CHECK_THROWS_WITH_AS(cudnn_plan_request(),
                           doctest::Contains("DFLASH_CUDNN_SDPA_PLAN=composite: names no engine after the colon; "
                                             "write composite:ENGINE"),
                           Error);
    }
  }

  TEST_CASE("the override beats the environment and a scope restores the previous choice") {
    set_target_attention(std::nullopt);
    EnvScope env("flash");  // never read while an override is set
    {
      TargetAttentionScope outer(TargetAttention::own);
      CHECK(target_attention() == TargetAttention::own);
      if (cudnn_attention_built()) {
        TargetAttentionScope inner(TargetAttention::cudnn);
        CHECK(target_attention() == TargetAttention::cudnn);
      } else {
        TargetAttentionScope inner(TargetAttention::cudnn);
        CHECK_THROWS_WITH_AS(target_attention(),
                             doctest::Contains("cuDNN attention was asked for (set_target_attention), but this "
                                               "build has no cuDNN path"),
                             Error);
      }
      CHECK(target_attention() == TargetAttention::own);
    }
    CHECK_THROWS_WITH_AS(target_attention(), doctest::Contains("DFLASH_TARGET_ATTENTION=flash"), Error);
    set_target_attention(TargetAttention::own);
    CHECK(target_attention() == TargetAttention::own);
    set_target_attention(std::nullopt);
    CHECK_THROWS_WITH_AS(target_attention(), doctest::Contains("DFLASH_TARGET_ATTENTION=flash"), Error);
  }
}

namespace {
// dflash-bench causal-attention with `args`: its exit status and everything it printed.
std::pair<int, std::string> run_bench(const std::string& args) {
  dflash::test::CommandOutput o =
      dflash::test::run_command(dflash::test::sibling_binary("dflash-bench") + " causal-attention " + args);
  return {o.status, std::move(o.text)};
}
}  // namespace

TEST_SUITE("target-attention") {
  TEST_CASE("dflash-bench causal-attention refuses bad arguments with the fix") {
    auto [rc, out] = run_bench("--seqs=4096");
    CHECK(rc != 0);
    CHECK(out.find("unknown argument '--seqs=4096'; use --seq=N (repeatable), --reps=N and --plans") != std::string::npos);
    std::tie(rc, out) = run_bench("--seq=0");
    CHECK(rc != 0);
    CHECK(out.find("--seq=0 must be a positive whole number") != std::string::npos);
    std::tie(rc, out) = run_bench("--seq=4k");
    CHECK(rc != 0);
    CHECK(out.find("--seq=4k must be a positive whole number") != std::string::npos);
    std::tie(rc, out) = run_bench("--seq=4096 --reps=5");
    CHECK(rc != 0);
    CHECK(out.find("--reps=5; use at least 20 (the median of >= 20 replays)") != std::string::npos);
  }
}
