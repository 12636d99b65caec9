#!/usr/bin/env bash
# Checks the layer order (scripts/check-layers.sh, and its self-test), then sets up, builds from
# nothing if needed, and runs the whole CPU test suite (GPU suites "gpu-*" run on a GPU host
# through scripts/gpu-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/check-layers.sh --self-test
bash scripts/check-layers.sh
bash scripts/build.sh
./build/dflash-tests --test-suite-exclude='gpu*' "$@"
