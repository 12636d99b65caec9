// The choice of the GPU's kernels (runtime/kernel_paths.h): runtime.kernels' values and the refusal
// of another with the fix, the process-wide choice and its scopes, the device the rules then see,
// and that setting up a job makes the key the process's choice, which the startup table's kernel
// lines follow (for an H100 as the rules see it in this process; any build, no GPU needed).
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/kernel_paths.h"
#include "tests/test_util.h"
#include "tests/trainer_fixture.h"
#include "train/job.h"
#include "train/kernel_choices.h"

using namespace dflash;
namespace heur = dflash::kernels::heuristics;

namespace {
// The startup table's lines for an H100 as the rules see it in this process, the qwen3-8b drafter.
std::vector<std::string> h100_lines() {
  DrafterSpec d;
  d.num_attention_heads = 32, d.num_key_value_heads = 8, d.head_dim = 128, d.block_size = 16;
  d.vocab_size = 151936;
  return kernel_choice_lines(rules_device({9, 0, 132}), d, {{4096, 512, 1}}, "own", false);
}
}  // namespace

TEST_SUITE("kernel-paths") {
  TEST_CASE("runtime.kernels: auto and portable by name; another value refused, naming the key and the choices") {
    CHECK(parse_kernel_paths("auto") == KernelPaths::automatic);
    CHECK(parse_kernel_paths("portable") == KernelPaths::portable);
    CHECK(std::string(kernel_paths_name(KernelPaths::automatic)) == "auto");
    CHECK(std::string(kernel_paths_name(KernelPaths::portable)) == "portable");
    CHECK_THROWS_WITH_AS(parse_kernel_paths("sm90"),
                         doctest::Contains("runtime.kernels = \"sm90\" is not a choice of kernels: use \"auto\""),
                         Error);
    CHECK_THROWS_WITH_AS(parse_kernel_paths("sm90"),
                         doctest::Contains("or \"portable\" (the portable kernels on any GPU)"), Error);
  }

  TEST_CASE("the process-wide choice: auto by default, a scope restores the previous one, the rules' device follows") {
    set_kernel_paths(KernelPaths::automatic);
    CHECK(kernel_paths() == KernelPaths::automatic);
    heur::Device d = rules_device({9, 0, 132});
    CHECK(d.major == 9);
    CHECK(d.sms == 132);
    CHECK(d.sm90_built == hopper_kernels_built());
    CHECK_FALSE(d.portable);
    CHECK(d.sm90() == hopper_kernels_built());
    {
      KernelPathsScope outer(KernelPaths::portable);
      CHECK(kernel_paths() == KernelPaths::portable);
      CHECK(rules_device({9, 0, 132}).portable);
      CHECK_FALSE(rules_device({9, 0, 132}).sm90());
      {
        KernelPathsScope inner(KernelPaths::automatic);
        CHECK(kernel_paths() == KernelPaths::automatic);
      }
      CHECK(kernel_paths() == KernelPaths::portable);
    }
    CHECK(kernel_paths() == KernelPaths::automatic);
    CHECK_FALSE(rules_device({8, 0, 108}).sm90());  // not 9.0: portable whatever the key
  }

  TEST_CASE("runtime.kernels: setting up a job makes the key the process's choice; the kernel lines follow it") {
    const auto quiet = [](const std::string&) {};
    set_kernel_paths(KernelPaths::automatic);
    setup_job(test::small_job("kernel-paths-portable", {"runtime.kernels=portable"}), quiet);
    CHECK(kernel_paths() == KernelPaths::portable);
    std::vector<std::string> lines = h100_lines();
    REQUIRE(lines.size() == 6);
    CHECK(lines[1] == "kernels: runtime.kernels = \"portable\": the portable kernels on any GPU");
    CHECK(lines[2] == "attention forward (heads 32/8, head_dim 128, block 16): mma.sync kernels (runtime.kernels = "
                      "\"portable\")");
    CHECK(lines[3] == "attention backward {seq 4096, anchors 512, batch 1}: mma.sync kernels, dq 64-key tiles "
                      "(runtime.kernels = \"portable\")");
    CHECK(lines[4] == "lm_head + cross-entropy (V 151936): rows read twice, one CTA a row (runtime.kernels = "
                      "\"portable\")");
    setup_job(test::small_job("kernel-paths-auto"), quiet);
    CHECK(kernel_paths() == KernelPaths::automatic);
    lines = h100_lines();
    REQUIRE(lines.size() == 6);
    if (hopper_kernels_built()) {
      CHECK(lines[1] ==
            "kernels: runtime.kernels = \"auto\": the Hopper kernels (wgmma, TMA, clusters) where the rules below "
            "choose them");
      CHECK(lines[4].find("rows read once, 8 CTA(s) a row") != std::string::npos);
    } else {  // the CPU build, or DFLASH_CUDA_ARCHS without 90a
      CHECK(lines[1] == "kernels: runtime.kernels = \"auto\": the portable kernels (this build has no Hopper kernels "
                        "(DFLASH_CUDA_ARCHS without 90a))");
      CHECK(lines[2].find("mma.sync kernels (this build has no Hopper kernels") != std::string::npos);
    }
    set_kernel_paths(KernelPaths::automatic);
  }
}
