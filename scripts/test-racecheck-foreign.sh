#!/usr/bin/env bash
# Checks scripts/racecheck-foreign.sh on made-up racecheck logs in both report formats: reports only in
# cuBLAS's kernels pass, and each of these fails: a report in one of ours (a name with spaces and
# parentheses), fewer reports printed than counted, a report whose kernel cannot be read, a failed test
# run, no summary line. Part of scripts/test.sh; a second.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
hazard() {  # hazard KERNEL_A KERNEL_B: one hazard as --racecheck-report all prints it
  printf '========= Error: Potential WAR hazard detected at __shared__ 0x28488 in block (0,59,0) :\n'
  printf '=========     Read Thread (31,0,0) at %s+0xaf0\n=========     Write Thread (256,0,0) at %s+0x2eb0\n' "$1" "$2"
  printf '=========     Current Value : 174, Incoming Value : 174\n'
}
race() {  # race KERNEL_A KERNEL_B: one hazard as the default report prints it
  printf '========= Error: Race reported between Write access at %s+0x1a0\n' "$1"
  printf '=========     and Read access at %s+0x2b0 [4 hazards]\n' "$2"
}
summary() { printf '[doctest] Status: %s!\n========= RACECHECK SUMMARY: %s hazards displayed (%s errors, 0 warnings)\n' "$@"; }
nv=nvjet_sm90_tst_64x8_64x16_1x1_h_bz_splitK_NNT
ours='void dflash::kernels::cuda::(anonymous namespace)::ce_rows_slice_kernel(const unsigned short*, int)'
{ hazard $nv $nv; hazard $nv $nv; summary SUCCESS 2 2; } > "$tmp/pass-all.log"
{ race $nv $nv; summary SUCCESS 1 1; } > "$tmp/pass-default.log"
summary SUCCESS 0 0 > "$tmp/pass-none.log"
{ hazard $nv "$ours"; summary SUCCESS 1 1; } > "$tmp/fail-ours.log"
{ race "$ours" $nv; summary SUCCESS 1 1; } > "$tmp/fail-ours-default.log"
{ hazard $nv $nv; summary SUCCESS 1 13830; } > "$tmp/fail-unprinted.log"
{ hazard $nv $nv | sed 's/ at nvjet/ nvjet/'; summary SUCCESS 1 1; } > "$tmp/fail-unread.log"
{ hazard $nv $nv; summary FAILURE 1 1; } > "$tmp/fail-tests.log"
hazard $nv $nv > "$tmp/fail-nosummary.log"
failures=0
for log in "$tmp"/*.log; do
  name=$(basename "$log" .log)
  bash "$here/scripts/racecheck-foreign.sh" "$log" nvjet_ > "$tmp/$name.out" 2>&1
  rc=$?
  case $name in pass-*) want=0 ;; *) want=1 ;; esac
  if [ "$rc" != "$want" ]; then
    echo "test-racecheck-foreign: $name gave exit status $rc, wanted $want:"; cat "$tmp/$name.out"; failures=$((failures + 1))
  fi
done
[ "$failures" -eq 0 ] && echo "test-racecheck-foreign: 9 of 9 logs judged right" || exit 1
