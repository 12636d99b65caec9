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
exit 0
