#!/usr/bin/env bash
# Runs z-lab's published DFlash reference (the `dflash` 0.1.0 package from the package registry, with
# the torch and transformers it pins) on the golden drafters and writes what it decodes into
# tests/golden/dflash-zlab/ (tests/golden/dflash-zlab/README.md describes the files). The package
# lives in a scratch virtual environment, .anchors/zlab-venv (git-ignored), never in .venv.
# Usage: scripts/anchors/zlab-reference.sh [--check]   (--check: compare with the files, write nothing)
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=--write
if [ "${1:-}" = "--check" ]; then mode=--check; fi

venv=.anchors/zlab-venv
stamp=$venv/.dflash-zlab-0.1.0
if [ ! -f "$stamp" ]; then
  python=$(command -v python3 || true)
  [ -n "$python" ] || { echo "zlab-reference: python3 (3.10 or newer) is needed" >&2; exit 1; }
  mkdir -p .anchors
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  # dflash[local] pins torch and transformers for Linux; on a machine without a GPU the registry's
  # torch still brings its CUDA libraries, which stay unused.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "dflash[local]==0.1.0" safetensors
  touch "$stamp"
fi

export HF_HUB_OFFLINE=1  # every model is a local folder; the hub is never asked
py="$venv/bin/python"
ref=scripts/anchors/zlab_reference.py
out=tests/golden/dflash-zlab
# (a) the golden spec case, in float64 (its README: every argmax margin is at least 2e-3).
"$py" "$ref" $mode --name spec --dtype float64 --max-new-tokens 40 \
  --target tests/golden/dflash-tiny/target-qwen3 --drafter tests/golden/dflash-spec/drafter \
  --prompts tests/golden/dflash-spec/prompts.jsonl --out "$out/spec_case.json" \
  --expect-produced tests/golden/dflash-spec/expected_zlab_0_1.json
# (b) a drafter trained by this project against the same target and exported by `dflash-train export`.
"$py" "$ref" $mode --name trained --dtype float64 --max-new-tokens 40 \
  --target tests/golden/dflash-tiny/target-qwen3 --drafter "$out/drafter" \
  --prompts "$out/prompts.jsonl" --out "$out/trained_case.json"
# (c) the same with stop ids: three prompts stop at the prefill's token, others inside a round.
"$py" "$ref" $mode --name trained-stop --dtype float64 --max-new-tokens 40 --stop-token-ids 3,24,48,174 \
  --target tests/golden/dflash-tiny/target-qwen3 --drafter "$out/drafter" \
  --prompts "$out/prompts.jsonl" --out "$out/trained_stop_case.json"
