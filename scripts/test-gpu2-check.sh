#!/usr/bin/env bash
# Checks the control flow of scripts/gpu2-check.sh on the CPU, with tests/fakes/dflash-train.sh in
# place of the trainer (ranks started by hand, no GPU): what passes must pass (G processes == G
# threads; a killed rank is named by every survivor; SIGTERM stops every rank after one step and
# the run resumes exactly; a kill, then a resume from the last complete checkpoint, equals an
# uninterrupted run), and what is wrong must fail (a resume that drifts, survivors that never
# notice a kill, GPUS below 2). Part of scripts/test.sh; about a minute.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/scripts" "$tmp/build"
cp "$here/scripts/gpu2-check.sh" "$tmp/scripts/"
cp "$here/tests/fakes/dflash-train.sh" "$tmp/build/dflash-train"
chmod +x "$tmp/build/dflash-train"
failures=0

# check NAME WANT_RC PATTERN... -- ENV... -- STEPS...: runs the script, wants its exit status and,
# in its output, each PATTERN (an extended regular expression).
check() {
  local name=$1 want=$2; shift 2
  local patterns=() envs=()
  while [ "$1" != -- ]; do patterns+=("$1"); shift; done; shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local log="$tmp/$name.log"
  (cd "$tmp" && rm -rf w out && timeout 300 env GPU2_NO_TORCHRUN=1 GPU2_WORK="$tmp/w" OUT="$tmp/out" GPU2_KILL_WAIT_S=6 \
     "${envs[@]}" bash scripts/gpu2-check.sh "$@") >"$log" 2>&1
  local rc=$? bad=""
  [ "$rc" = "$want" ] || bad="exit status $rc, wanted $want"
  for p in "${patterns[@]}"; do grep -qE -- "$p" "$log" || bad="$bad; no line matches '$p'"; done
  if [ -n "$bad" ]; then
    echo "test-gpu2-check: FAIL $name: ${bad#; }"; sed 's/^/  | /' "$log" | tail -n 25; failures=$((failures + 1))
  else echo "test-gpu2-check: ok   $name"; fi
}

check three-ranks-pass 0 \
  '^procs +PASS +== threads over 20 steps: same' '^overlap +PASS' '^sharded +PASS' '^both +PASS' \
  '^kill9 +PASS +all 2 other rank\(s\) exited within [0-9]+ s naming rank 2' \
  '^sigterm +PASS +all 3 stopped after step [0-9]+' \
  '^kill-resume +PASS' '^resume +PASS +resumed from step (10|15) \(last complete checkpoint\)' \
  -- GPUS=3 -- procs kill9 sigterm kill-resume
check resume-drift-fails 1 '^resume +FAIL .*differ at' -- GPUS=2 FAKE_RESUME_DRIFT=1 -- kill-resume
check unnoticed-kill-fails 1 '^kill9 +FAIL .*rank 0 still running after 6 s' -- GPUS=2 FAKE_IGNORE_DEATH=1 -- kill9
check one-gpu-refused 2 'GPUS=1 must be a number >= 2' -- GPUS=1 -- topo
[ $failures = 0 ] || { echo "test-gpu2-check: $failures failed"; exit 1; }
echo "test-gpu2-check: all passed"
