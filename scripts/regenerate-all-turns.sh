#!/usr/bin/env bash
# Regenerates every assistant turn of chat conversations with the target, turn by turn
# (dflash-data prepare --generate-prompts all, docs/USER_GUIDE.md "Regenerating responses with the
# target"): round k prepares the prompts of each conversation's k-th assistant turn, built from the
# target's own answers to turns 1..k-1, and `dflash-train generate` answers them; the rounds end
# when no conversation has a turn left. Then the training data are built from every round's
# records. Rerunning the same command resumes: each round's generate skips what it already wrote.
# Usage: scripts/regenerate-all-turns.sh CONFIG INPUT WORKDIR OUT.jsonl [prepare options] [-- generate options]
#   e.g. scripts/regenerate-all-turns.sh my.toml chats.jsonl runs/regen data/train.jsonl --max-length 4096 \
#        -- --max-new-tokens 2048 --batch 64
set -euo pipefail
[ $# -ge 4 ] || { sed -n '9,11p' "$0" >&2; exit 2; }
config=$1 input=$2 work=$3 out=$4
shift 4
prepare_opts=() generate_opts=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do prepare_opts+=("$1"); shift; done
[ $# -gt 0 ] && shift
generate_opts=("$@")
root=$(cd "$(dirname "$0")/.." && pwd)
data=$root/.venv/bin/dflash-data
train=$root/build/dflash-train
[ -x "$data" ] || { echo "regenerate-all-turns: $data is missing; run scripts/setup-python.sh" >&2; exit 1; }
[ -x "$train" ] || { echo "regenerate-all-turns: $train is missing; run scripts/build.sh" >&2; exit 1; }
mkdir -p "$work"
answers=()
for ((k = 1; ; k++)); do
  prompts=$work/turn-$k.prompts.jsonl
  "$data" prepare --config "$config" --input "$input" --generate-prompts all "${answers[@]}" \
    --output "$prompts" "${prepare_opts[@]}"
  [ -s "$prompts" ] || break  # every conversation has all its turns answered
  "$train" generate --config "$config" --prompts "$prompts" --output "$work/turn-$k.jsonl" "${generate_opts[@]}"
  answers+=(--answers "$work/turn-$k.jsonl")
done
generated=()
for ((j = 1; j < k; j++)); do generated+=(--generated "$work/turn-$j.jsonl"); done
[ ${#generated[@]} -gt 0 ] || { echo "regenerate-all-turns: no conversation gave a prompt" >&2; exit 1; }
"$data" prepare --config "$config" --output "$out" "${generated[@]}" "${prepare_opts[@]}"
