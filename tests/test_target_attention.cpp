// The choice of the target's attention implementation (runtime/target_attention.h): the rule for
// runtime.target_attention = "auto", the key's values and refusals with their fix, the
// process-wide choice and its scopes, which setting up a job makes the key's; and the refusals of
// `dflash-bench causal-attention` (its timings need the GPU host).
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "runtime/error.h"
#include "runtime/target_attention.h"
#include "tests/test_util.h"
#include "tests/trainer_fixture.h"
#include "train/job.h"

using namespace dflash;

TEST_SUITE("target-attention") {
  TEST_CASE("runtime.target_attention: auto is cudnn where built, own otherwise; cudnn and own by name") {
    set_target_attention(std::nullopt);
    const TargetAttention best = cudnn_attention_built() ? TargetAttention::cudnn : TargetAttention::own;
    CHECK(target_attention() == best);
    CHECK_FALSE(parse_target_attention("auto").has_value());
    CHECK(parse_target_attention("own") == TargetAttention::own);
    if (cudnn_attention_built()) {
      CHECK(parse_target_attention("cudnn") == TargetAttention::cudnn);
    } else {
      CHECK_THROWS_WITH_AS(parse_target_attention("cudnn"),
                           doctest::Contains("runtime.target_attention = \"cudnn\", but this build has no cuDNN path"),
                           Error);
      CHECK_THROWS_WITH_AS(parse_target_attention("cudnn"), doctest::Contains("run scripts/setup.sh and rebuild"),
                           Error);
    }
    CHECK(std::string(target_attention_name(TargetAttention::cudnn)) == "cudnn");
    CHECK(std::string(target_attention_name(TargetAttention::own)) == "own");
  }

  TEST_CASE("runtime.target_attention refuses another value and names the choices") {
    CHECK_THROWS_WITH_AS(parse_target_attention("flash"),
                         doctest::Contains("runtime.target_attention = \"flash\" is not an attention implementation: "
                                           "use \"auto\""),
                         Error);
  }

  TEST_CASE("the process-wide choice beats the rule and a scope restores the previous choice") {
    set_target_attention(std::nullopt);
    const TargetAttention best = cudnn_attention_built() ? TargetAttention::cudnn : TargetAttention::own;
    {
      TargetAttentionScope outer(TargetAttention::own);
      CHECK(target_attention() == TargetAttention::own);
      if (cudnn_attention_built()) {
        TargetAttentionScope inner(TargetAttention::cudnn);
        CHECK(target_attention() == TargetAttention::cudnn);
      } else {
        TargetAttentionScope inner(TargetAttention::cudnn);
        CHECK_THROWS_WITH_AS(target_attention(),
                             doctest::Contains("cuDNN attention was asked for (runtime.target_attention = \"cudnn\"), "
                                               "but this build has no cuDNN path"),
                             Error);
      }
      CHECK(target_attention() == TargetAttention::own);
    }
    CHECK(target_attention() == best);
    set_target_attention(TargetAttention::own);
    CHECK(target_attention() == TargetAttention::own);
    set_target_attention(std::nullopt);
    CHECK(target_attention() == best);
  }

  TEST_CASE("runtime.target_attention: setting up a job makes the key the process's choice") {
    const auto quiet = [](const std::string&) {};
    set_target_attention(std::nullopt);
    setup_job(test::small_job("target-attention-own", {"runtime.target_attention=own"}), quiet);
    CHECK(target_attention() == TargetAttention::own);
    // Without the cuDNN path "auto" also runs dflash's kernel: only a build with it tells them apart.
    setup_job(test::small_job("target-attention-auto"), quiet);
    CHECK(target_attention() == (cudnn_attention_built() ? TargetAttention::cudnn : TargetAttention::own));
    set_target_attention(std::nullopt);
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
