// The test binary's entry point (doctest). GPU suites are named "gpu-*"; the CPU run excludes them.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
