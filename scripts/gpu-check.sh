#!/usr/bin/env bash
# On a GPU host (the H200 machine): builds with CUDA and runs the named steps (default: all but
# the sanitizers and the anchors), each logged to $OUT/<step>.log (or ./gpu-out), then a summary.
#   bash scripts/gpu-check.sh build tests profile     # any subset, in this order
# Steps: build, build-base (dflash-bench from the tree of AB_BASE=<commit> scripts/gpu-prepare.sh, for A/B in one call),
# norms-ab and profile-online-ab (the target's forward, the online step and its table: build-base
# against build), step-ab (the drafter step at 4096:512 and 1024:128, build-base against build), tests (gpu* suites; gpu2* too when 2 GPUs), cpu-tests, memcheck, racecheck,
# sanitize-fused (the target's fused norm kernels under the four tools),
# racecheck-dkdv (the dk/dv kernel in its three modes on two small cases of the version test; a
# doctest filter splits at commas, hence "?"), sanitize-spec (the decode kernels of gpu-spec under
# memcheck, racecheck, synccheck and initcheck, one step each),
# sanitize-ws (the query side's ws mode under the four tools), query-ab (its modes A/B in the step),
# dkdv-ab (dk/dv's decoupled against ws in the step), tma-ab (dk/dv's chunks by threads against TMA in the step),
# loads-ab (every producer by threads against TMA in the steps),
# sanitize-tma (those TMA loads under the four tools), attention-4096 (the attention bench at 4096:512 alone), modes-short (the backward's modes at 1024:128 and 2048:256), sanitize-dkdv-ws, dq-ab (dq's own kernel
# against the fused backward in the step), fused-smoke (the fused backward's test case under a
# timeout), sanitize-fused-dq (it under memcheck, synccheck, racecheck), keys-ab (the forward over
# 64- against 128-key tiles in the step), sanitize-wide (its 128-key tiles under three tools),
# synccheck, initcheck, initcheck-graph (alone, the case initcheck flagged until copy_ became a kernel), attention (kernel versions 1 against 2: correctness and speed at 4096:512,
# 65536:512, 1024:128), attention-tests (the attention suites with the default version, then the
# op-level suite again with DFLASH_ATTENTION=v1), profile (4096:512 and others), target (the
# target's forward), profile-4096 (qwen3-8b 4096:512 alone), profile-spec (the decode step and one
# round at contexts 1024 and 4096), ncu-attention (Nsight Compute's full set on the sm90 attention
# kernels at 4096:512: the details page, then scripts/ncu-hotspots.py's stall reasons and hot SASS
# lines, in the log), ncu-norms (the same for the target's rmsnorm_rope, add_rmsnorm and swiglu_halves
# at 4096), gemms (each GEMM shape of
# that step: cuBLAS's algorithm against cuBLASLt's candidates), gemms-sustained (the same for the
# online step's shapes over 300 launches a candidate, under the power cap), online-tuned-ab (the
# online step untuned, tuned over DFLASH_GEMM_TUNING_REPS launches, untuned), online (target + drafter step), online-7 (the same with --arena-gb=7, then also
# --gemm-tuning), chunks-ab (the lm_head's rows per chunk in the online step and 1024:128, interleaved), sanitize-ce (the
# lm_head's rows read once, under memcheck and synccheck), racecheck-ce (the row kernels under racecheck; only
# cuBLAS's own kernels may draw reports),
# sanitize-ops (the op-level kernels the other steps miss, under all four tools),
# mutants-gpu (scripts/mutants.sh --gpu: the CUDA kernels' mutants against the one-GPU suites, in its own
# scratch build under $TMPDIR/dflash-mutants-gpu; MUTANTS_WORDS="WORD ..." selects by name or "#A-B" by number, MUTANTS_BUDGET_S (default 440)
# stops starting new ones; a mutant cut by the budget fails the step, exit 3),
# racecheck-probe (scripts/probes/: which feature of the CE row kernel racecheck could not handle),
# inventory-all, inventory-tools, sanitizer-coverage (the kernels the one-GPU suites launch, those each tool's
# steps run, and scripts/sanitizer-coverage.py's check that every kernel function runs under every tool), ce-ab (those rows' slice sizes A/B), ce-steps (the steps with
# them read twice and once), clocks (the offline and online steps and the target under nvidia-smi's clock and power
# samples, scripts/gpu-clocks.sh), profile-online (the online step's table, target + drafter, --arena-gb=7), profile-1024 (qwen3-8b 1024:128 alone), fusion-ab (the target's
# fused norms against DFLASH_TARGET_FUSION=off, same call), bench-small, bench-qwen3-8b, bench-long, bench-spec,
# bench-generate (batched decoding's step at Qwen3-8B dims, batch 32 and 128), sanitize-generate (its kernels under
# the four tools),
# bench-tuned (bench-qwen3-8b's checkpointed buckets with --gemm-tuning), recompute (qwen3-8b
# 4096:512 under forced recompute choices and arena budgets), bench-4096
# (4096:512 with the arena that keeps the peak within 22.7 GiB, then the default),
# anchors-decode (HF transformers' decode step of the target, eager then compiled: issue 10's
# anchor for bench-spec, from scripts/anchors), anchors-small, anchors-qwen3-8b, anchors-4096 (qwen3-8b 4096:512 alone), anchors-short (its
# 1024:128 and 2048:256), anchors-target (HF's forward of the target at 1024, 4096 and 16384
# tokens, beside the step `target`), anchors-long (the PyTorch
# anchors of ../shared/BENCH.md, from .anchors/), tiny-job.
# Needs the header-only packages the host lacks in .deps/include (scripts/gpu-prepare.sh); the
# golden data are in tests/golden.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
summary=()
failed=0
step() {  # step NAME COMMAND...: runs, logs, records pass/fail and seconds
  local name=$1; shift
  local t0=$(date +%s)
  echo "== $name: $*" >"$out/$name.log"
  "$@" >>"$out/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-22s rc=%-3s %4ss' "$name" "$rc" "$(( $(date +%s) - t0 ))")")
  [ $rc -ne 0 ] && failed=1
  tail -n 40 "$out/$name.log"
  return $rc
}
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(build tests cpu-tests memcheck profile bench-small bench-qwen3-8b tiny-job)
gpus=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader
if [ -f .deps/commit ]; then echo "commit $(cat .deps/commit)"; else git log -1 --format='commit %H %s' 2>/dev/null || true; fi
# The test cases no sanitizer step runs, by name: the fused backward's stall case starts the test binary
# again in a child that traps on purpose, which the sanitizer (following the child) reports as an error.
# Its kernels run under every tool in "version 2's fused backward: dq summed ..." (memcheck, synccheck here;
# racecheck in sanitize-fused-dq).
san_excluded='*a turn that never comes*'
# The steps whose runs under each tool make up the sanitizer coverage (inventory-tools lists their kernels).
sanitizer_steps=(memcheck racecheck synccheck initcheck racecheck-dkdv sanitize-ws sanitize-dkdv-ws sanitize-fused-dq
  sanitize-wide sanitize-spec sanitize-fused sanitize-tma sanitize-ce racecheck-ce sanitize-new initcheck-graph sanitize-ops
  sanitize-generate)
# sanitize-ops's cases (a doctest filter splits at commas, hence "?")
ops_suites='gpu-ops,gpu-kernels,gpu-misc,gpu-spec,gpu-optimizer'
ops_cases='add? mul? scale*,embedding: CUDA*,rmsnorm: CUDA equals CPU*,concat*,sum and mean*,cast*,drop_group_heads*'
ops_cases+=',causal_attention: every CUDA kernel path*,linear_cross_entropy: CUDA equals CPU*'
ops_cases+=",the speculative round's control ops*,GEMM tuning: the candidates*"
san() {  # san TOOL TIMEOUT SUITES [EXTRA doctest args]: compute-sanitizer on the GPU suites, without
  # san_excluded's cases (a step's own --test-case-exclude is added to them)
  local tool=$1 limit=$2 suites=$3; shift 3
  local extra=() args=() exclude=$san_excluded a
  [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  for a in "$@"; do
    case $a in --test-case-exclude=*) exclude+=",${a#--test-case-exclude=}" ;; *) args+=("$a") ;; esac
  done
  timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 "${extra[@]}" \
    ./build/dflash-tests --test-suite="$suites" --test-case-exclude="$exclude" "${args[@]}"
}
racecheck_judged() {  # racecheck_judged NAME TIMEOUT SUITES CASES: racecheck on the cases (san_excluded left out),
  # unfiltered, every report printed and judged by scripts/racecheck-foreign.sh: the cases pass and every report lies
  # in cuBLAS's own split-K kernels (nvjet_*, the only foreign kernels racecheck has reported here), none in ours; a
  # report in any other kernel fails the step and is read by hand; the log's first 20000 bytes are kept
  local name=$1 limit=$2 suites=$3 cases=$4 full="$out/$1.full.log" r
  timeout "$limit" compute-sanitizer --tool racecheck --racecheck-report all --print-limit 0 --show-backtrace no \
    ./build/dflash-tests --test-suite="$suites" --test-case="$cases" --test-case-exclude="$san_excluded" >"$full" 2>&1
  tail -n 6 "$full"
  bash scripts/racecheck-foreign.sh "$full" 'nvjet_'
  r=$?
  head -c 20000 "$full" >"$out/$name.head.log"
  rm -f "$full"
  return $r
}
inventory_tools() {  # the selections of INVENTORY_STEPS (default: sanitizer_steps) without their tools, through
  # scripts/sanitizer-inventory's stand-in; each tool's kernels merged into $out/inventory/tools/<tool>.all, the
  # steps' logs into $out/inventory/steps.tgz (the device returns few files); the steps' own verdicts are not judged
  local dir=$out/inventory t
  rm -rf "$dir/tools" "$dir/steps" && mkdir -p "$dir/tools" || return 1
  SANITIZER_INVENTORY=$dir/tools PATH=$PWD/scripts/sanitizer-inventory:$PATH OUT=$dir/steps \
    bash scripts/gpu-check.sh ${INVENTORY_STEPS:-${sanitizer_steps[*]}} | grep -A40 '^== summary'
  for t in memcheck racecheck synccheck initcheck; do
    ls "$dir/tools" | grep -q "^$t\." || { echo "no kernel list for $t"; return 1; }
    cat "$dir/tools/$t".* | sort -u >"$dir/$t.merged"
    rm -f "$dir/tools/$t".*
    mv "$dir/$t.merged" "$dir/tools/$t.all"
  done
  tar -czf "$dir/steps.tgz" -C "$dir" steps && rm -rf "$dir/steps"
}
ncu_kernels() {  # ncu_kernels STEP TOP "BENCH ARGS" REGEX...: Nsight Compute's full set on the first launch of
  # each kernel that REGEX matches in `dflash-bench BENCH ARGS`: its details page, then scripts/ncu-hotspots.py's
  # stall reasons and TOP hottest SASS lines, in the step's log
  local name=$1 top=$2 args=$3; shift 3
  step "$name" timeout 500 bash -c "rc=0; for k in $*; do r=$out/ncu-\${k//[^a-z_]/}; \
    ncu --set full -k \"regex:\$k\" -c 1 -o \$r -f ./build/dflash-bench $args >/dev/null && \
    ncu --import \$r.ncu-rep --page details --print-units base && python3 scripts/ncu-hotspots.py \$r.ncu-rep $top \
    || rc=1; rm -f \$r.ncu-rep; done; exit \$rc"
}
mode_ab() {  # mode_ab STEP VARIABLE A B: qwen3-8b 4096:512 under VARIABLE=A, B, A, B, then the online step
  # with --arena-gb=7 and 65536:512 under A and B, in one call (a kernel mode's A/B in the step)
  local name=$1 var=$2 a=$3 b=$4
  step "$name" timeout 590 bash -c "for m in $a $b $a $b; do echo \"$var=\$m\"; \
    env $var=\$m ./build/dflash-bench step --cuda --model=qwen3-8b --bucket=4096:512 --steps=20 || exit 1; done; \
    for m in $a $b; do echo \"$var=\$m\"; env $var=\$m ./build/dflash-bench step --cuda --online --model=qwen3-8b \
    --bucket=4096:512 --steps=20 --arena-gb=7 || exit 1; env $var=\$m ./build/dflash-bench step --cuda \
    --model=qwen3-8b --bucket=65536:512 --steps=5 || exit 1; done"
}
for s in "${steps[@]}"; do
  case $s in
    build) step build bash -c "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build -j 16" \
             || { printf '%s\n' "${summary[@]}"; exit 1; } ;;
    build-base)  # the AB_BASE tree of gpu-prepare.sh (this tree with .deps/base's files) into build-base
      step build-base bash -c "[ -d .deps/base ] || { echo 'no .deps/base: run AB_BASE=<commit> scripts/gpu-prepare.sh'; \
        exit 1; }; echo \"base \$(cat .deps/base-commit)\"; rm -rf /tmp/base-tree && mkdir -p /tmp/base-tree && \
        tar --exclude=./build --exclude=./build-base -cf - . | tar -xf - -C /tmp/base-tree && \
        cp -r .deps/base/. /tmp/base-tree/ && cmake -S /tmp/base-tree -B build-base -G Ninja \
        -DCMAKE_BUILD_TYPE=Release && cmake --build build-base -j 16 --target dflash-bench" ;;
    norms-ab)  # this tree against build-base: the target's forward at 4096 and the online step (--arena-gb=7),
      # interleaved base, new, base, new
      step norms-ab timeout 590 bash -c "for b in build-base build build-base build; do echo \"== \$b\"; \
        ./\$b/dflash-bench target --cuda --model=qwen3-8b --seq=4096 --steps=10 || exit 1; \
        ./\$b/dflash-bench step --cuda --online --model=qwen3-8b --bucket=4096:512 --steps=20 --arena-gb=7 || exit 1; \
        done" ;;
    step-ab)  # this tree against build-base: the drafter step at 4096:512 and 1024:128 (default arena), interleaved
      step step-ab timeout 590 bash -c "for b in build-base build build-base build; do echo \"== \$b\"; \
        ./\$b/dflash-bench step --cuda --model=qwen3-8b --bucket=4096:512 --steps=20 || exit 1; \
        ./\$b/dflash-bench step --cuda --model=qwen3-8b --bucket=1024:128 --steps=20 || exit 1; done" ;;
    profile-online-ab)  # the online step's table from build-base, then from build
      step profile-online-ab timeout 400 bash -c "for b in build-base build; do echo \"== \$b\"; \
        ./\$b/dflash-bench profile --cuda --online --model=qwen3-8b --bucket=4096:512 --arena-gb=7 || exit 1; done" ;;
    tests)
      if [ "$gpus" -ge 2 ]; then step tests timeout 500 ./build/dflash-tests --test-suite='gpu*'
      else step tests timeout 500 ./build/dflash-tests --test-suite='gpu*' --test-suite-exclude='gpu2*'; fi ;;
    cpu-tests) step cpu-tests ./build/dflash-tests --test-suite-exclude='gpu*' ;;
    memcheck) step memcheck san memcheck 500 'gpu-sanitize,gpu-attention' ;;
    racecheck) step racecheck san racecheck 560 'gpu-sanitize,gpu-misc' ;;
    racecheck-dkdv) step racecheck-dkdv san racecheck 300 'gpu-attention' \
      --test-case='CUDA kernel versions 1 and 2 agree*' --subcase='B 2? S 1100*,hd 64 with two chunks*' ;;
    synccheck) step synccheck san synccheck 560 'gpu-sanitize,gpu-attention,gpu-misc' ;;
    sanitize-ws)  # the query side's ws mode (producer warpgroup, mbarrier ring, ping-pong turns) under all four
      # tools, on the ws test's two smaller subcases (a doctest filter splits at commas, hence "?")
      for tool in memcheck racecheck synccheck initcheck; do
        step "sanitize-ws-$tool" san "$tool" 300 'gpu-attention' --test-case='*query side in the ws mode*' \
          --subcase='B 2? S 1100*,hd 64? GQA 1*'
      done ;;
    dkdv-ab)  # dk/dv's decoupled mode against ws in the step (see mode_ab)
      mode_ab dkdv-ab DFLASH_ATTENTION_DKDV decoupled ws ;;
    sanitize-dkdv-ws)  # dk/dv's ws mode: memcheck and synccheck on gpu-attention, racecheck on the version test's
      # small two-chunk subcase (which runs shared, decoupled and ws)
      step sanitize-dkdv-ws-memcheck san memcheck 300 'gpu-attention'
      step sanitize-dkdv-ws-synccheck san synccheck 300 'gpu-attention'
      step sanitize-dkdv-ws-racecheck san racecheck 300 'gpu-attention' \
        --test-case='CUDA kernel versions 1 and 2 agree*' --subcase='hd 64 with two chunks*' ;;
    modes-short)  # the attention backward's modes at the short qwen3-8b buckets (1024:128 and 2048:256, where dk/dv
      # runs split and dq its own kernel by default), interleaved: default, dk/dv ws, ws with dq fused, decoupled,
      # shared, then the first three again (--arena-gb=4: nothing recomputed)
      step modes-short timeout 500 bash -c "for m in default ws ws+fused decoupled shared default ws ws+fused; do \
        case \$m in default) e=();; ws+fused) e=(DFLASH_ATTENTION_DKDV=ws DFLASH_ATTENTION_DQ=fused);; \
        *) e=(DFLASH_ATTENTION_DKDV=\$m);; esac; echo \"== \$m\"; env \"\${e[@]}\" ./build/dflash-bench step --cuda \
        --model=qwen3-8b --bucket=1024:128 --bucket=2048:256 --steps=20 --arena-gb=4 | grep -E '^ +[0-9]+:' \
        || exit 1; done" ;;
    dq-ab)  # dq in its own kernel against the fused backward (dq summed in dk/dv's kernel) in the step
      mode_ab dq-ab DFLASH_ATTENTION_DQ separate fused ;;
    fused-smoke)  # the fused backward's test case alone, under a timeout (its turns wait across CTAs)
      step fused-smoke timeout 200 ./build/dflash-tests --test-case='version 2*fused backward*' ;;
    sanitize-fused-dq)  # the fused backward under memcheck, synccheck and racecheck (its small cases)
      step sanitize-fused-dq-memcheck san memcheck 300 'gpu-attention' --test-case='version 2*fused backward*'
      step sanitize-fused-dq-synccheck san synccheck 300 'gpu-attention' --test-case='version 2*fused backward*'
      step sanitize-fused-dq-racecheck san racecheck 300 'gpu-attention' --test-case='version 2*fused backward*' \
        --subcase='GQA 1*' ;;
    sanitize-wide)  # the forward's 128-key tiles (its ring of three) under memcheck, racecheck and synccheck, on the
      # wide test's two smaller subcases (a doctest filter splits at commas, hence "?"); racecheck took
      # 298 s of its 300 on both (2026-12-02), so it runs the smaller one and gets more time
      for tool in memcheck synccheck; do
        step "sanitize-wide-$tool" san "$tool" 300 'gpu-attention' --test-case='*over 128-key tiles*' \
          --subcase='B 2? S 1100*,hd 64? GQA 1*'
      done
      step sanitize-wide-racecheck san racecheck 400 'gpu-attention' --test-case='*over 128-key tiles*' \
        --subcase='hd 64? GQA 1*' ;;
    keys-ab)  # the forward's ws mode over 64- against 128-key tiles in the step (see mode_ab)
      mode_ab keys-ab DFLASH_ATTENTION_FORWARD_KEYS 64 128 ;;
    query-ab)  # the query side's modes in the step (see mode_ab)
      mode_ab query-ab DFLASH_ATTENTION_QUERY lockstep ws ;;
    initcheck) step initcheck san initcheck 560 'gpu-sanitize,gpu-misc' ;;
    sanitize-spec)  # the decode kernels (cached attention, argmax, acceptance, row copies) under all four tools;
      # excluded by test case: the Qwen3-8B-sized random target (minutes under a sanitizer; the golden and
      # eager cases and the decode-ops case run the same kernels)
      # racecheck runs the decode-ops case alone (the same kernels; the golden case took over 200 s under it)
      for tool in memcheck racecheck synccheck initcheck; do
        if [ "$tool" = racecheck ]; then
          step "sanitize-spec-$tool" san "$tool" 300 'gpu-spec' --test-case='the decode ops on the GPU match*'
        else
          step "sanitize-spec-$tool" san "$tool" 200 'gpu-spec' \
            --test-case-exclude='a random target at Qwen3-8B dims*'
        fi
      done ;;
    sanitize-fused)  # the target's fused kernels (fused_norms.cu, swiglu_halves) under all four tools
      for tool in memcheck racecheck synccheck initcheck; do
        step "sanitize-fused-$tool" san "$tool" 200 'gpu-ops' --test-case='fused add_rmsnorm and rmsnorm_rope*,swiglu_halves*'
      done ;;
    sanitize-spec-racecheck) step sanitize-spec-racecheck san racecheck 300 'gpu-spec' \
      --test-case='the decode ops on the GPU match*' ;;
    initcheck-graph) step initcheck-graph san initcheck 200 'gpu-misc' \
      --test-case='causal_attention recorded as a CUDA graph replays bit for bit like eager' ;;
    profile) step profile timeout 400 bash -c "rc=0; for a in '--model=qwen3-8b --bucket=4096:512' \
      '--model=qwen3-8b --bucket=4096:512 --no-checkpointing' '--model=qwen3-8b --bucket=1024:128' \
      '--model=qwen3-8b --bucket=65536:512' '--model=small --bucket=512:64'; do \
      ./build/dflash-bench profile --cuda \$a || rc=1; done; exit \$rc" ;;
    target) step target timeout 300 bash -c "./build/dflash-bench target --cuda --model=qwen3-8b --seq=1024 \
      --seq=4096 --seq=16384 --steps=10 && ./build/dflash-bench profile --cuda --target --seq=4096" ;;
    online) step online timeout 300 ./build/dflash-bench step --cuda --online --model=qwen3-8b --bucket=4096:512 \
      --steps=20 ;;
    online-7) step online-7 timeout 400 bash -c "./build/dflash-bench step --cuda --online --model=qwen3-8b \
      --bucket=4096:512 --steps=20 --arena-gb=7 && ./build/dflash-bench step --cuda --online --model=qwen3-8b \
      --bucket=4096:512 --steps=20 --arena-gb=7 --gemm-tuning" ;;
    chunks-ab)  # the lm_head's rows per chunk (--chunk-rows) in the online step (--arena-gb=7) and in qwen3-8b
      # 1024:128 alone (--arena-gb=4), interleaved: fewer chunks read the 1.24 GB lm_head fewer times
      step chunks-ab timeout 590 bash -c "for c in 1024 7680 3840 1024 7680 3840; do echo \"chunk-rows=\$c\"; \
      ./build/dflash-bench step --cuda --online --model=qwen3-8b --bucket=4096:512 --steps=20 --arena-gb=7 \
      --chunk-rows=\$c || exit 1; done; for c in 1024 7680 1024 7680; do echo \"chunk-rows=\$c\"; \
      ./build/dflash-bench step --cuda --model=qwen3-8b --bucket=1024:128 --steps=30 --arena-gb=4 \
      --chunk-rows=\$c || exit 1; done" ;;
    fusion-ab)  # the target's fused norms against DFLASH_TARGET_FUSION=off in one call: the target's forward
      # at 4096 (off, on, off, on), the online step with --arena-gb=7 (off, on), then the target's profile
      step fusion-ab timeout 500 bash -c "for f in off on off on; do echo \"DFLASH_TARGET_FUSION=\$f\"; \
        DFLASH_TARGET_FUSION=\$f ./build/dflash-bench target --cuda --model=qwen3-8b --seq=4096 --steps=10 || exit 1; \
        done; for f in off on; do \
        echo \"DFLASH_TARGET_FUSION=\$f\"; DFLASH_TARGET_FUSION=\$f ./build/dflash-bench step --cuda --online \
        --model=qwen3-8b --bucket=4096:512 --steps=20 --arena-gb=7 || exit 1; done; \
        ./build/dflash-bench profile --cuda --target --seq=4096" ;;
    clocks) step clocks timeout 500 bash scripts/gpu-clocks.sh "$out/clocks" \
      "step --cuda --model=qwen3-8b --bucket=4096:512 --arena-gb=7 --steps=60" \
      "step --cuda --online --model=qwen3-8b --bucket=4096:512 --arena-gb=7 --steps=60" \
      "step --cuda --model=qwen3-8b --bucket=4096:512 --arena-gb=7 --steps=60" \
      "target --cuda --model=qwen3-8b --seq=4096 --steps=60" ;;
    profile-online) step profile-online timeout 300 ./build/dflash-bench profile --cuda --online --model=qwen3-8b \
      --bucket=4096:512 --arena-gb=7 ;;
    profile-1024) step profile-1024 timeout 200 ./build/dflash-bench profile --cuda --model=qwen3-8b --bucket=1024:128 ;;
    cudnn-plans)  # every plan cuDNN lists for the target's causal attention, timed alone beside the default
      step cudnn-plans timeout 500 ./build/dflash-bench causal-attention --plans --seq=4096 --seq=16384 --seq=32768 ;;
    new-cases)  # the GPU test cases this session's changes touch (a quick check before the whole suites)
      step new-cases timeout 200 ./build/dflash-tests --test-suite='gpu*' \
        --test-case='*by TMA give*,*TMA loads apply*' ;;
    sanitize-tma)  # the producers' TMA loads (dk/dv's chunks, the forward's and dq's key tiles) under the four
      # tools; racecheck and initcheck on the smaller subcases (a doctest filter splits at commas, hence "?")
      step sanitize-tma-memcheck san memcheck 300 'gpu-attention' --test-case='*by TMA give*'
      step sanitize-tma-synccheck san synccheck 300 'gpu-attention' --test-case='*by TMA give*'
      for tool in racecheck initcheck; do
        step "sanitize-tma-$tool" san "$tool" 300 'gpu-attention' --test-case='*by TMA give*' --subcase='hd 64*,B 2?*'
      done ;;
    tma-ab)  # dk/dv's chunks by the producer threads' cp.async against TMA in the step (see mode_ab)
      mode_ab tma-ab DFLASH_ATTENTION_DKDV_LOADS threads tma ;;
    loads-ab)  # every producer by threads (DFLASH_ATTENTION_DKDV_LOADS and _QUERY_LOADS = threads) against the
      # default (TMA), interleaved: qwen3-8b 4096:512 twice each, then the online step (--arena-gb=7),
      # 65536:512 and 1024:128 under each
      step loads-ab timeout 590 bash -c "t=(DFLASH_ATTENTION_DKDV_LOADS=threads DFLASH_ATTENTION_QUERY_LOADS=threads); \
        for m in threads tma threads tma; do echo \"== loads \$m\"; e=(); [ \$m = threads ] && e=(\"\${t[@]}\"); \
        env \"\${e[@]}\" ./build/dflash-bench step --cuda --model=qwen3-8b --bucket=4096:512 --steps=20 || exit 1; done; \
        for m in threads tma; do echo \"== loads \$m\"; e=(); [ \$m = threads ] && e=(\"\${t[@]}\"); \
        env \"\${e[@]}\" ./build/dflash-bench step --cuda --online --model=qwen3-8b --bucket=4096:512 --steps=20 \
        --arena-gb=7 && env \"\${e[@]}\" ./build/dflash-bench step --cuda --model=qwen3-8b --bucket=65536:512 \
        --steps=5 && env \"\${e[@]}\" ./build/dflash-bench step --cuda --model=qwen3-8b --bucket=1024:128 \
        --steps=30 || exit 1; done" ;;
    attention-4096) step attention-4096 timeout 200 ./build/dflash-bench attention --seq=4096 --anchors=512 --reps=20 ;;
    ce-ab)  # the lm_head's training rows: DFLASH_CE_SLICE_BYTES=0 (read twice) against slices of 40 KB (8 CTAs a
      # row for the qwen3 vocabulary) and 96 KB (4), interleaved, in qwen3-8b 4096:512's table
      step ce-ab timeout 400 bash -c "for b in 0 40960 98304 0 40960 98304; do echo \"== DFLASH_CE_SLICE_BYTES=\$b\"; \
        DFLASH_CE_SLICE_BYTES=\$b ./build/dflash-bench profile --cuda --model=qwen3-8b --bucket=4096:512 | \
        grep -E 'linear_cross_entropy +-|^kernels' || exit 1; done" ;;
    ce-steps)  # the steps with the lm_head's rows read twice (DFLASH_CE_SLICE_BYTES=0) and once (the default),
      # interleaved: the online step (--arena-gb=7), qwen3-8b 4096:512 and 1024:128
      step ce-steps timeout 500 bash -c "for b in 0 '' 0 ''; do echo \"== DFLASH_CE_SLICE_BYTES=\$b\"; \
        env DFLASH_CE_SLICE_BYTES=\$b ./build/dflash-bench step --cuda --online --model=qwen3-8b --bucket=4096:512 \
        --steps=20 --arena-gb=7 && env DFLASH_CE_SLICE_BYTES=\$b ./build/dflash-bench step --cuda --model=qwen3-8b \
        --bucket=4096:512 --steps=20 && env DFLASH_CE_SLICE_BYTES=\$b ./build/dflash-bench step --cuda \
        --model=qwen3-8b --bucket=1024:128 --steps=30 || exit 1; done" ;;
    sanitize-ce)  # the lm_head's training rows read once (clusters of CTAs, distributed shared memory) under
      # memcheck and synccheck, on their GPU cases
      step sanitize-ce-memcheck san memcheck 200 'gpu-ops' --test-case='ce rows*,*linear_cross_entropy*'
      step sanitize-ce-synccheck san synccheck 200 'gpu-ops' --test-case='ce rows*' ;;
    mutants-gpu) step mutants-gpu env DFLASH_MUTANTS_DIR="${TMPDIR:-/tmp}/dflash-mutants-gpu" DFLASH_MUTANTS_TIMEOUT=200 \
      DFLASH_MUTANTS_BUDGET_S="${MUTANTS_BUDGET_S:-440}" bash scripts/mutants.sh --gpu ${MUTANTS_WORDS:-} ;;
    inventory-all)  # the kernels the one-GPU suites launch (DFLASH_KERNEL_INVENTORY), in $out/inventory/all
      # (the suites' own verdict counts too: a failing case fails the step)
      step inventory-all bash -c "set -o pipefail; rm -rf $out/inventory/all && mkdir -p $out/inventory/all && \
        DFLASH_KERNEL_INVENTORY=$out/inventory/all/all timeout 500 ./build/dflash-tests --test-suite='gpu*' \
        --test-suite-exclude='gpu2*' | tail -n 4 && ls $out/inventory/all | grep -q . " ;;
    inventory-tools)  # the sanitizer steps' kernels, by tool (inventory_tools; INVENTORY_STEPS="STEP ..." for some)
      step inventory-tools inventory_tools ;;
    sanitizer-coverage)  # every kernel function of ours that the suites launch runs under every tool in some step
      # (after inventory-all and inventory-tools; scripts/sanitizer-coverage.py, also on the development machine)
      step sanitizer-coverage python3 scripts/sanitizer-coverage.py $out/inventory ;;
    racecheck-probe)  # which feature of ce_rows_slice_kernel racecheck cannot handle (scripts/probes/)
      step racecheck-probe bash scripts/probes/racecheck-probe.sh ;;
    racecheck-ce)  # the lm_head's row kernels (ce_rows_slice_kernel in clusters of 1 to 8, the twice-reading one) under
      # racecheck, on their gpu-ops cases, unfiltered: with --kernel-name kns=ce_rows_slice the tool itself failed
      # ("failed to handle a hardware exception") at the first launch, while the same kernel alone and the same case
      # unfiltered run clean (racecheck-probe, 2026-12-04). cuBLAS's split-K kernel (nvjet_*splitK*) in the same cases
      # draws racecheck reports inside cuBLAS; the step passes when the cases pass and no report names another kernel.
      step racecheck-ce racecheck_judged racecheck-ce 300 gpu-ops 'ce rows*' ;;
    sanitize-ops)  # the op-level kernels no other sanitizer step runs under every tool (scripts/sanitizer-coverage.py,
      # 2026-12-04): elementwise, sum, concat and embedding backward, casts, rmsnorm's backward, the strided row
      # copies and fills (group heads), version 1's attention, the CE rows' backward, the speculative round's control
      # ops and row copies, and GEMM tuning's fill and compare; racecheck judged as racecheck-ce's (cuBLAS draws reports)
      for tool in memcheck synccheck initcheck; do
        step "sanitize-ops-$tool" san "$tool" 300 "$ops_suites" --test-case="$ops_cases"
      done
      step sanitize-ops-racecheck racecheck_judged sanitize-ops-racecheck 400 "$ops_suites" "$ops_cases" ;;
    sanitize-new)  # the kernels the last sessions changed (linear_ce's rows, swiglu, the norms: rmsnorm's
      # resident forward, the target's add_rmsnorm and rmsnorm_rope) under memcheck and initcheck, on their GPU cases
      # (not the attention's fused backward: its case's timeout child does not run under a sanitizer)
      step sanitize-new-memcheck san memcheck 200 'gpu*' --test-case='*linear_cross_entropy*,*swiglu*,*rmsnorm*,*fused*' \
        --test-case-exclude='version 2*'
      step sanitize-new-initcheck san initcheck 200 'gpu*' --test-case='*linear_cross_entropy*,*swiglu*,*rmsnorm*,*fused*' \
        --test-case-exclude='version 2*' ;;
    ncu-drafter)  # the drafter's memory-bound kernels in the qwen3-8b step at 4096:512: Nsight Compute's figures
      # for the first two launches of each (the step's shapes; the bench records before it replays)
      step ncu-drafter timeout 500 bash -c "rc=0; for k in ce_rows_forward swiglu_backward rmsnorm_backward \
        rmsnorm_forward rope_kernel; do r=$out/ncu-\$k; ncu --set full -k regex:\$k -c 2 -o \$r -f \
        ./build/dflash-bench step --cuda --model=qwen3-8b --bucket=4096:512 --steps=1 >/dev/null && ncu --import \
        \$r.ncu-rep --page details --print-units base | grep -E \
        '^  [a-zA-Z_]|Duration|Throughput|Registers Per|Occupancy|Issue Slots Busy|Executed Ipc A|Grid Size|L2 Hit' \
        || rc=1; rm -f \$r.ncu-rep; done; exit \$rc" ;;
    attention) step attention timeout 400 ./build/dflash-bench attention --reps=20 ;;
    attention-tests) step attention-tests bash -c "./build/dflash-tests --test-suite='gpu-attention,attention*' \
      && DFLASH_ATTENTION=v1 ./build/dflash-tests --test-suite='gpu-attention'" ;;
    bench-small) step bench-small timeout 300 ./build/dflash-bench step --cuda --model=small --bucket=512:64 \
      --bucket=1024:128 --bucket=2048:256 --steps=30 ;;
    bench-qwen3-8b) step bench-qwen3-8b timeout 500 bash -c "./build/dflash-bench step --cuda --model=qwen3-8b \
      --bucket=1024:128 --bucket=2048:256 --bucket=4096:512 --steps=20 && ./build/dflash-bench step --cuda \
      --model=qwen3-8b --bucket=1024:128 --bucket=4096:512 --steps=20 --no-checkpointing" ;;
    recompute) step recompute timeout 590 bash -c "rc=0; for a in '--recompute=5' '--recompute=4+1' '--recompute=3+2' \
      '--recompute=4' '--arena-gb=2.45' '--arena-gb=2.45 --chunk-rows=512'; do ./build/dflash-bench step --cuda \
      --model=qwen3-8b --bucket=4096:512 --steps=20 \$a || rc=1; done; exit \$rc" ;;
    gemms) step gemms timeout 200 ./build/dflash-bench gemms --cuda --model=qwen3-8b --bucket=4096:512 ;;
    gemms-sustained)  # every GEMM shape of the online step, each candidate timed over 300 launches (at the clock
      # the power cap holds) under nvidia-smi's samples; cuBLAS's own algorithm timed before and after
      step gemms-sustained timeout 560 bash scripts/gpu-clocks.sh "$out/gemms-clocks" \
        "gemms --cuda --model=qwen3-8b --bucket=4096:512 --online --reps=300 --candidates=8" ;;
    online-tuned-ab)  # the online step (--arena-gb=7) untuned, tuned with DFLASH_GEMM_TUNING_REPS (default
      # 200) launches a candidate, untuned again, under nvidia-smi's samples
      step online-tuned-ab timeout 590 bash -c "a='step --cuda --online --model=qwen3-8b --bucket=4096:512 \
        --arena-gb=7 --steps=40'; bash scripts/gpu-clocks.sh $out/online-a \"\$a\" && \
        DFLASH_GEMM_TUNING_REPS=\${TUNING_REPS:-200} bash scripts/gpu-clocks.sh $out/online-b \"\$a --gemm-tuning\" && \
        bash scripts/gpu-clocks.sh $out/online-c \"\$a\"" ;;
    ncu-attention) ncu_kernels ncu-attention 45 "attention --seq=4096 --anchors=512 --reps=1" \
      '^forward_kernel' '^dq_kernel' '^dkdv_kernel' ;;
    ncu-norms)  # the target's memory-bound fused kernels at 4096
      ncu_kernels ncu-norms 30 "target --cuda --model=qwen3-8b --seq=4096 --steps=1" \
        rmsnorm_rope add_rmsnorm swiglu_halves ;;
    profile-4096) step profile-4096 timeout 200 ./build/dflash-bench profile --cuda --model=qwen3-8b --bucket=4096:512 ;;
    profile-spec) step profile-spec timeout 300 ./build/dflash-bench profile --cuda --spec --model=qwen3-8b \
      --context=1024 --context=4096 ;;
    bench-tuned) step bench-tuned timeout 300 ./build/dflash-bench step --cuda --model=qwen3-8b --bucket=1024:128 \
      --bucket=2048:256 --bucket=4096:512 --steps=20 --gemm-tuning ;;
    bench-4096) step bench-4096 timeout 300 bash -c "./build/dflash-bench step --cuda --model=qwen3-8b --bucket=4096:512 \
      --steps=20 --arena-gb=2.49 && ./build/dflash-bench step --cuda --model=qwen3-8b --bucket=4096:512 --steps=20" ;;
    bench-spec) step bench-spec timeout 500 ./build/dflash-bench spec --cuda --model=qwen3-8b --context=1024 \
      --context=4096 --steps=20 ;;
    bench-generate) step bench-generate timeout 500 ./build/dflash-bench generate --cuda --model=qwen3-8b \
      --batch=32 --batch=128 --context=512 --context=2048 --steps=20 ;;
    sanitize-generate)  # batched decoding's kernels (slot attention, scatter, gather, control, keyed draws)
      # under all four tools; the Qwen3-8B-dims timing case excluded (minutes under a sanitizer)
      for tool in memcheck racecheck synccheck initcheck; do
        step "sanitize-generate-$tool" san "$tool" 300 'gpu-generate' --test-case-exclude='the decode step at Qwen3-8B*'
      done ;;
    bench-long) step bench-long timeout 500 ./build/dflash-bench step --cuda --model=qwen3-8b --bucket=8192:512 \
      --bucket=16384:512 --bucket=32768:512 --bucket=65536:512 --steps=10 ;;
    anchors-small) step anchors-small timeout 500 env PYTHONUNBUFFERED=1 python3 .anchors/ref_dflash.py --modes compiled \
      --hidden 1024 --inter 3072 --layers 2 --heads 16 --kv-heads 8 --head-dim 64 --buckets 512:64,1024:128,2048:256 ;;
    anchors-qwen3-8b) step anchors-qwen3-8b timeout 590 env PYTHONUNBUFFERED=1 python3 .anchors/ref_dflash.py \
      --modes compiled --buckets 1024:128,2048:256,4096:512 ;;
    anchors-4096) step anchors-4096 timeout 400 env PYTHONUNBUFFERED=1 python3 .anchors/ref_dflash.py \
      --modes compiled --buckets 4096:512 ;;
    anchors-short) step anchors-short timeout 400 env PYTHONUNBUFFERED=1 python3 .anchors/ref_dflash.py \
      --modes compiled --buckets 1024:128,2048:256 ;;
    anchors-decode) step anchors-decode timeout 400 bash -c "PYTHONUNBUFFERED=1 python3 scripts/anchors/ref_decode.py \
      1024,4096 && PYTHONUNBUFFERED=1 python3 scripts/anchors/ref_decode.py 1024,4096 --compile" ;;
    anchors-target) step anchors-target timeout 400 env PYTHONUNBUFFERED=1 python3 .anchors/ref_target.py 1024,4096,16384 ;;
    anchors-long) step anchors-long timeout 500 env PYTHONUNBUFFERED=1 python3 .anchors/ref_dflash.py --modes flex \
      --buckets 8192:512,16384:512,32768:512,65536:512 ;;
    tiny-job) step tiny-job timeout 300 ./build/dflash-train --config configs/tiny.toml --job.dump_folder=/tmp/tiny-gpu \
      --target.path=/tmp/tiny-gpu/target --data.train=/tmp/tiny-gpu/data/train.jsonl \
      --data.eval=/tmp/tiny-gpu/data/eval.jsonl --eval.spec_prompts=/tmp/tiny-gpu/data/eval.jsonl \
      --checkpoint.every=0 --metrics.progress=false ;;
    *) echo "gpu-check: unknown step '$s'"; exit 2 ;;
  esac
done
echo "== summary"; printf '%s\n' "${summary[@]}"
exit $failed
