#!/usr/bin/env bash
# Fills the git-ignored folder that the GPU machine needs (it has no toml++ or nlohmann package):
# .deps/include from this machine's Debian packages. The golden data travel in tests/golden.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p .deps/include
rm -rf .deps/include/toml++ .deps/include/nlohmann
cp -r /usr/include/toml++ /usr/include/nlohmann .deps/include/
echo "ready: carry .deps"
