// The choice of the target's attention implementation (runtime/target_attention.h):
// DFLASH_TARGET_ATTENTION, its default, the process-wide override and the refusals with their fix.
#include <cstdlib>
#include <optional>
#include <string>

#include "runtime/error.h"
#include "runtime/target_attention.h"
#include "tests/test_util.h"

using namespace dflash;

namespace {
// Sets DFLASH_TARGET_ATTENTION (or unsets it for nullptr) for a scope and restores the old value.
class EnvScope {
 public:
  explicit EnvScope(const char* value) {
    if (const char* old = std::getenv(kName)) old_ = old;
    if (value)
      setenv(kName, value, 1);
    else
      unsetenv(kName);
  }
  ~EnvScope() {
    if (old_)
      setenv(kName, old_->c_str(), 1);
    else
      unsetenv(kName);
  }

 private:
  static constexpr const char* kName = "DFLASH_TARGET_ATTENTION";
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

