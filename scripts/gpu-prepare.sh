#!/usr/bin/env bash
# Fills the git-ignored folders that the GPU machine needs (it has no toml++ or nlohmann package and
# no ../shared): .deps/include from this machine's Debian packages, .golden from ../shared/golden.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p .deps/include .golden
rm -rf .deps/include/toml++ .deps/include/nlohmann .golden/dflash-tiny
cp -r /usr/include/toml++ /usr/include/nlohmann .deps/include/
cp -r ../shared/golden/dflash-tiny .golden/
echo "ready: carry .deps and .golden"
