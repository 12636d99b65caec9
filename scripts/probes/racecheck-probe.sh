#!/usr/bin/env bash
# On the GPU host (gpu-check.sh racecheck-probe): builds the two racecheck probes into build/ and runs
# each variant under compute-sanitizer's racecheck, one line "== VARIANT: rc N" each (9: hazards found;
# other non-zero: the tool or the kernel failed). Narrows racecheck's "failed to handle a hardware
# exception" on ce_rows_slice_kernel to a feature.
set -uo pipefail
cd "$(dirname "$0")/../.."
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
flags=(-std=c++20 -O2 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I.)
"$nvcc" "${flags[@]}" scripts/probes/racecheck_clusters.cu -o build/racecheck_clusters || exit 1
"$nvcc" "${flags[@]}" scripts/probes/racecheck_ce_rows.cu kernels/cuda/linear_ce.cu -o build/racecheck_ce_rows || exit 1
# the same kernel without its register cap (__launch_bounds__(256, 5): 48 registers)
sed 's/__launch_bounds__(kSliceThreads, 5)//' kernels/cuda/linear_ce.cu > build/linear_ce_unbounded.cu
"$nvcc" "${flags[@]}" scripts/probes/racecheck_ce_rows.cu build/linear_ce_unbounded.cu -o build/racecheck_ce_rows_unbounded || exit 1
# the build's flags for kernels/cuda/*.cu (CMake's architecture 90: sm_90 code and compute_90 PTX, -lineinfo)
"$nvcc" -std=c++20 -O2 --expt-relaxed-constexpr -I. -lineinfo -gencode=arch=compute_90,code=[sm_90,compute_90] \
  scripts/probes/racecheck_ce_rows.cu kernels/cuda/linear_ce.cu -o build/racecheck_ce_rows_buildflags || exit 1
run() {  # run LABEL TOOL-ARGS... -- COMMAND...
  local label=$1; shift
  local args=()
  while [ "$1" != -- ]; do args+=("$1"); shift; done; shift
  timeout 60 compute-sanitizer "${args[@]}" --error-exitcode 9 "$@" 2>&1 | tail -n 6
  echo "== $label: rc ${PIPESTATUS[0]}"
}
for v in plain cluster_sync split map dynamic mixed bounded; do
  for c in 0 1 2; do run "$v cluster $c" --tool racecheck --racecheck-report all -- build/racecheck_clusters $v $c; done
done
for c in 1 2; do
  run "ce_rows memcheck (control), C $c" --tool memcheck -- build/racecheck_ce_rows $c
  run "ce_rows racecheck (report all), C $c" --tool racecheck --racecheck-report all -- build/racecheck_ce_rows $c
  run "ce_rows racecheck (default report), C $c" --tool racecheck -- build/racecheck_ce_rows $c
  run "ce_rows unbounded racecheck, C $c" --tool racecheck --racecheck-report all -- build/racecheck_ce_rows_unbounded $c
done
for c in 1 2; do
  run "ce_rows racecheck filtered to the kernel (as racecheck-ce), C $c" --tool racecheck --racecheck-report all \
    --kernel-name kns=ce_rows_slice -- build/racecheck_ce_rows $c
  run "ce_rows built as the build builds it, C $c" --tool racecheck --racecheck-report all \
    -- build/racecheck_ce_rows_buildflags $c
  run "ce_rows built as the build builds it, filtered, C $c" --tool racecheck --racecheck-report all \
    --kernel-name kns=ce_rows_slice -- build/racecheck_ce_rows_buildflags $c
done
# the test case that failed, filtered as racecheck-ce filters it, then unfiltered (the kernels that report)
run "test case, filtered" --tool racecheck --racecheck-report all --kernel-name kns=ce_rows_slice -- \
  ./build/dflash-tests --test-suite=gpu-ops --test-case='ce rows read once by clusters*'
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 ./build/dflash-tests --test-suite=gpu-ops \
  --test-case='ce rows read once by clusters*' > build/racecheck-ce-unfiltered.log 2>&1
echo "== test case, unfiltered: rc $?; the kernels named in its reports:"
grep -oE 'access at (void )?[A-Za-z_][A-Za-z0-9_:]*' build/racecheck-ce-unfiltered.log | sort | uniq -c | sort -rn | head -n 12
tail -n 5 build/racecheck-ce-unfiltered.log
exit 0
