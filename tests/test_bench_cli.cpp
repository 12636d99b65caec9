// dflash-bench multi's refusals, before it touches a GPU: an unknown argument, no timed steps, and
// --baseline in a process started by torchrun (one process cannot time one GPU for the others).
#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/test_util.h"

namespace {

struct Output {
  int status = -1;
  std::string text;
};

// Runs `env ENV dflash-bench multi ARGS` (the binary beside this test binary).
Output bench_multi(const std::string& env, const std::string& args) {
  const std::string bench = (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "dflash-bench").string();
  const std::string cmd = "env " + env + " " + bench + " multi " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE_MESSAGE(p, "cannot run " << cmd);
  Output o;
  char buf[1024];
  while (size_t n = fread(buf, 1, sizeof buf, p)) o.text.append(buf, n);
  o.status = pclose(p);
  return o;
}

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
}
