#!/usr/bin/env bash
# Nsight Compute's full set on the first launch of each kernel a regular expression names, in one
# dflash-bench run: its details page, then scripts/ncu-hotspots.py's stall reasons and TOP hottest SASS
# lines. On the GPU host; not part of the product (dev/README.md).
#   bash dev/ncu.sh TOP "BENCH ARGS" REGEX...
#   bash dev/ncu.sh 45 "attention --seq=4096 --anchors=512 --reps=1" '^forward_kernel' '^dkdv_kernel'
#   bash dev/ncu.sh 30 "target --cuda --model=qwen3-8b --seq=4096 --steps=1" rmsnorm_rope add_rmsnorm
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n '2,7p' "$0"; exit 2; }
top=$1 args=$2; shift 2
rc=0
for k in "$@"; do
  r=${TMPDIR:-/tmp}/ncu-${k//[^a-zA-Z0-9_]/}
  # shellcheck disable=SC2086
  ncu --set full -k "regex:$k" -c 1 -o "$r" -f ./build/dflash-bench $args >/dev/null &&
    ncu --import "$r.ncu-rep" --page details --print-units base &&
    python3 scripts/ncu-hotspots.py "$r.ncu-rep" "$top" || rc=1
  rm -f "$r.ncu-rep"
done
exit $rc
