#!/usr/bin/env bash
# Kills a tiny CPU training run with SIGKILL at N random moments in a row (drawn from a printed
# seed), resuming it after each, lets it finish, and checks that its metrics.jsonl parses, holds
# every (record kind, step) exactly once and equals an uninterrupted run's field by field except the
# timing fields (scripts/compare-metrics.py), and that its final parameters and Adam moments equal
# the uninterrupted run's bit for bit. Uses ./build/dflash-train as built. Part of scripts/test.sh;
# 20 to 40 s on 2 cores.
#
#   scripts/test-kill-resume.sh [--seed S] [--kills N] [--keep]   (defaults: a seed from the clock, 20)
#
# The moments: the uninterrupted reference run takes T ms, of which a rerun of the finished run
# (startup, resume, exit) takes S. Each of the N moments is drawn uniformly from [0, T): one below S
# is a startup moment, and the run restarted then is killed that long after its start (loading,
# recording programs, cutting metrics.jsonl back); one at or above S is a moment of the training,
# and the restarted run is killed when, at the reference's pace, it reaches that moment (S + the
# moment - the reference's time of the step it resumed at). Training moments are taken in time
# order, so the kills sweep the run from its first step to its last checkpoint, evals and exit.
# Replaying a seed repeats the moments as fractions of T (which varies a little from run to run),
# not the exact instructions the kills land on.
set -uo pipefail
cd "$(dirname "$0")/.."

seed="" kills=20 keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --seed) seed=${2:?--seed needs a value}; shift 2 ;;
    --seed=*) seed=${1#--seed=}; shift ;;
    --kills) kills=${2:?--kills needs a value}; shift 2 ;;
    --kills=*) kills=${1#--kills=}; shift ;;
    --keep) keep=1; shift ;;
    *) echo "usage: scripts/test-kill-resume.sh [--seed S] [--kills N] [--keep]" >&2; exit 2 ;;
  esac
done
[ -n "$seed" ] || seed=$(( $(date +%s%N) / 1000 % 1000000 ))
[[ $seed =~ ^[0-9]+$ && $kills =~ ^[0-9]+$ ]] || { echo "test-kill-resume: --seed and --kills take integers" >&2; exit 2; }
echo "test-kill-resume: seed $seed, $kills kills (replay: scripts/test-kill-resume.sh --seed $seed --kills $kills)"

bin=./build/dflash-train
[ -x "$bin" ] || { echo "test-kill-resume: $bin is missing; build first (scripts/build.sh)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kill-resume.XXXXXX")
passed=0
cleanup() {
  if [ "$passed" = 1 ] && [ "$keep" = 0 ]; then rm -rf "$tmp"
  else echo "test-kill-resume: the runs and their logs are in $tmp"; fi
}
trap cleanup EXIT
fail() {
  echo "test-kill-resume: FAIL (seed $seed): $*"
  echo "test-kill-resume: replay with scripts/test-kill-resume.sh --seed $seed --kills $kills"
  exit 1
}
now_ms() { date +%s%3N; }

# The job: every record kind at several steps. Checkpoints every 3 steps and log lines every 4
# (1, 4, 8, ..., 44, 45), so most checkpoints fall inside a log interval; evals every 10 and spec_tau
# every 15, so that step 30 has a checkpoint, an eval and a spec record, and 15 a checkpoint and a
# spec record. 128 training sequences: the data order passes an epoch boundary.
steps=45
job=(--config configs/tiny.toml
  --target.path="$tmp/target" --data.train="$tmp/data/train.jsonl" --data.eval="$tmp/data/eval.jsonl"
  --eval.spec_prompts="$tmp/data/eval.jsonl" --data.synthetic.train_sequences=128 --data.synthetic.eval_sequences=8
  --training.steps=$steps --metrics.log_every=4 --checkpoint.every=3 --checkpoint.keep=2
  --training.eval_every=10 --eval.spec_every=15 --metrics.progress=false)

# The target and the data, shared by both runs (generated once, outside the timed runs).
"$bin" prepare "${job[@]}" --job.dump_folder="$tmp/prepare" >"$tmp/prepare.log" 2>&1 ||
  fail "generating the target and data failed: $(tail -n 5 "$tmp/prepare.log")"

ref=$tmp/reference
# The reference's output, each line prefixed with the ms since its start: its timeline.
t0=$(now_ms)
timeout 600 "$bin" "${job[@]}" --job.dump_folder="$ref" 2>&1 |
  while IFS= read -r line; do echo "$(( $(now_ms) - t0 )) $line"; done >"$ref.log" ||
  fail "the reference run failed: $(tail -n 5 "$ref.log")"
T=$(( $(now_ms) - t0 ))
cp "$ref/metrics.jsonl" "$tmp/reference.metrics.jsonl"
t0=$(now_ms)
timeout 600 "$bin" "${job[@]}" --job.dump_folder="$ref" >"$ref.rerun.log" 2>&1 ||
  fail "rerunning the finished reference run failed (exit $?): $(tail -n 5 "$ref.rerun.log")"
S=$(( $(now_ms) - t0 ))
cmp -s "$ref/metrics.jsonl" "$tmp/reference.metrics.jsonl" ||
  fail "rerunning the finished reference run changed its metrics.jsonl (see $tmp/reference.metrics.jsonl and $ref/metrics.jsonl)"
[ "$S" -lt "$T" ] || S=$(( T / 2 ))
echo "test-kill-resume: the reference run took $T ms ($(wc -l <"$ref/metrics.jsonl") records), a rerun of it $S ms"

# Line 1: the reference's time at the end of each step 0..steps (interpolated between its log
# lines; step 0's is S, so that a run restarted from nothing replays the reference's own startup).
# Line 1+i: "startup MS" or "train MS", the i-th moment (training moments in time order).
plan=$(python3 - "$seed" "$kills" "$T" "$S" "$steps" "$ref.log" <<'EOF'
import random, re, sys
seed, kills, T, S, steps = (int(a) for a in sys.argv[1:6])
points = [(0, S)]  # (step, ms): the end of each logged step
for line in open(sys.argv[6]):
    m = re.match(r"(\d+) step +(\d+)/", line)
    if m and int(m[2]) > points[-1][0]:
        points.append((int(m[2]), max(int(m[1]), points[-1][1])))
if points[-1][0] != steps:
    sys.exit(f"the reference's output has no log line for step {steps}")
ends = [S]
for r in range(1, steps + 1):
    (a, ta), (b, tb) = next((p, q) for p, q in zip(points, points[1:]) if p[0] < r <= q[0])
    ends.append(ta + (tb - ta) * (r - a) // (b - a))
print(*ends)
rng = random.Random(seed)
draws = [rng.uniform(0, T) for _ in range(kills)]
train = iter(sorted(m for m in draws if m >= S))
for m in draws:
    print("startup %d" % m if m < S else "train %d" % next(train))
EOF
) || fail "drawing the moments failed"
read -r -a step_end <<<"$(head -n 1 <<<"$plan")"
moments=$(tail -n +2 <<<"$plan")

run=$tmp/killed
killed=0 finished=0 i=0
while read -r kind moment; do
  [ -n "$kind" ] || continue  # --kills 0
  i=$((i + 1))
  at=0
  for d in "$run"/checkpoints/step-*; do
    [ -d "$d" ] && n=${d##*step-} && [[ $n =~ ^[0-9]+$ ]] && [ "$n" -gt "$at" ] && at=$n
  done
  if [ "$kind" = startup ]; then delay=$moment
  else delay=$(( S + moment - step_end[at] )); [ "$delay" -ge "$S" ] || delay=$S; fi
  log=$run.$i.log
  "$bin" "${job[@]}" --job.dump_folder="$run" </dev/null >"$log" 2>&1 &
  pid=$!
  sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null  # no "Killed" line from the shell
  rc=$?
  case $rc in
    137) killed=$((killed + 1)); what="killed" ;;
    0) finished=$((finished + 1)); what="finished before the kill" ;;
    *) fail "restart $i (after $((i - 1)) kill(s)) exited with status $rc instead of being killed: $(tail -n 5 "$log")" ;;
  esac
  last=$(tail -n 1 "$log")
  printf 'test-kill-resume: kill %2d/%d: %-7s moment %5d ms, from step %2d: SIGKILL after %5d ms, %s; last line: %.90s\n' \
    "$i" "$kills" "$kind" "$moment" "$at" "$delay" "$what" "${last:-(none)}"
done <<<"$moments"

timeout 600 "$bin" "${job[@]}" --job.dump_folder="$run" >"$run.final.log" 2>&1 ||
  fail "the last restart, left to finish, failed (exit $?): $(tail -n 5 "$run.final.log")"
echo "test-kill-resume: $killed kill(s) landed, $finished restart(s) finished first; the last restart finished"
# What the restarts found: the kills that interrupted a checkpoint write or a record's write.
logs=("$run".*.log "$run.final.log")
echo "test-kill-resume: restarts that cut metrics.jsonl back: $(grep -l 'metrics.jsonl: removed' "${logs[@]}" 2>/dev/null | wc -l)," \
  "found a torn line: $(grep -l 'and a torn line' "${logs[@]}" 2>/dev/null | wc -l)," \
  "checkpoint saves or prunes a kill interrupted: $(grep -oh "ignoring '[^']*': a staging directory" "${logs[@]}" 2>/dev/null | sort -u | wc -l)"

python3 scripts/compare-metrics.py "$tmp/reference.metrics.jsonl" "$run/metrics.jsonl" ||
  fail "the killed run's metrics.jsonl differs from the uninterrupted run's (above)"
for f in params.safetensors optimizer.safetensors; do
  cmp -s "$ref/checkpoints/step-$steps/$f" "$run/checkpoints/step-$steps/$f" ||
    fail "the final checkpoint's $f differs from the uninterrupted run's (checkpoints/step-$steps)"
done
python3 scripts/compare-metrics.py --self-test "$tmp/reference.metrics.jsonl" ||
  fail "the comparison's self-test failed (above)"
passed=1
echo "test-kill-resume: PASS: $(wc -l <"$run/metrics.jsonl") records equal the uninterrupted run's after $killed SIGKILLs"
