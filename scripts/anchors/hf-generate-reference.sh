#!/usr/bin/env bash
# Runs Hugging Face transformers' greedy generate on the tiny target (configs/tiny.toml's
# [target.synthetic], written by build/dflash-train) and writes the golden outputs that
# `dflash-train generate` must reproduce into tests/golden/generate-hf/ (its README describes the
# files). torch and transformers live in a scratch virtual environment, .anchors/hf-venv
# (git-ignored), never in .venv.
# Usage: scripts/anchors/hf-generate-reference.sh [--check]   (--check: compare with the files, write nothing)
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=--write
if [ "${1:-}" = "--check" ]; then mode=--check; fi
[ -x build/dflash-train ] || { echo "hf-generate-reference: build/dflash-train is missing; run scripts/build.sh" >&2; exit 1; }

venv=.anchors/hf-venv
stamp=$venv/.torch-2.13.0-transformers-5.25.0
if [ ! -f "$stamp" ]; then
  python=$(command -v python3 || true)
  [ -n "$python" ] || { echo "hf-generate-reference: python3 (3.10 or newer) is needed" >&2; exit 1; }
  mkdir -p .anchors
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check torch==2.13.0 transformers==5.25.0 safetensors==0.8.0
  touch "$stamp"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The target: tiny-target.toml's [target.synthetic] is configs/tiny.toml's (the same weights).
build/dflash-train prepare --config configs/walkthrough/tiny-target.toml --job.dump_folder="$tmp/check" \
  --target.path="$tmp/target" --data.train="$tmp/check/continuations.jsonl" >/dev/null

export HF_HUB_OFFLINE=1  # the target is a local folder; the hub is never asked
py="$venv/bin/python"
ref=scripts/anchors/hf_generate_reference.py
label="configs/tiny.toml [target.synthetic] (written by dflash-train)"
out=tests/golden/generate-hf
# (a) every prompt runs to max_new_tokens.
"$py" "$ref" $mode --target "$tmp/target" --target-label "$label" --prompts "$out/prompts.jsonl" --max-new-tokens 24 --out "$out/greedy.json"
# (b) stop ids: two prompts stop at their first new token, five inside the output, three run to the end.
"$py" "$ref" $mode --target "$tmp/target" --target-label "$label" --prompts "$out/prompts.jsonl" --max-new-tokens 24 \
  --stop-token-ids 454,258,99,192 --out "$out/greedy_stop.json"
