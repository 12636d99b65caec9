#!/usr/bin/env bash
# Fills the git-ignored .deps folder with what a GPU host without the Debian packages lacks, before
# scripts/gpu-test.sh or scripts/gpu-bench.sh runs there (copy .deps with the tree): .deps/include
# (toml++ and nlohmann, header-only, from this machine's Debian packages), .deps/cudnn-frontend (the
# pinned cudnn-frontend headers that scripts/setup.sh fetches) and .deps/commit (the commit the run
# measures: the copy sent there may not carry an up-to-date .git). The golden data travel in
# tests/golden, the PyTorch anchors in scripts/anchors.
# Usage: bash scripts/gpu-prepare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p .deps/include
rm -rf .deps/include/toml++ .deps/include/nlohmann
cp -r /usr/include/toml++ /usr/include/nlohmann .deps/include/
[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ] ||
  { echo "gpu-prepare: .deps/cudnn-frontend is missing (see scripts/cudnn-frontend.sh's warning)" >&2; exit 1; }
git rev-parse HEAD > .deps/commit
echo "ready: carry .deps (commit $(cat .deps/commit))"
