#!/usr/bin/env bash
# On a host with several GPUs: the multi-GPU checks, with G = $GPUS ranks (default 2; scripts/gpu-test.sh's
# multi-gpu step passes every GPU of the host), each logged to $OUT/gpu2-<step>.log (or ./gpu-out), then a
# summary table. Build first (or scripts/gpu-test.sh build):
#   bash scripts/gpu2-check.sh build
#   bash scripts/gpu2-check.sh            # the default checks below (two GPUs: one 10-minute call)
#   bash scripts/gpu2-check.sh procs kill9 # any subset, in this order
#   GPUS=8 bash scripts/gpu2-check.sh build topo scale         # eight GPUs: ten minutes a line
#   GPUS=8 bash scripts/gpu2-check.sh scale-more procs kill-resume
# Checks: topo (nvidia-smi topo -m), procs (bit for bit over 20 steps: G
# processes under torchrun == G threads in one process; overlap on == off; sharded == unsharded),
# nodes (two torchrun --nnodes=2 invocations, one GPU each, meeting on this host's non-loopback
# address over sockets only: same losses), kill9 (rank G-1 killed by hand: every other rank exits
# within 60 s naming it), sigterm (SIGTERM to rank G-1: all stop after the same step; resuming
# from that checkpoint equals an uninterrupted run), kill-resume (rank G-1 killed mid-run, a
# checkpoint every 5 steps: the others exit within 60 s naming it; resuming all G ranks from the
# last complete checkpoint gives, step for step, the losses of an uninterrupted run), bench
# (qwen3-8b 4096:512 with checkpointing, 1 vs 2 GPUs as threads of one process, with and without
# overlap and sharding), scale (qwen3-8b 4096:512 under torchrun on 1, 2, 4, ... G GPUs, 30 timed
# steps, without and with overlap: tokens/s, scaling efficiency), scale-more (on G GPUs: sharded
# with and without overlap, persistent memory per GPU, and sockets only), tests (the gpu2* doctest
# suites, on 2 GPUs), memcheck (10 steps of the G-GPU job with overlap and sharding under
# compute-sanitizer).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0  # NVLink multicast takes these GPUs out of service
G=${GPUS:-2}
[[ $G =~ ^[0-9]+$ ]] && [ "$G" -ge 2 ] || { echo "gpu2-check: GPUS=$G must be a number >= 2"; exit 2; }
last=$((G - 1))
devices=cuda:$(seq -s, 0 "$last")  # cuda:0,1,...
W=${GPU2_WORK:-/tmp/gpu2-check}
kill_wait_s=${GPU2_KILL_WAIT_S:-90}  # how long kill9 waits for the survivors (they must exit within 60 s)
summary=()
failed=0
note() { summary+=("$(printf '%-10s %-5s %s' "$1" "$2" "$3")"); [ "$2" = FAIL ] && failed=1; return 0; }
log() { echo "$*" | tee -a "$out/gpu2-$cur.log"; }

# torchrun, or python's module; without torch (or with GPU2_NO_TORCHRUN=1), the same variables
# set by hand (said in the summary).
if [ "${GPU2_NO_TORCHRUN:-0}" = 1 ]; then TORCHRUN=()
elif command -v torchrun >/dev/null; then TORCHRUN=(torchrun)
elif python3 -c 'import torch.distributed.run' 2>/dev/null; then TORCHRUN=(python3 -m torch.distributed.run)
else TORCHRUN=(); fi

common=(--config configs/tiny.toml --target.path="$W/target" --data.train="$W/data/train.jsonl" --data.eval= --eval.spec_prompts=
        --data.synthetic.train_sequences=256 --drafter.num_hidden_layers=3 --training.steps=20
        --metrics.log_every=1 --metrics.progress=false --checkpoint.every=0 --runtime.rendezvous_timeout_s=120)

# G processes on this host: torchrun (or by hand with torchrun's variables). runG DUMP PORT ARGS...
runG() {
  local dump=$1 port=$2; shift 2
  rm -rf "$dump"
  if [ ${#TORCHRUN[@]} -gt 0 ]; then
    "${TORCHRUN[@]}" --nnodes=1 --nproc-per-node="$G" --master-addr=127.0.0.1 --master-port="$port" --no-python \
      ./build/dflash-train "${common[@]}" --job.dump_folder="$dump" "$@"
  else
    local pids=()
    for r in $(seq 0 "$last"); do
      RANK=$r WORLD_SIZE=$G LOCAL_RANK=$r LOCAL_WORLD_SIZE=$G MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        ./build/dflash-train "${common[@]}" --job.dump_folder="$dump" "$@" & pids+=($!)
    done
    local rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
  fi
}

# Compares the step records of two metrics.jsonl: "same" (bit for bit) or the largest difference.
compare() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "${3:-20}" <<'EOF'
import json, sys
def steps(p):
    out = {}
    for line in open(p):
        j = json.loads(line)
        if "step" in j and "eval" not in j: out[j["step"]] = j
    return out
a, b, n = steps(sys.argv[1]), steps(sys.argv[2]), int(sys.argv[3])
if len(a) < n or len(b) < n:
    print(f"missing steps: {len(a)} and {len(b)} of {n}"); sys.exit(1)
worst, diff = 0.0, []
for s in range(1, n + 1):
    for k in ("loss", "grad_norm", "accuracy", "tau", "lr"):
        if a[s][k] != b[s][k]:
            diff.append((s, k))
            worst = max(worst, abs(a[s][k] - b[s][k]) / max(abs(a[s][k]), 1e-30))
print("same" if not diff else f"differ at {len(diff)} values (first: step {diff[0][0]} {diff[0][1]}), largest relative {worst:.3g}")
sys.exit(0 if not diff else 2)
EOF
}

# Starts ranks 0..G-1 by hand (not torchrun, which would kill the survivors itself).
start_by_hand() {  # DUMP PORT ARGS...; sets pids (by rank) and pidlast
  local dump=$1 port=$2; shift 2
  pids=()
  for r in $(seq 0 "$last"); do
    RANK=$r WORLD_SIZE=$G LOCAL_RANK=$r LOCAL_WORLD_SIZE=$G MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      ./build/dflash-train "${common[@]}" --job.dump_folder="$dump" "$@" >"$W/hand.$r.log" 2>&1 &
    pids+=($!)
  done
  pidlast=${pids[$last]}
}
wait_all() {  # waits for every rank started by hand; 0 when all exited with status 0
  local rc=0 p
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}
hand_logs() { for r in $(seq 0 "$last"); do cat "$W/hand.$r.log"; done; }
# Kills rank G-1 (-9) once rank 0 logged step $2 of a run started by hand; then every other rank
# must exit, non-zero, within 60 s with an error naming rank G-1. Notes the verdict under $1.
kill_last_rank() {  # NAME STEP
  local name=$1 r p rc alive k dt msg bad=""
  if ! wait_for_step "$W/hand.0.log" "$2"; then
    note "$name" FAIL "training did not reach step $2"; kill -9 "${pids[@]}" 2>/dev/null; return 1
  fi
  kill -9 "$pidlast"; k=$(date +%s%N)
  for _ in $(seq $((kill_wait_s * 10))); do
    alive=0
    for p in "${pids[@]:0:$last}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  dt=$(( ($(date +%s%N) - k) / 1000000000 ))
  for r in $(seq 0 $((last - 1))); do
    p=${pids[$r]}
    if kill -0 "$p" 2>/dev/null; then kill -9 "$p"; bad="$bad rank $r still running after $kill_wait_s s;"; continue; fi
    wait "$p"; rc=$?
    msg=$(grep -m1 "error" "$W/hand.$r.log")
    { [ $rc -ne 0 ] && echo "$msg" | grep -q "rank $last"; } || bad="$bad rank $r: rc $rc, '${msg:0:100}';"
  done
  kill -9 "$pidlast" 2>/dev/null; wait "$pidlast" 2>/dev/null
  msg=$(grep -m1 "error" "$W/hand.0.log")
  echo "$msg" >>"$out/gpu2-$cur.log"
  if [ -z "$bad" ] && [ "$dt" -le 60 ]; then
    note "$name" PASS "all $last other rank(s) exited within $((dt + 1)) s naming rank $last: ${msg:0:100}"
  else note "$name" FAIL "after $dt s:$bad"; return 1; fi
}
# qwen3-8b 4096:512 with checkpointing under torchrun on $1 GPUs (1: one process, no launcher),
# 30 timed steps; more arguments go to dflash-bench multi (--overlap, --shard).
bench_on() {
  local g=$1; shift
  if [ "$g" = 1 ]; then
    timeout 240 ./build/dflash-bench multi --model=qwen3-8b --bucket=4096:512 --steps=30 --gpus=1 "$@"
  else
    timeout 300 "${TORCHRUN[@]}" --nnodes=1 --nproc-per-node="$g" --master-addr=127.0.0.1 --master-port=$((29600 + g)) \
      --no-python ./build/dflash-bench multi --model=qwen3-8b --bucket=4096:512 --steps=30 "$@"
  fi
}
# The BENCH lines of a step's dflash-bench multi rows, against the log's 1-GPU row: the throughput
# ratio from median step times and the efficiency from tokens/s over the
# timed steps; into the log and the summary.
summarize() {  # STEP
  python3 - "$out/gpu2-$1.log" <<'EOF' | tee -a "$out/gpu2-$1.log"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"bench":"multi"')]
one = next((r for r in rows if r["gpus"] == 1), None)
for r in rows:
    ratio = r["gpus"] * one["step_ms"] / r["step_ms"] if one else float("nan")
    eff = r["tokens_per_s"] / (r["gpus"] * one["tokens_per_s"]) if one else float("nan")
    print(f"BENCH gpus={r['gpus']} processes={r['processes']} overlap={r['overlap']} shard={r['shard']} "
          f"step_ms={r['step_ms']:.2f} train_ms={r['train_ms']:.2f} update_ms={r['update_ms']:.2f} "
          f"throughput_vs_1gpu={ratio:.3f} tokens_per_s={r['tokens_per_s']:.0f} efficiency_vs_1gpu={eff:.3f} "
          f"persistent_GiB_per_gpu={r['persistent_bytes_per_gpu']/2**30:.2f}")
EOF
  while read -r line; do note "$1" INFO "${line#BENCH }"; done < <(grep '^BENCH' "$out/gpu2-$1.log")
}
wait_for_step() {  # LOG STEP: until rank 0 logged that step (60 s at most)
  for _ in $(seq 600); do grep -q "^step *$2/" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
# A long run at a constant learning rate, so that any prefix equals a run of that many steps.
long=(--training.steps=1000000 --training.warmup_ratio=0 --training.min_lr_ratio=1.0)

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(topo procs nodes kill9 sigterm bench tests memcheck)
mkdir -p "$W"
git log -1 --format='commit %H %s' 2>/dev/null || true
for cur in "${steps[@]}"; do
  : >"$out/gpu2-$cur.log"
  t0=$(date +%s)
  case $cur in
    build)
      bash -c "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFLASH_CUDA_ARCHS=\"\$(bash scripts/cuda-archs.sh)\" && cmake --build build -j 32" \
        >>"$out/gpu2-build.log" 2>&1 && note build PASS "" || note build FAIL "see $out/gpu2-build.log"
      tail -n 5 "$out/gpu2-build.log" ;;
    topo)
      nvidia-smi topo -m 2>&1 | tee -a "$out/gpu2-topo.log"
      link=$(nvidia-smi topo -m 2>/dev/null | awk '$1=="GPU0"{print $3}')
      note topo INFO "GPU0-GPU1 link: ${link:-?}" ;;
    procs)
      [ ${#TORCHRUN[@]} -eq 0 ] && log "torchrun not found: the two processes are started by hand with its variables"
      ./build/dflash-train "${common[@]}" --runtime.devices="$devices" --job.dump_folder="$W/threads" \
        >>"$out/gpu2-procs.log" 2>&1 || note threads FAIL "the $G-thread run failed"
      runG "$W/procs" 29511 >>"$out/gpu2-procs.log" 2>&1 || note procs FAIL "the $G-process run failed"
      runG "$W/overlap" 29513 --runtime.overlap_reduction=true >>"$out/gpu2-procs.log" 2>&1 || note overlap FAIL "run failed"
      runG "$W/sharded" 29515 --runtime.shard_optimizer=true >>"$out/gpu2-procs.log" 2>&1 || note sharded FAIL "run failed"
      runG "$W/both" 29517 --runtime.shard_optimizer=true --runtime.overlap_reduction=true >>"$out/gpu2-procs.log" 2>&1 \
        || note both FAIL "run failed"
      for pair in "procs threads" "overlap procs" "sharded procs" "both procs"; do
        set -- $pair
        r=$(compare "$W/$1" "$W/$2") && note "$1" PASS "== $2 over 20 steps: $r" || note "$1" FAIL "vs $2: $r"
      done
      python3 -c "import json;a=json.load(open('$W/procs/startup.json'));b=json.load(open('$W/sharded/startup.json'));print('persistent bytes per GPU: unsharded',a['persistent_bytes'],'sharded',b['persistent_bytes'])" \
        | tee -a "$out/gpu2-procs.log" ;;
    nodes)
      ip=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -v '^127\.' | grep -v ':' | head -n 1)
      if [ -z "$ip" ] || [ ${#TORCHRUN[@]} -eq 0 ]; then note nodes FAIL "no non-loopback IPv4 address or no torchrun"; else
        rm -rf "$W/nodes"
        for n in 0 1; do
          NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 CUDA_VISIBLE_DEVICES=$n \
            "${TORCHRUN[@]}" --nnodes=2 --node-rank=$n --nproc-per-node=1 --master-addr="$ip" --master-port=29521 \
            --no-python ./build/dflash-train "${common[@]}" --job.dump_folder="$W/nodes" >"$W/node.$n.log" 2>&1 &
          eval "npid$n=$!"
        done
        wait "$npid0"; rc0=$?; wait "$npid1"; rc1=$?
        cat "$W/node.0.log" "$W/node.1.log" >>"$out/gpu2-nodes.log"
        grep -m2 "rendezvous:" "$W/node.0.log" "$W/node.1.log" | tee -a "$out/gpu2-nodes.log"
        if [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then note nodes FAIL "exit codes $rc0 $rc1 (meeting at $ip)"
        else r=$(compare "$W/nodes" "$W/procs") && note nodes PASS "2 nodes over $ip (sockets only) == 2 processes: $r" \
          || note nodes FAIL "vs procs: $r"; fi
      fi ;;
    kill9)
      rm -rf "$W/kill9"
      start_by_hand "$W/kill9" 29531 "${long[@]}"
      kill_last_rank kill9 10
      hand_logs >>"$out/gpu2-kill9.log" ;;
    sigterm)
      rm -rf "$W/sigterm" "$W/straight"
      start_by_hand "$W/sigterm" 29541 "${long[@]}"
      if wait_for_step "$W/hand.0.log" 10; then
        kill -TERM "$pidlast"
        wait_all; rc=$?
        hand_logs >>"$out/gpu2-sigterm.log"
        n=$(sed -n 's/^stopped at step \([0-9]*\).*/\1/p' "$W/hand.0.log")
        if [ $rc -ne 0 ] || [ -z "$n" ] || [ ! -f "$W/sigterm/checkpoints/step-$n/COMPLETE.json" ]; then
          note sigterm FAIL "a rank exited non-zero or none stopped ('${n}')"
        else
          start_by_hand "$W/sigterm" 29543 "${long[@]}" --training.steps=$((n + 5))
          wait_all; r0=$?
          cat "$W/hand.0.log" >>"$out/gpu2-sigterm.log"
          start_by_hand "$W/straight" 29545 "${long[@]}" --training.steps=$((n + 5))
          wait_all
          r=$(compare "$W/sigterm" "$W/straight" $((n + 5))) && [ $r0 -eq 0 ] \
            && note sigterm PASS "all $G stopped after step $n (one checkpoint); resumed to $((n + 5)): $r" \
            || note sigterm FAIL "resume rc $r0: $r"
        fi
      else note sigterm FAIL "training did not start"; kill -9 "${pids[@]}" 2>/dev/null; fi ;;
    kill-resume)
      # A rank killed mid-run; the last complete checkpoint resumes as if nothing happened.
      rm -rf "$W/killed" "$W/uninterrupted"
      start_by_hand "$W/killed" 29551 "${long[@]}" --checkpoint.every=5
      kill_last_rank kill-resume 12
      hand_logs >>"$out/gpu2-kill-resume.log"
      c=$(ls "$W/killed/checkpoints" 2>/dev/null | sed -n 's/^step-\([0-9]*\)$/\1/p' | sort -n | while read -r s; do
            [ -f "$W/killed/checkpoints/step-$s/COMPLETE.json" ] && echo "$s"; done | tail -n 1)
      if [ -z "$c" ]; then note resume FAIL "no complete checkpoint after the kill"; else
        n=$((c + 8))
        start_by_hand "$W/killed" 29553 "${long[@]}" --checkpoint.every=5 --training.steps=$n
        wait_all; r0=$?
        hand_logs >>"$out/gpu2-kill-resume.log"
        start_by_hand "$W/uninterrupted" 29555 "${long[@]}" --checkpoint.every=5 --training.steps=$n
        wait_all
        r=$(compare "$W/killed" "$W/uninterrupted" $n) && [ $r0 -eq 0 ] \
          && note resume PASS "resumed from step $c (last complete checkpoint) to $n on $G ranks: $r" \
          || note resume FAIL "resume rc $r0: $r"
      fi ;;
    bench)
      for args in "--gpus=2 --baseline" "--gpus=2 --overlap" "--gpus=2 --shard" "--gpus=2 --overlap --shard"; do
        timeout 150 ./build/dflash-bench multi --model=qwen3-8b --bucket=4096:512 --steps=20 $args 2>&1 \
          | tee -a "$out/gpu2-bench.log" | grep -v '^{'
      done
      summarize bench ;;
    scale)
      # 1, 2, 4, ... G GPUs at the same per-GPU batch, without and with overlap.
      [ ${#TORCHRUN[@]} -eq 0 ] && { note scale FAIL "torchrun not found"; continue; }
      bench_on 1 2>&1 | tee -a "$out/gpu2-scale.log" | grep -v '^{'
      g=2
      while [ $g -le "$G" ]; do
        for args in "" "--overlap"; do
          bench_on $g $args 2>&1 | tee -a "$out/gpu2-scale.log" | grep -v '^{'
        done
        g=$((g * 2))
      done
      summarize scale ;;
    scale-more)
      # Sharded (persistent memory per GPU) and sockets only, on G GPUs.
      [ ${#TORCHRUN[@]} -eq 0 ] && { note scale-more FAIL "torchrun not found"; continue; }
      bench_on 1 2>&1 | tee -a "$out/gpu2-scale-more.log" | grep -v '^{'
      for args in "--overlap --shard" "--shard"; do
        bench_on "$G" $args 2>&1 | tee -a "$out/gpu2-scale-more.log" | grep -v '^{'
      done
      log "sockets only (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1), the stand-in for $G nodes:"
      NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 bench_on "$G" --overlap 2>&1 \
        | tee -a "$out/gpu2-scale-more.log" | grep -v '^{'
      summarize scale-more ;;
    tests)
      timeout 240 ./build/dflash-tests --test-suite='gpu2*' >>"$out/gpu2-tests.log" 2>&1 \
        && note tests PASS "$(tail -n 2 "$out/gpu2-tests.log" | head -n 1)" \
        || note tests FAIL "$(grep -m1 -E 'ERROR|FATAL' "$out/gpu2-tests.log")"
      tail -n 4 "$out/gpu2-tests.log" ;;
    memcheck)
      rm -rf "$W/memcheck"
      timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 ./build/dflash-train "${common[@]}" \
        --runtime.devices="$devices" --training.steps=10 --runtime.overlap_reduction=true --runtime.shard_optimizer=true \
        --job.dump_folder="$W/memcheck" >>"$out/gpu2-memcheck.log" 2>&1
      rc=$?
      s=$(grep -m1 "ERROR SUMMARY" "$out/gpu2-memcheck.log")
      [ $rc -eq 0 ] && note memcheck PASS "10 steps, $G GPUs, overlap + sharding: ${s:-no summary}" \
        || note memcheck FAIL "rc $rc: ${s:-see $out/gpu2-memcheck.log}"
      tail -n 3 "$out/gpu2-memcheck.log" ;;
    *) echo "gpu2-check: unknown step '$cur'"; exit 2 ;;
  esac
  echo "== $cur: $(( $(date +%s) - t0 )) s"
done
echo "== summary (logs in $out/gpu2-*.log)"
printf '%-10s %-5s %s\n' check result detail
printf '%s\n' "${summary[@]}"
exit $failed
