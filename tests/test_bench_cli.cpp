// dflash-bench's refusals, before it touches a GPU: multi's unknown argument, no timed steps, and
// --baseline in a process started by torchrun (one process cannot time one GPU for the others); an
// unknown model, argument or command, GPU-only commands without --cuda, and --cuda without a GPU.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/test_util.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace {

using Output = dflash::test::CommandOutput;

// Runs `env ENV dflash-bench ARGS` (the binary beside this test binary).
Output bench(const std::string& env, const std::string& args) {
  return dflash::test::run_command("env " + env + " " + dflash::test::sibling_binary("dflash-bench") + " " + args);
}
Output bench_multi(const std::string& env, const std::string& args) { return bench(env, "multi " + args); }

const char* kTorchrun = "RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999";

}  // namespace

TEST_SUITE("bad-input") {
  TEST_CASE("dflash-bench multi refuses --baseline under torchrun, no timed steps and unknown arguments") {
    Output o = bench_multi(kTorchrun, "--baseline --model=qwen3-8b");
    INFO(o.text);
    CHECK(o.status != 0);
    CHECK(o.text.find("under torchrun: --baseline times one GPU in this process") != std::string::npos);
    CHECK(o.text.find("fix: run the one-GPU figure as its own command") != std::string::npos);

    o = bench_multi("", "--steps=0");
    INFO(o.text);
    CHECK(o.status != 0);
    CHECK(o.text.find("--steps=0 must be at least 1") != std::string::npos);

    o = bench_multi("", "--gpu=2");
    INFO(o.text);
    CHECK(o.status != 0);
    CHECK(o.text.find("unknown argument '--gpu=2'") != std::string::npos);
  }
  TEST_CASE("dflash-bench refuses an unknown model, argument or command and GPU-only work without a GPU, naming the fix") {
    struct Case {
      std::string args, expect;
    };
    const std::vector<Case> cases = {
        {"target --model=llama", "dflash-bench target: --model=llama; only qwen3-8b"},
        {"target --model=qwen3-8b", "Qwen3-8B dims need a GPU (16 GB of bf16 weights); add --cuda"},
        {"step --model=foo", "--model=foo: use small or qwen3-8b"},
        {"spec --model=foo", "--model=foo: use qwen3-8b or small"},
        {"step --model=small --bogus", "unknown argument '--bogus'"},
        {"nosuch", "usage: dflash-bench"},
    };
    for (const Case& c : cases) {
      const Output o = bench("", c.args);
      INFO(c.args << ": " << o.text);
      CHECK(o.status != 0);
      CHECK(o.text.find(c.expect) != std::string::npos);
    }
    // --cuda on a machine without a GPU (CI): the missing device is named, not the CUDA runtime's error.
#ifdef DFLASH_CUDA
    if (dflash::cuda_backend::device_count() == 0) {
      const Output o = bench("", "step --cuda --model=small --steps=1");
      INFO(o.text);
      CHECK(o.status != 0);
      CHECK(o.text.find("Context on cuda:0: no CUDA device is visible (no GPU, or no driver)") != std::string::npos);
    }
#endif
  }
}
