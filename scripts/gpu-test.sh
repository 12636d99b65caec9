#!/usr/bin/env bash
# The GPU checks, on a host with NVIDIA GPUs (measured on compute capability 9.0): the CUDA build, the GPU test suites, greedy decoding against HF transformers, the four
# compute-sanitizer tools over every kernel of ours those suites launch (and the check that none is
# missed), the GPU mutation probes and, with two GPUs or more, the multi-GPU checks. Each step logs to
# $OUT/<step>.log (or out/gpu-test/, git-ignored), then a summary of exit statuses and seconds; exit
# status 1 when a step failed.
#   bash scripts/gpu-test.sh --list                 # the steps, one a line
#   bash scripts/gpu-test.sh [STEP...]              # the steps named, in that order (none: all, in --list's order)
#   bash scripts/gpu-test.sh build suites           # e.g.
#   bash scripts/gpu-test.sh racecheck:attention    # one part of a sanitizer step (--list names the parts)
# Ten minutes hold build and suites, or a few sanitizer parts. The GPU host needs .deps
# (scripts/gpu-prepare.sh); the golden data are in tests/golden.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/gpu-test}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on shared GPU hosts
tools=(memcheck racecheck initcheck synccheck)
parts_of() {  # parts_of TOOL: its parts, in order
  case $1 in
    racecheck) echo model misc ops spec sampling attention attention-query attention-fused generate ;;
    *) echo model ops spec attention generate ;;
  esac
}

# name|what it runs (--list prints these; the order is the default run's)
steps_table=(
  "build|CMake + Ninja with CUDA for the host's GPUs (scripts/cuda-archs.sh) into build/"
  "suites|every GPU suite: dflash-tests --test-suite='gpu*' (the gpu2* suites only with two GPUs or more)"
  "cpu-suites|the CPU suites, in the CUDA build, on the GPU host"
  "tiny-job|the default job (configs/tiny.toml) trained on the GPU"
  "generate-hf|greedy dflash-train generate (bf16) and HF transformers' own bf16 generate, each against float32 arithmetic on the same random Qwen3 at Qwen3-8B dims that transformers writes (scripts/anchors/hf_generate_gpu_check.py; the host's python3 with torch)"
  "memcheck|compute-sanitizer memcheck over the GPU suites, in parts: $(parts_of memcheck)"
  "racecheck|racecheck, every report judged (only cuBLAS's own kernels may draw one), in parts: $(parts_of racecheck)"
  "initcheck|initcheck, in parts: $(parts_of initcheck)"
  "synccheck|synccheck, in parts: $(parts_of synccheck)"
  "inventory|the kernels the one-GPU suites launch (CUPTI), for the coverage step"
  "coverage|the sanitizer parts' kernels, by tool (the parts run without their tool), against the inventory: every kernel function of ours under every tool"
  "mutants|the CUDA kernels' mutation probes against the one-GPU suites (scripts/mutants.sh --gpu; MUTANTS_WORDS, MUTANTS_BUDGET_S)"
  "multi-gpu|the multi-GPU checks of scripts/gpu2-check.sh on every GPU (two or more; skipped on one)"
)

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
tests=./build/dflash-tests

# The sanitizer parts: the one-GPU suites split so that a part fits a ten-minute call. Left out: the suites
# that train, replay or decode whole models (gpu-replay, gpu-drafter, gpu-poison, gpu-golden-checks,
# gpu-gemm-tuning; their kernels run in smaller cases here), cuDNN's suite (gpu-cudnn: cuDNN's kernels; ours
# run in gpu-misc) and the gpu2* suites (the multi-gpu step runs the trainer under memcheck). The coverage
# step checks that every kernel function of ours still runs under every tool.
# Left out of every part, by name, two cases that start this binary again in a child: the fused backward's
# stall case, whose child traps on purpose (the sanitizer, following it, reports an error; its kernels run
# in the fused backward's cases), and the kernel inventory's, whose child's CUPTI tracing crashes under a
# sanitizer (its kernels run in gpu-kernels' accumulate and fill case).
excluded='*a turn that never comes*,DFLASH_KERNEL_INVENTORY lists*'
# racecheck's op-level cases (a doctest filter splits at commas, hence "?")
race_ops='add? mul? scale*,embedding: CUDA*,rmsnorm: CUDA equals CPU*,concat*,sum and mean*,drop_group_heads*'
race_ops+=',linear_cross_entropy: CUDA equals CPU*,ce rows*,fused add_rmsnorm and rmsnorm_rope*,swiglu_halves*'
race_ops+=",the speculative round's control ops*,GEMM tuning: the candidates*"
selection() {  # selection TOOL PART: sets sel (doctest's filters), skip (cases left out besides $excluded:
  # doctest takes one --test-case-exclude, the last) and limit (seconds) for that part
  limit=400 skip=
  case $1:$2 in
    *:model) sel=(--test-suite=gpu-sanitize) ;;  # one replay of every bucket: the drafter's whole step
    racecheck:misc) sel=(--test-suite=gpu-misc) ;;
    racecheck:ops) sel=(--test-suite=gpu-ops,gpu-kernels,gpu-spec,gpu-optimizer "--test-case=$race_ops") ;;
    *:ops) sel=(--test-suite=gpu-ops,gpu-kernels,gpu-misc,gpu-optimizer) limit=500 ;;
    # the decode kernels without the random targets at Qwen3-8B dims (minutes under a tool; the same kernels
    # run in the golden cases); racecheck: the decode ops' case and the sampling probabilities' alone
    racecheck:spec) sel=(--test-suite=gpu-spec '--test-case=the decode ops on the GPU match*,sampling_probs on the GPU*') ;;
    *:spec) sel=(--test-suite=gpu-spec) skip='*at Qwen3-8B dims*' ;;
    racecheck:sampling) sel=(--test-suite=gpu-spec '--test-case=top_k 1 on the GPU*') limit=590 ;;
    # racecheck: the attention kernels on the version test's two small subcases (forward, dq, dk/dv and
    # version 1), the query side's case (forward over 128-key tiles, dq in its own kernel) and the fused
    # backward's on their small subcases; the whole suite does not fit a call under racecheck
    racecheck:attention) sel=(--test-suite=gpu-attention '--test-case=CUDA kernel versions 1 and 2 agree*'
                              '--subcase=B 2? S 1100*,hd 64 with two chunks*') ;;
    racecheck:attention-query) sel=(--test-suite=gpu-attention '--test-case=*query side in the ws mode*'
                                    '--subcase=B 2? S 1100*,hd 64? GQA 1*') ;;
    racecheck:attention-fused) sel=(--test-suite=gpu-attention '--test-case=version 2*fused backward*'
                                    '--subcase=GQA 1*') ;;
    # initcheck: without the hot shape's speed case (S 4096, N 512), which takes over 8 minutes under it
    initcheck:attention) sel=(--test-suite=gpu-attention) skip='*hot shape*' ;;
    *:attention) sel=(--test-suite=gpu-attention) limit=500 ;;
    # batched decoding's kernels (slot attention, scatter, gather, the control kernels, keyed draws) without
    # the decode step's timing at Qwen3-8B dims (minutes under a tool)
    # racecheck: the kernels' own cases (the whole decode of the greedy and sampling cases ran past
    # five minutes under it; their kernels are these)
    racecheck:generate) sel=(--test-suite=gpu-generate '--test-case=slot attention?*,the continuous-batching control*') ;;
    *:generate) sel=(--test-suite=gpu-generate) skip='the decode step at Qwen3-8B*' ;;
    *) echo "gpu-test: $1 has no part '$2' (its parts: $(parts_of "$1"))"; return 2 ;;
  esac
}
cases_run() {  # cases_run LOG: fails, saying so, when doctest ran no test case (a filter that matches nothing)
  local n
  n=$(grep -oE 'test cases: *[0-9]+' "$1" | tail -n 1 | grep -oE '[0-9]+$')
  [ "${n:-0}" -gt 0 ] || { echo "gpu-test: no test case ran (a filter matches nothing?)"; return 1; }
}
sanitize() {  # sanitize TOOL PART: compute-sanitizer TOOL on the part's selection; racecheck judged (below)
  local tool=$1 part=$2 sel skip limit full=${TMPDIR:-/tmp}/gpu-test-$1-$2.log rc
  selection "$tool" "$part" || return 2
  local run=("$tests" "${sel[@]}" "--test-case-exclude=$excluded${skip:+,$skip}")
  echo "== $tool:$part: ${run[*]}"
  # synccheck tracks a fixed number of cuda::barrier objects a block, detected per kernel; cuDNN's fused
  # attention overflows the detected count (the tool warns, then the launch fails; 64 still overflows)
  local extra=()
  [ "$tool" != synccheck ] || extra=(--num-cuda-barriers 1024)
  if [ "$tool" != racecheck ]; then
    timeout "$limit" compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 9 "${run[@]}" >"$full" 2>&1
    rc=$?
    [ $rc -eq 0 ] || { head -c 20000 "$full"; echo "[...]"; }  # the first reports, where the tool found any
    tail -n 25 "$full"
  else
    # Every report printed and judged by scripts/racecheck-foreign.sh: the cases pass and every report lies
    # in cuBLAS's own split-K kernels (nvjet_*, the only foreign kernels racecheck has reported here), none
    # in ours; a report in any other kernel fails the part and its first 20000 bytes stay in the log.
    timeout "$limit" compute-sanitizer --tool racecheck --racecheck-report all --print-limit 0 \
      --show-backtrace no "${run[@]}" >"$full" 2>&1
    rc=$?
    tail -n 8 "$full"
    if [ -z "${SANITIZER_INVENTORY:-}" ]; then  # (the coverage step's stand-in prints no report to judge)
      bash scripts/racecheck-foreign.sh "$full" 'nvjet_' || { rc=1; head -c 20000 "$full"; }
    fi
  fi
  cases_run "$full" || rc=1
  rm -f "$full"
  return $rc
}
step_sanitizer() {  # step_sanitizer TOOL [PART]: the part, or all the tool's parts in turn
  local tool=$1 rc=0 p
  for p in ${2:-$(parts_of "$tool")}; do sanitize "$tool" "$p" || rc=1; done
  return $rc
}

# The steps, one function each.
step_build() {  # CMake + Ninja with CUDA for the host's GPUs (scripts/cuda-archs.sh), Release
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFLASH_CUDA_ARCHS="$(bash scripts/cuda-archs.sh)" &&
    cmake --build build -j "$(nproc)"
}
step_suites() {  # every GPU suite the host's GPUs can run
  local two=()
  [ "$gpus" -ge 2 ] || two=(--test-suite-exclude='gpu2*')
  timeout 590 "$tests" --test-suite='gpu*' "${two[@]}"
}
step_cpu_suites() {  # the CPU suites in this build (the GPU visible)
  timeout 590 "$tests" --test-suite-exclude='gpu*'
}
step_tiny_job() {  # the default job on the GPU: data, target, training, eval
  local w=${TMPDIR:-/tmp}/dflash-tiny-gpu
  rm -rf "$w"
  timeout 300 ./build/dflash-train --config configs/tiny.toml --job.dump_folder="$w" --target.path="$w/target" \
    --data.train="$w/data/train.jsonl" --data.eval="$w/data/eval.jsonl" --eval.spec_prompts="$w/data/eval.jsonl" \
    --checkpoint.every=0 --metrics.progress=false
}
step_generate_hf() {  # greedy outputs against exact arithmetic, free-running and teacher-forced, beside HF's bf16; batch 1 against batch 3
  timeout 590 python3 scripts/anchors/hf_generate_gpu_check.py --dflash-train ./build/dflash-train
}
step_inventory() {  # the kernels the one-GPU suites launch (DFLASH_KERNEL_INVENTORY), in $out/inventory/all,
  # kept in build/kernel-inventory too for a later call on the same machine; a failing case fails the step
  rm -rf "$out/inventory/all" && mkdir -p "$out/inventory/all" || return 1
  DFLASH_KERNEL_INVENTORY=$out/inventory/all/all timeout 590 "$tests" --test-suite='gpu*' \
    --test-suite-exclude='gpu2*' | tail -n 4
  [ "${PIPESTATUS[0]}" -eq 0 ] && ls "$out/inventory/all" | grep -q . || return 1
  rm -rf build/kernel-inventory && cp -r "$out/inventory/all" build/kernel-inventory
}
step_coverage() {  # every kernel function of ours that the suites launch runs under every tool in some part
  # (scripts/sanitizer-coverage.py): each tool's parts run without the tool, through scripts/sanitizer-inventory's
  # stand-in, which lists the kernels they launch; the lists merged a tool into $out/inventory/tools/<tool>.all
  local dir=$out/inventory t
  if [ ! -d "$dir/all" ]; then
    [ -d build/kernel-inventory ] || { echo "coverage: no inventory; run the inventory step first"; return 1; }
    mkdir -p "$dir" && cp -r build/kernel-inventory "$dir/all"
  fi
  rm -rf "$dir/tools" "$dir/steps" && mkdir -p "$dir/tools" || return 1
  SANITIZER_INVENTORY=$dir/tools PATH=$PWD/scripts/sanitizer-inventory:$PATH OUT=$dir/steps \
    bash scripts/gpu-test.sh "${tools[@]}" | grep -A10 '^== summary'
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "coverage: a part's cases failed without the tool (its log: below)"
    tail -n 30 "$dir"/steps/*.log; return 1; }
  for t in "${tools[@]}"; do
    ls "$dir/tools" | grep -q "^$t\." || { echo "coverage: no kernel list for $t"; return 1; }
    cat "$dir/tools/$t".* | sort -u >"$dir/$t.merged" && rm -f "$dir/tools/$t".* && mv "$dir/$t.merged" "$dir/tools/$t.all"
  done
  rm -rf "$dir/steps"
  python3 scripts/sanitizer-coverage.py "$dir"
}
step_mutants() {  # scripts/mutants.sh --gpu in its own scratch build; MUTANTS_WORDS="WORD ..." or "#A-B" selects,
  # MUTANTS_BUDGET_S (default 440) stops starting new ones; a mutant left unrun fails the step (exit 3)
  # shellcheck disable=SC2086
  DFLASH_MUTANTS_DIR="${TMPDIR:-/tmp}/dflash-mutants-gpu" DFLASH_MUTANTS_TIMEOUT=200 \
    DFLASH_MUTANTS_BUDGET_S="${MUTANTS_BUDGET_S:-440}" bash scripts/mutants.sh --gpu ${MUTANTS_WORDS:-}
}
step_multi_gpu() {  # scripts/gpu2-check.sh's checks on all the GPUs (it logs to $out/gpu2-*.log; the gpu2*
  # suites run in the suites step)
  if [ "$gpus" -lt 2 ]; then echo "multi-gpu: skipped, one GPU"; return 0; fi
  GPUS=$gpus OUT=$out bash scripts/gpu2-check.sh topo procs nodes kill9 sigterm kill-resume memcheck
}

if [ "${1:-}" = --list ]; then
  for s in "${steps_table[@]}"; do printf '%-11s %s\n' "${s%%|*}" "${s#*|}"; done
  exit 0
fi
names=()
for s in "${steps_table[@]}"; do names+=("${s%%|*}"); done
wanted=("$@")
[ ${#wanted[@]} -eq 0 ] && wanted=("${names[@]}")
for s in "${wanted[@]}"; do
  printf '%s\n' "${names[@]}" | grep -qx -- "${s%%:*}" || { echo "gpu-test: unknown step '$s' (see --list)"; exit 2; }
  case $s in *:*) printf '%s\n' "${tools[@]}" | grep -qx -- "${s%%:*}" &&
    parts_of "${s%%:*}" | tr ' ' '\n' | grep -qx -- "${s#*:}" || { echo "gpu-test: no step part '$s' (see --list)"; exit 2; } ;;
  esac
done

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
if [ -f .deps/commit ]; then echo "commit $(cat .deps/commit)"; else git log -1 --format='commit %H %s' 2>/dev/null; fi
summary=()
failed=0
for s in "${wanted[@]}"; do
  name=${s%%:*} part=""
  [ "$s" != "$name" ] && part=${s#*:}
  log=$out/${s//:/-}.log
  t0=$(date +%s)
  echo "== $s" >"$log"
  case $name in
    memcheck|racecheck|initcheck|synccheck) step_sanitizer "$name" "$part" >>"$log" 2>&1 ;;
    *) "step_${name//-/_}" >>"$log" 2>&1 ;;
  esac
  rc=$?
  summary+=("$(printf '%-26s rc=%-3s %5ss' "$s" "$rc" "$(( $(date +%s) - t0 ))")")
  [ $rc -ne 0 ] && failed=1
  tail -n 30 "$log"
  echo "== $s: rc=$rc, $(( $(date +%s) - t0 )) s"
  [ "$name" = build ] && [ $rc -ne 0 ] && break
done
echo "== summary (logs in $out)"
printf '%s\n' "${summary[@]}"
exit $failed
