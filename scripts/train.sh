#!/usr/bin/env bash
# Sets up, builds, and runs the default training job on this machine (the CPU when no GPU), then
# measures the trained drafter's real acceptance length: greedy speculative decoding with the
# target on the eval prompts (`dflash-train spec`, docs/USER_GUIDE.md "Measuring tau and speedup").
# It also draws the training curves into <job.dump_folder>/curves.png (scripts/plot.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
./build/dflash-train --config configs/tiny.toml "$@"
dump=$(sed -n 's/^dump_folder = "\(.*\)"/\1/p' configs/tiny.toml)
for arg in "$@"; do
  case "$arg" in --job.dump_folder=*) dump="${arg#*=}" ;; esac
done
checkpoint=$(ls -d "$dump"/checkpoints/step-* | sort -V | tail -1)
./build/dflash-train spec --config configs/tiny.toml --drafter "$checkpoint" "$@"
python3 scripts/plot.py --config configs/tiny.toml "$@"
