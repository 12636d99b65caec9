#!/usr/bin/env bash
# Sets up, builds, and runs the default training job on this machine (the CPU when no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
./build/dflash-train --config configs/tiny.toml "$@"
