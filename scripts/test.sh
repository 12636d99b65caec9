#!/usr/bin/env bash
# Checks the layer order (scripts/check-layers.sh, and its self-test), then sets up, builds from
# nothing if needed (with DFLASH_WERROR: a compiler warning in our code fails the build; the output
# in build/build.log), and runs the whole CPU test suite, the Python tools' tests (python/tests) (GPU
# suites "gpu-*" run on a GPU host through scripts/gpu-check.sh), the control-flow test of
# scripts/gpu2-check.sh and the self-tests of scripts/racecheck-foreign.sh and of the sanitizer
# coverage tools. With DFLASH_MUTANTS=1 (as CI runs it), the mutation probes (scripts/mutants.sh)
# follow once the suites pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/check-layers.sh --self-test
bash scripts/check-layers.sh
bash scripts/build.sh -DDFLASH_WERROR=ON
./build/dflash-tests --test-suite-exclude='gpu*' "$@"
bash scripts/test-python.sh  # the Python tools (python/: dflash-data), offline
bash scripts/test-gpu2-check.sh  # the multi-GPU check script's control flow, with a stand-in trainer
bash scripts/test-racecheck-foreign.sh  # gpu-check racecheck-ce's judge of racecheck logs
bash scripts/test-sanitizer-coverage.sh  # gpu-check's sanitizer coverage: the stand-in tool and the comparison
if [ "${DFLASH_MUTANTS:-0}" = 1 ]; then bash scripts/mutants.sh; fi
