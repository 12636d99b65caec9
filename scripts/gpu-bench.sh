#!/usr/bin/env bash
# The benchmark figures that README.md and docs/BENCH.md quote, on a host with NVIDIA GPUs (H100, H200),
# each measured beside its PyTorch anchor (scripts/anchors/, run with the host's python3, which holds
# torch and transformers) in the same run. Each step logs to DIR/<step>.log and appends one JSON line
# a figure to DIR/figures.jsonl (figure, metric, value, unit, anchor, anchor_value, ratio, gpu, driver,
# date, commit, command, anchor_command, details: see scripts/bench-figures.py); the raw result lines
# of both sides go to DIR/raw.jsonl. DIR is $OUT when set, else out/bench (git-ignored).
#   bash scripts/gpu-bench.sh --list            # the steps, one a line
#   bash scripts/gpu-bench.sh [STEP...]         # the steps named, in that order (none: all, in --list's order)
#   bash scripts/gpu-bench.sh build drafter     # e.g.; a step takes up to about 9 minutes (the compiled
#                                               # anchors warm up for minutes): one or two in ten minutes
# The build is the one of scripts/gpu-test.sh; the GPU host needs .deps (scripts/gpu-prepare.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${OUT:-out/bench}
mkdir -p "$dir"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on shared GPU hosts
export PYTHONUNBUFFERED=1

# name|what it measures (--list prints these; the order is the default run's)
steps_table=(
  "build|CMake + Ninja with CUDA into build/ (as scripts/gpu-test.sh build)"
  "drafter|qwen3-8b drafter step at 1024:128, 2048:256, 4096:512 recorded together (and their startup), 4096:512 alone at --arena-gb=2.49 and at the smallest arena; anchor: torch.compile's step and warm-up"
  "drafter-small|small drafter step at 512:64, 1024:128, 2048:256; anchor: torch.compile's step"
  "drafter-long|qwen3-8b drafter step at 8192:512, 16384:512, 32768:512, 65536:512; anchor: flex_attention compiled alone"
  "target|the target's forward at Qwen3-8B dims, 1024, 4096 and 16384 tokens; anchor: HF transformers' forward"
  "online|the online step (target + drafter, 4096:512, --arena-gb=7); anchor: HF's forward + torch.compile's step at 4096 (from this run's drafter and target steps, else measured here)"
  "decode|the decode step (target alone) and one speculative round at contexts 1024 and 4096; anchor: HF transformers' decode step, compiled and eager"
  "generate|batched decoding (dflash-train generate) at Qwen3-8B dims, batch 1, 32 and 128, prompt 512, 512 new tokens, and each decode step against its bandwidth floor; anchor: HF transformers' generate, eager (static cache)"
  "generate-compiled|the same batched decoding; anchor: HF transformers' generate, compiled (its warm-up reported; minutes, hence a step of its own)"
  "multi-gpu|the qwen3-8b 4096:512 step on all GPUs against one, plain and overlapped (two GPUs or more; skipped on one)"
)

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
commit=$(cat .deps/commit 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
day=$(date -u +%Y-%m-%d)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
raw=$work/raw.jsonl  # this run's raw results (anchors are reused only within one run)
: >"$raw"
cur=""

measure() {  # measure SIDE LABEL SHOWN COMMAND...: runs it, its output to the step's log, and keeps its JSON lines
  local side=$1 label=$2 shown=$3; shift 3
  echo "== $side $label: $shown"
  "$@" >"$work/out" 2>&1
  local rc=$?
  cat "$work/out"
  python3 scripts/bench-figures.py wrap "$cur" "$side" "$label" "$shown" <"$work/out" >>"$raw"
  [ $rc -eq 0 ] || echo "== $side $label: exit status $rc"
  return $rc
}
ours() {  # ours LABEL ARGS...: ./build/dflash-bench ARGS (10 minutes at most)
  local label=$1; shift
  measure ours "$label" "dflash-bench $*" timeout 590 ./build/dflash-bench "$@"
}
anchor() {  # anchor LABEL SCRIPT ARGS...: scripts/anchors/SCRIPT ARGS (10 minutes at most)
  local label=$1 script=scripts/anchors/$2; shift 2
  measure anchor "$label" "python3 $script $*" timeout 590 python3 "$script" "$@"
}
has() { python3 scripts/bench-figures.py has "$raw" "$@"; }  # has SIDE LABEL KEY=VALUE...: in this run already
figures() {  # the step's figure lines, into figures.jsonl and the log
  python3 scripts/bench-figures.py figures "$cur" "$raw" --gpu "$gpu" --driver "$driver" --date "$day" \
    --commit "$commit" --out "$dir/figures.jsonl"
}

# The steps, one function each; a step's status is 1 when a command failed or it gave no figure.
step_build() {  # CMake + Ninja with CUDA for the host's GPUs (scripts/cuda-archs.sh), Release
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFLASH_CUDA_ARCHS="$(bash scripts/cuda-archs.sh)" &&
    cmake --build build -j "$(nproc)"
}
step_drafter() {  # qwen3-8b: three buckets together, 4096:512 alone at two arenas; torch.compile beside
  local rc=0
  ours three-buckets step --cuda --model=qwen3-8b --bucket=1024:128 --bucket=2048:256 --bucket=4096:512 --steps=20 || rc=1
  ours arena-2.49 step --cuda --model=qwen3-8b --bucket=4096:512 --steps=20 --arena-gb=2.49 || rc=1
  ours smallest-arena step --cuda --model=qwen3-8b --bucket=4096:512 --steps=20 || rc=1
  anchor compiled ref_drafter.py --modes compiled --buckets 1024:128,2048:256,4096:512 || rc=1
  figures || rc=1
  return $rc
}
step_drafter_small() {  # the small drafter (hidden 1024, 2 layers, 16/8 heads of 64) beside torch.compile
  local rc=0
  ours three-buckets step --cuda --model=small --bucket=512:64 --bucket=1024:128 --bucket=2048:256 --steps=30 || rc=1
  anchor compiled ref_drafter.py --modes compiled --hidden 1024 --inter 3072 --layers 2 --heads 16 --kv-heads 8 \
    --head-dim 64 --buckets 512:64,1024:128,2048:256 || rc=1
  figures || rc=1
  return $rc
}
step_drafter_long() {  # qwen3-8b's long contexts beside flex_attention compiled alone (compiled runs out of memory)
  local rc=0
  ours long step --cuda --model=qwen3-8b --bucket=8192:512 --bucket=16384:512 --bucket=32768:512 \
    --bucket=65536:512 --steps=10 || rc=1
  anchor flex ref_drafter.py --modes flex --buckets 8192:512,16384:512,32768:512,65536:512 || rc=1
  figures || rc=1
  return $rc
}
step_target() {  # the target's forward beside HF transformers'
  local rc=0
  ours forward target --cuda --model=qwen3-8b --seq=1024 --seq=4096 --seq=16384 --steps=10 || rc=1
  anchor hf-forward ref_target.py 1024,4096,16384 || rc=1
  figures || rc=1
  return $rc
}
step_online() {  # the online step beside HF's forward + torch.compile's step at 4096 (this run's, else measured)
  local rc=0
  ours arena-7 step --cuda --online --model=qwen3-8b --bucket=4096:512 --steps=20 --arena-gb=7 || rc=1
  has anchor hf-forward seq=4096 || anchor hf-forward ref_target.py 4096 || rc=1
  has anchor compiled seq=4096 anchors=512 hidden=4096 ||
    anchor compiled ref_drafter.py --modes compiled --buckets 4096:512 || rc=1
  figures || rc=1
  return $rc
}
step_decode() {  # the decode step and a round beside HF's decode step, eager and compiled
  local rc=0
  ours spec spec --cuda --model=qwen3-8b --context=1024 --context=4096 --steps=20 || rc=1
  anchor hf-decode-eager ref_decode.py 1024,4096 || rc=1
  anchor hf-decode-compiled ref_decode.py 1024,4096 --compile || rc=1
  figures || rc=1
  return $rc
}
step_generate() {  # batched decoding beside HF's generate, eager
  local rc=0
  ours batches generate --cuda --model=qwen3-8b --batch=1 --batch=32 --batch=128 --context=512 --steps=511 || rc=1
  anchor hf-generate-eager ref_generate.py 1,32,128 || rc=1
  figures || rc=1
  return $rc
}
step_generate_compiled() {  # batched decoding beside HF's compiled generate (its warm-up reported)
  local rc=0
  ours batches generate --cuda --model=qwen3-8b --batch=1 --batch=32 --batch=128 --context=512 --steps=511 || rc=1
  anchor hf-generate-compiled ref_generate.py 1,32,128 --compile || rc=1
  figures || rc=1
  return $rc
}
step_multi_gpu() {  # every GPU of the host against one (dflash-bench multi measures both in one command)
  if [ "$gpus" -lt 2 ]; then echo "multi-gpu: skipped, one GPU"; return 0; fi
  local rc=0
  ours plain multi --model=qwen3-8b --bucket=4096:512 --steps=20 --gpus="$gpus" --baseline || rc=1
  ours overlap multi --model=qwen3-8b --bucket=4096:512 --steps=20 --gpus="$gpus" --baseline --overlap || rc=1
  figures || rc=1
  return $rc
}

if [ "${1:-}" = --list ]; then
  for s in "${steps_table[@]}"; do printf '%-14s %s\n' "${s%%|*}" "${s#*|}"; done
  exit 0
fi
names=()
for s in "${steps_table[@]}"; do names+=("${s%%|*}"); done
wanted=("$@")
[ ${#wanted[@]} -eq 0 ] && wanted=("${names[@]}")
for s in "${wanted[@]}"; do
  printf '%s\n' "${names[@]}" | grep -qx -- "$s" || { echo "gpu-bench: unknown step '$s' (see --list)"; exit 2; }
done

echo "gpu-bench: ${gpu:-no GPU found} (driver ${driver:-?}, $gpus GPU(s)), commit $commit, $day; figures into $dir/figures.jsonl"
summary=()
failed=0
for s in "${wanted[@]}"; do
  cur=$s
  t0=$(date +%s)
  echo "== $s (commit $commit, $gpu)" >"$dir/$s.log"
  "step_${s//-/_}" >>"$dir/$s.log" 2>&1
  rc=$?
  summary+=("$(printf '%-14s rc=%-3s %5ss' "$s" "$rc" "$(( $(date +%s) - t0 ))")")
  [ $rc -ne 0 ] && failed=1
  grep -E '^(FIGURE|bench-figures|== .*exit status)' "$dir/$s.log" || tail -n 20 "$dir/$s.log"
  [ "$s" = build ] && [ $rc -ne 0 ] && break
done
cat "$raw" >>"$dir/raw.jsonl"
echo "== summary (logs in $dir)"
printf '%s\n' "${summary[@]}"
exit $failed
