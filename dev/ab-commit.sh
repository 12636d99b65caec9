#!/usr/bin/env bash
# An experiment's A/B on the GPU host: this tree against a base commit, both built there in one call
# and the same dflash-bench commands run from each, interleaved (base, new, three times), so that the
# few percent by which GPU hosts differ cancel out. Not part of the product (dev/README.md).
#   here:     bash dev/ab-commit.sh prepare BASE        # BASE's versions of the changed sources into
#                                                       # .deps/base, then scripts/gpu-prepare.sh: carry .deps
#   GPU host: bash dev/ab-commit.sh build               # both trees' dflash-bench (run builds them too)
#             bash dev/ab-commit.sh run "ARGS" ...      # each "ARGS" one dflash-bench command line, e.g.
#             bash dev/ab-commit.sh run "step --cuda --model=qwen3-8b --bucket=4096:512 --steps=20"
# The base tree is this one with BASE's sources (kernels runtime graphs model data train apps
# CMakeLists.txt; a source new since BASE is left out); tests, scripts and docs stay this tree's.
set -euo pipefail
cd "$(dirname "$0")/.."
sources=(kernels runtime graphs model data train apps CMakeLists.txt)
case ${1:-} in
  prepare)
    base=${2:?usage: dev/ab-commit.sh prepare BASE}
    rm -rf .deps/base .deps/base-commit .deps/base-new
    mkdir -p .deps/base
    : > .deps/base-new
    git rev-parse "$base" > .deps/base-commit
    for f in $(git diff --name-only "$base" -- "${sources[@]}"); do
      if git cat-file -e "$base:$f" 2>/dev/null; then
        mkdir -p ".deps/base/$(dirname "$f")" && git show "$base:$f" > ".deps/base/$f"
      else
        echo "$f" >> .deps/base-new  # not in BASE: left out of the base tree
      fi
    done
    echo "base $(cat .deps/base-commit): $(find .deps/base -type f | wc -l) files"
    bash scripts/gpu-prepare.sh ;;
  build | run)
    cmd=$1
    shift
    [ "$cmd" = build ] || [ $# -gt 0 ] || { echo "usage: dev/ab-commit.sh run \"ARGS\" ..."; exit 2; }
    [ -d .deps/base ] || { echo "ab-commit: no .deps/base; run dev/ab-commit.sh prepare BASE here first"; exit 1; }
    tree=${TMPDIR:-/tmp}/dflash-base-tree
    if [ ! -f build-base/build.ninja ]; then  # the base tree, once a host
      rm -rf "$tree" && mkdir -p "$tree"
      tar --exclude=./build --exclude=./build-base -cf - . | tar -xf - -C "$tree"
      cp -r .deps/base/. "$tree/"
      while IFS= read -r f; do rm -f "$tree/$f"; done < .deps/base-new
    fi
    archs=$(bash scripts/cuda-archs.sh)
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFLASH_CUDA_ARCHS="$archs" >/dev/null &&
      cmake --build build -j "$(nproc)" --target dflash-bench
    cmake -S "$tree" -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFLASH_CUDA_ARCHS="$archs" >/dev/null &&
      cmake --build build-base -j "$(nproc)" --target dflash-bench
    [ "$cmd" = run ] || exit 0
    echo "base $(cat .deps/base-commit) against $(cat .deps/commit 2>/dev/null || echo 'this tree')"
    for b in build-base build build-base build build-base build; do  # three repeats, interleaved
      for args in "$@"; do
        echo "== $b: dflash-bench $args"
        # shellcheck disable=SC2086
        ./$b/dflash-bench $args
      done
    done ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
