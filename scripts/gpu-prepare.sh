#!/usr/bin/env bash
# Fills the git-ignored folders a GPU host without the Debian packages needs (toml++, nlohmann):
# .deps/include from this machine's Debian packages, .deps/cudnn-frontend (the pinned
# cudnn-frontend headers that scripts/setup.sh fetches) and .deps/commit; and .anchors (the PyTorch
# anchors of ../shared/anchors, for gpu-check.sh's anchors-* steps) when ../shared is beside the
# clone. Run it before copying the tree to a GPU host. The golden data travel in tests/golden.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p .deps/include
rm -rf .deps/include/toml++ .deps/include/nlohmann
cp -r /usr/include/toml++ /usr/include/nlohmann .deps/include/
[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ] ||
  { echo "gpu-prepare: .deps/cudnn-frontend is missing (see scripts/cudnn-frontend.sh's warning)" >&2; exit 1; }
# The commit the GPU run measures (the copy sent there may not carry an up-to-date .git).
git rev-parse HEAD > .deps/commit
# AB_BASE=<commit>: the files of the sources that differ from that commit, as they were there, in
# .deps/base (gpu-check.sh's build-base step builds that tree beside this one, for A/B in one call).
# Tests, scripts and docs stay this tree's, so a base whose sources lack what the new tests call
# does not build: A/B a change whose tests compile against both.
rm -rf .deps/base .deps/base-commit
if [ -n "${AB_BASE:-}" ]; then
  mkdir -p .deps/base
  git rev-parse "$AB_BASE" > .deps/base-commit
  for f in $(git diff --name-only "$AB_BASE" -- kernels runtime graphs model data train apps CMakeLists.txt); do
    if git cat-file -e "$AB_BASE:$f" 2>/dev/null; then
      mkdir -p ".deps/base/$(dirname "$f")" && git show "$AB_BASE:$f" > ".deps/base/$f"
    else
      echo "gpu-prepare: $f is new since $AB_BASE; build-base keeps this tree's copy (remove it there by hand if it matters)" >&2
    fi
  done
  echo "base $(cat .deps/base-commit): $(find .deps/base -type f | wc -l) files"
fi
if [ -d ../shared/anchors ]; then
  rm -rf .anchors && mkdir -p .anchors && cp ../shared/anchors/*.py .anchors/
  echo "ready: carry .deps and .anchors (commit $(cat .deps/commit))"
else
  echo "ready: carry .deps (commit $(cat .deps/commit)); no ../shared/anchors, so the anchors-* steps cannot run"
fi
