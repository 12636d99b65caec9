#!/usr/bin/env bash
# Fills the git-ignored folder that the GPU machine needs (it has no toml++ or nlohmann package):
# .deps/include from this machine's Debian packages, and .deps/commit. Run it before every GPU
# call. The golden data travel in tests/golden.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p .deps/include
rm -rf .deps/include/toml++ .deps/include/nlohmann
cp -r /usr/include/toml++ /usr/include/nlohmann .deps/include/
# The commit the GPU run measures (the copy sent there may not carry an up-to-date .git).
git rev-parse HEAD > .deps/commit
echo "ready: carry .deps (commit $(cat .deps/commit))"
