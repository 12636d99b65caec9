// The test binary's entry point (doctest). GPU suites are named "gpu-*"; the CPU run excludes them.
// DFLASH_KERNEL_INVENTORY=PREFIX (CUDA builds with CUPTI) writes the names of every kernel the run
// launched to PREFIX.<pid>, one a line: gpu-test.sh's sanitizer coverage compares them.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#ifdef DFLASH_CUDA
#include "runtime/cuda/cupti_profiler.h"
#endif

int main(int argc, char** argv) {
  const char* inventory = std::getenv("DFLASH_KERNEL_INVENTORY");
  if (inventory && *inventory) {
#ifdef DFLASH_CUDA
    try {  // refused without CUPTI or a GPU, naming why
      dflash::cupti_inventory_start();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "DFLASH_KERNEL_INVENTORY=%s: %s\n", inventory, e.what());
      return 2;
    }
#else
    std::fprintf(stderr, "DFLASH_KERNEL_INVENTORY=%s: this build has no CUDA backend; unset it\n", inventory);
    return 2;
#endif
  }
  doctest::Context context(argc, argv);
  const int rc = context.run();
#ifdef DFLASH_CUDA
  if (inventory && *inventory) {
    const std::string path = std::string(inventory) + "." + std::to_string(getpid());
    std::vector<std::string> names;
    try {
      names = dflash::cupti_inventory_stop();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "DFLASH_KERNEL_INVENTORY=%s: %s\n", inventory, e.what());
      return rc ? rc : 2;
    }
    std::ofstream out(path);
    for (const std::string& name : names) out << name << '\n';
    if (!out) {
      std::fprintf(stderr, "DFLASH_KERNEL_INVENTORY: could not write %s\n", path.c_str());
      return rc ? rc : 2;
    }
  }
#endif
  return rc;
}
