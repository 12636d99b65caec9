#!/usr/bin/env bash
# Sets up, builds from nothing if needed, and runs the whole CPU test suite (GPU suites "gpu-*"
# run on a GPU host through scripts/gpu-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
./build/dflash-tests --test-suite-exclude='gpu*' "$@"
