#!/usr/bin/env bash
# Sets up, builds, and runs the default training job on this machine (the CPU when no GPU), then
# draws its training curves into <job.dump_folder>/curves.png (scripts/plot.py) and prints the path.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
./build/dflash-train --config configs/tiny.toml "$@"
python3 scripts/plot.py --config configs/tiny.toml "$@"
