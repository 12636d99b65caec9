#!/usr/bin/env bash
# On a GPU host (the H200 machine): build with CUDA, run the GPU test suites, compute-sanitizer
# memcheck on one replay of every bucket (checkpointing on and off), the benchmarks of
# ../shared/BENCH.md (dflash-bench step) and the default job on the GPU.
# Needs header-only packages the host lacks in .deps/include (toml++, nlohmann), which
# scripts/gpu-prepare.sh fills from this machine's packages; the golden data are in tests/golden.
# Output: a summary table at the end; full logs under $OUT (or ./gpu-out) when set.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
summary=()
step() {  # step NAME COMMAND...: runs, logs, records pass/fail and seconds
  local name=$1; shift
  local t0=$(date +%s)
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-28s rc=%-3s %4ss' "$name" "$rc" "$(( $(date +%s) - t0 ))")")
  tail -n 25 "$out/$name.log"
  return $rc
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
step build bash -c "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build -j 16" || { printf '%s\n' "${summary[@]}"; exit 1; }
gpus=$(nvidia-smi -L | wc -l)
if [ "$gpus" -ge 2 ]; then
  step gpu-tests ./build/dflash-tests --test-suite='gpu*'
else
  step gpu-tests ./build/dflash-tests --test-suite='gpu*' --test-suite-exclude='gpu2*'
fi
step cpu-tests ./build/dflash-tests --test-suite-exclude='gpu*'
step memcheck timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 ./build/dflash-tests --test-suite='gpu-sanitize,gpu-attention'
step bench-toy-cuda ./build/dflash-bench toy --cuda --steps=30
# ../shared/BENCH.md's shapes: the drafter's step (forward + backward + AdamW), target features given.
step bench-small timeout 300 ./build/dflash-bench step --cuda --model=small --bucket=512:64 --bucket=1024:128 --bucket=2048:256 --steps=20
step bench-qwen3-8b timeout 500 bash -c "./build/dflash-bench step --cuda --model=qwen3-8b --bucket=1024:128 --bucket=2048:256 --bucket=4096:512 --steps=20 && ./build/dflash-bench step --cuda --model=qwen3-8b --bucket=1024:128 --bucket=4096:512 --steps=20 --no-checkpointing"
# The default job on the GPU (the README's first command, without its apt/build steps).
step tiny-job timeout 300 ./build/dflash-train --config configs/tiny.toml --job.dump_folder=/tmp/tiny-gpu --target.path=/tmp/tiny-gpu/target --data.train=/tmp/tiny-gpu/data/train.jsonl --data.eval=/tmp/tiny-gpu/data/eval.jsonl --checkpoint.every=0 --metrics.progress=false
echo "== summary"; printf '%s\n' "${summary[@]}"
