#!/usr/bin/env bash
# A stand-in for build/dflash-train that scripts/test-gpu2-check.sh puts under scripts/gpu2-check.sh
# on the CPU: it keeps the behaviour that script checks, not the training. Ranks (RANK and
# WORLD_SIZE set, as by hand or torchrun) or one process (threads) log the same steps; ranks move
# in lockstep through files in the dump folder (as collectives would); a rank that finds a peer
# gone before finishing exits 1 with one error naming the first rank gone; SIGTERM on any rank stops
# every rank after the same step with one checkpoint; a run resumes from its newest complete
# checkpoint. Every step's figures depend only on the step, so runs compare equal unless
# FAKE_RESUME_DRIFT=1 (a resumed run logs other losses); FAKE_IGNORE_DEATH=1 never notices a peer.
set -u
dump="" steps=20 every=0
for a in "$@"; do
  case $a in
    --job.dump_folder=*) dump=${a#*=} ;;
    --training.steps=*) steps=${a#*=} ;;
    --checkpoint.every=*) every=${a#*=} ;;
  esac
done
[ -n "$dump" ] || { echo "fake dflash-train: --job.dump_folder is required"; exit 2; }
rank=${RANK:-0} world=${WORLD_SIZE:-1}
mkdir -p "$dump"
rm -f "$dump/failure" "$dump/stop_at" "$dump/done.$rank" "$dump/at.$rank"
echo $$ >"$dump/pid.$rank"
echo '{"persistent_bytes": 1000}' >"$dump/startup.json"
term=0
trap 'term=1' TERM INT
started() {  # every rank of this run has written its pid (a file left by a killed run names a dead one)
  local r p
  for r in $(seq 0 $((world - 1))); do
    p=$(cat "$dump/pid.$r" 2>/dev/null) && kill -0 "$p" 2>/dev/null || return 1
  done
}
for _ in $(seq 250); do started && break; sleep 0.02; done  # 5 s at most; a rank still missing then is gone
fail() { [ -f "$dump/failure" ] || echo "dflash-train: error: $1" >"$dump/failure"; cat "$dump/failure"; exit 1; }
peers_ok() {  # a peer that is gone without finishing ends this rank
  [ "${FAKE_IGNORE_DEATH:-0}" = 1 ] && return 0
  [ -f "$dump/failure" ] && fail "$(cat "$dump/failure")"
  local r p
  for r in $(seq 0 $((world - 1))); do
    p=$(cat "$dump/pid.$r" 2>/dev/null) || continue
    kill -0 "$p" 2>/dev/null || [ -f "$dump/done.$r" ] || fail "rank $r (pid $p) exited during the run"
  done
}
barrier() {  # every rank has finished step $1
  local r v
  for r in $(seq 0 $((world - 1))); do
    while :; do
      v=$(cat "$dump/at.$r" 2>/dev/null || echo -1)
      [ "$v" -ge "$1" ] && break
      peers_ok
      sleep 0.02
    done
  done
}
checkpoint() { [ "$rank" = 0 ] && mkdir -p "$dump/checkpoints/step-$1" && echo '{}' >"$dump/checkpoints/step-$1/COMPLETE.json"; }
start=0
for d in "$dump"/checkpoints/step-*; do
  [ -f "$d/COMPLETE.json" ] || continue
  s=${d##*step-}
  [ "$s" -gt "$start" ] && start=$s
done
drift=0
[ "${FAKE_RESUME_DRIFT:-0}" = 1 ] && [ "$start" -gt 0 ] && drift=1
for ((k = start + 1; k <= steps; k++)); do
  sleep 0.03
  peers_ok
  loss=$(awk -v k="$k" -v d="$drift" 'BEGIN { printf "%.6f", 1 / k + d / 1000 }')
  [ "$rank" = 0 ] && printf '{"step":%d,"loss":%s,"grad_norm":1.0,"accuracy":0.5,"tau":1.5,"lr":0.001}\n' \
    "$k" "$loss" >>"$dump/metrics.jsonl"
  printf 'step %6d/%d  loss %s\n' "$k" "$steps" "$loss"
  [ "$every" -gt 0 ] && [ $((k % every)) = 0 ] && checkpoint "$k"
  [ $term = 1 ] && [ ! -f "$dump/stop_at" ] && echo "$k" >"$dump/stop_at"
  echo "$k" >"$dump/at.$rank"
  barrier "$k"
  if [ -f "$dump/stop_at" ] && [ "$(cat "$dump/stop_at")" -le "$k" ]; then
    checkpoint "$k"
    [ "$rank" = 0 ] && echo "stopped at step $k (checkpoint written)"
    break
  fi
done
touch "$dump/done.$rank"
