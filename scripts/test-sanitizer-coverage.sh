#!/usr/bin/env bash
# Checks the sanitizer coverage tools of scripts/gpu-test.sh's coverage step on the CPU: scripts/sanitizer-inventory's stand-in
# for compute-sanitizer (drops the tool's options, names the list by the tool) and
# scripts/sanitizer-coverage.py on made-up kernel lists (what is covered passes; a kernel function a
# tool never runs, a tool without a list and an empty inventory fail; an instantiation a tool misses
# is listed but passes). Part of scripts/test.sh; a second.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "test-sanitizer-coverage: $*"; failures=$((failures + 1)); }

# the stand-in: runs the command after the options, with the tool's list prefix
got=$(SANITIZER_INVENTORY=$tmp/inv "$here/scripts/sanitizer-inventory/compute-sanitizer" --tool racecheck \
  --racecheck-report all --print-limit 0 --error-exitcode=9 --kernel-name kns=x sh -c 'echo "$DFLASH_KERNEL_INVENTORY $0"' arg0)
[ "$got" = "$tmp/inv/racecheck arg0" ] || fail "the stand-in ran '$got'"
SANITIZER_INVENTORY=$tmp/inv "$here/scripts/sanitizer-inventory/compute-sanitizer" --tool memcheck >/dev/null 2>&1 &&
  fail "the stand-in accepted no command"

# coverage: DIR/all/all.* and DIR/tools/<tool>.*
fill='void dflash::kernels::cuda::(anonymous namespace)::fill_kernel<float>(float*, long)'
fill16='void dflash::kernels::cuda::(anonymous namespace)::fill_kernel<__nv_bfloat16>(__nv_bfloat16*, long)'
attn='void dflash::kernels::cuda::dflash_attention_fwd_sm90<128>(dflash::kernels::cuda::Params)'
case_dir() {  # case_dir NAME: a fresh tree with every tool running everything
  local d=$tmp/$1
  mkdir -p "$d/all" "$d/tools"
  printf '%s\n' "$fill" "$fill16" "$attn" 'nvjet_sm90_tst_64x8' > "$d/all/all.1"
  for t in memcheck racecheck synccheck initcheck; do printf '%s\n' "$fill" "$fill16" > "$d/tools/$t.1"; printf '%s\n' "$attn" > "$d/tools/$t.2"; done
  echo "$d"
}
check() {  # check NAME WANT_RC PATTERN
  python3 "$here/scripts/sanitizer-coverage.py" "$tmp/$1" > "$tmp/$1.out" 2>&1
  local rc=$?
  [ "$rc" = "$2" ] || { fail "$1 gave exit status $rc, wanted $2:"; cat "$tmp/$1.out"; }
  grep -qE -- "$3" "$tmp/$1.out" || { fail "$1: no line matches '$3':"; cat "$tmp/$1.out"; }
}
case_dir covered >/dev/null
check covered 0 'every kernel function runs under every tool'
d=$(case_dir function-missed); printf '%s\n' "$fill" "$fill16" > "$d/tools/racecheck.2"
check function-missed 1 'racecheck never runs dflash::kernels::cuda::dflash_attention_fwd_sm90$'
d=$(case_dir instance-missed); printf '%s\n' "$fill" > "$d/tools/synccheck.1"
check instance-missed 0 '\(synccheck runs other instantiations of .*fill_kernel<__nv_bfloat16>'
d=$(case_dir tool-unlisted); rm "$d/tools/initcheck."*
check tool-unlisted 1 'initcheck: no list'
d=$(case_dir empty); printf 'nvjet_only\n' > "$d/all/all.1"
check empty 1 'no kernel of ours'
[ "$failures" -eq 0 ] && echo "test-sanitizer-coverage: the stand-in and 5 of 5 inventories judged right" || exit 1
