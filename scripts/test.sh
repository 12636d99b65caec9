#!/usr/bin/env bash
# Checks the layer order (scripts/check-layers.sh), the environment variables the sources read
# (scripts/check-getenv.sh) and that the tracked files speak of the product
# (scripts/check-product-words.sh), each with its self-test; then sets up, builds from nothing if
# needed (one progress line; the whole output in build/build.log, which must hold no compiler
# warning), checks the choice of the GPUs the build is for (scripts/test-cuda-archs.sh), and runs
# the whole CPU test suite, a tiny run killed and resumed 20 times
# (scripts/test-kill-resume.sh), the Python tools' tests (python/tests) (GPU suites "gpu-*" run on a
# GPU host through scripts/gpu-test.sh), the control-flow test of scripts/gpu2-check.sh and the
# self-tests of scripts/racecheck-foreign.sh, of the sanitizer coverage tools and of gpu-test.sh and
# gpu-bench.sh. Last, on a tree without uncommitted changes and without arguments, the mutation probes
# (scripts/mutants.sh --in-place --rotate) for what is left of 30 minutes since it began (at least 5).
# Arguments go to dflash-tests (doctest filters) and skip the mutation probes. CI (.ci/run) runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
bash scripts/check-layers.sh --self-test
bash scripts/check-layers.sh
bash scripts/check-getenv.sh --self-test && bash scripts/check-getenv.sh  # only docs/config.md's variables
bash scripts/check-product-words.sh --self-test && bash scripts/check-product-words.sh
bash scripts/build.sh
# A compiler warning in what this build compiled fails the tests (third-party headers are silenced at
# their source); the same flags as scripts/train.sh's build, so neither rebuilds after the other.
if grep -qE '(^|[^A-Za-z_])warning( #[0-9]+|:)' build/build.log; then
  grep -E '(^|[^A-Za-z_])warning( #[0-9]+|:)' build/build.log | head -20 >&2
  echo "test: the build printed compiler warnings (above; all of them in build/build.log); fix them in our code" >&2
  exit 1
fi
bash scripts/test-cuda-archs.sh  # scripts/cuda-archs.sh and CMake's refusal of a bad DFLASH_CUDA_ARCHS
./build/dflash-tests --test-suite-exclude='gpu*' "$@"
bash scripts/test-kill-resume.sh  # a tiny run SIGKILLed 20 times and resumed: its metrics.jsonl equals an uninterrupted run's
bash scripts/test-python.sh  # the Python tools (python/: dflash-data), offline
bash scripts/test-gpu2-check.sh  # the multi-GPU check script's control flow, with a stand-in trainer
bash scripts/test-racecheck-foreign.sh  # gpu-test.sh racecheck's judge of racecheck logs
bash scripts/test-sanitizer-coverage.sh  # gpu-test.sh coverage: the stand-in tool and the comparison
bash scripts/test-gpu-scripts.sh  # gpu-test.sh's and gpu-bench.sh's control flow, with stand-ins
# The mutation probes plant bugs in this tree and rebuild its build/, restoring every file; so they run
# only when the tracked files equal the last commit (a fresh clone, as CI has), never over a user's edits.
if [ $# -gt 0 ]; then
  echo "test: mutation probes skipped (doctest arguments given); all of them: bash scripts/mutants.sh"
elif ! git diff --quiet HEAD -- 2>/dev/null; then
  echo "test: mutation probes skipped: the tree has uncommitted changes (commit them, or run bash scripts/mutants.sh, which works in a scratch copy)"
else
  left=$((30 * 60 - (SECONDS - start)))
  [ "$left" -ge 300 ] || left=300
  bash scripts/mutants.sh --in-place --rotate --budget-s "$left"
fi
