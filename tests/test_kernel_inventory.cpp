// DFLASH_KERNEL_INVENTORY (tests/main.cpp): the test binary lists the kernels a run launched, for
// scripts/gpu-test.sh's sanitizer coverage; refused, naming the variable, where it cannot trace kernels.
// Suites "kernel-inventory" (CPU host) and "gpu-misc".
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace {

struct ChildRun {
  int exit_code = -1;
  std::string output;
};

// This binary again, with DFLASH_KERNEL_INVENTORY=prefix, on the given test case.
ChildRun run_with_inventory(const std::string& prefix, const std::string& test_case) {
  const dflash::test::CommandOutput o = dflash::test::run_command("env DFLASH_KERNEL_INVENTORY='" + prefix + "' " +
                                                                  dflash::test::self_binary() + " --test-case='" +
                                                                  test_case + "'");
  return {dflash::test::exit_code(o), o.text};
}

bool gpu_visible() {
#ifdef DFLASH_CUDA
  return dflash::cuda_backend::device_count() > 0;
#else
  return false;
#endif
}

std::filesystem::path fresh_dir(const char* name) {
  const auto dir = std::filesystem::temp_directory_path() / (std::string(name) + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_SUITE("kernel-inventory") {
  TEST_CASE("DFLASH_KERNEL_INVENTORY where no kernel can be traced: refused with exit 2, naming the variable") {
    if (gpu_visible()) return;  // the GPU case below checks the list instead
    const auto dir = fresh_dir("dflash-inventory-refused");
    const ChildRun r = run_with_inventory((dir / "inv").string(), "no such test case");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("DFLASH_KERNEL_INVENTORY=" + (dir / "inv").string() + ": ") != std::string::npos);
    CHECK(std::filesystem::is_empty(dir));  // nothing written
    std::filesystem::remove_all(dir);
  }
}

#ifdef DFLASH_CUDA
TEST_SUITE("gpu-misc") {
  TEST_CASE("DFLASH_KERNEL_INVENTORY lists the kernels a run launched, demangled, each once") {
    if (!gpu_visible()) FAIL("no CUDA device visible: the gpu suites run only on a GPU host");
    const auto dir = fresh_dir("dflash-inventory");
    const ChildRun r = run_with_inventory((dir / "inv").string(), "accumulate and fill*");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::vector<std::string> names;
    for (const auto& f : std::filesystem::directory_iterator(dir)) {
      CHECK(f.path().filename().string().rfind("inv.", 0) == 0);  // inv.<pid>
      std::ifstream in(f.path());
      for (std::string line; std::getline(in, line);) names.push_back(line);
    }
    REQUIRE(!names.empty());
    bool accumulate = false, fill = false;
    for (size_t i = 0; i < names.size(); ++i) {
      if (i > 0) CHECK(names[i - 1] < names[i]);  // sorted, each once
      accumulate |= names[i].find("dflash::kernels::cuda::") != std::string::npos &&
                    names[i].find("accumulate") != std::string::npos;
      fill |= names[i].find("dflash::kernels::cuda::") != std::string::npos && names[i].find("fill") != std::string::npos;
    }
    CHECK(accumulate);
    CHECK(fill);
    std::filesystem::remove_all(dir);
  }
}
#endif
