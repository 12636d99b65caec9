#!/usr/bin/env bash
# Checks the choice of the GPUs a build is for: scripts/cuda-archs.sh with a stand-in nvidia-smi (none
# or a failing one: 80;90a; 9.0: 90a; two kinds: both, each once; an answer that is no compute
# capability: 80;90a; cmake arguments naming their own list, in either form: nothing), and CMake's
# refusals of a DFLASH_CUDA_ARCHS entry that is no compute capability and of an empty list (where nvcc
# is found; configures of a few seconds in a temporary folder). Part of scripts/test.sh.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "test-cuda-archs: $*"; failures=$((failures + 1)); }
mkdir -p "$tmp/bin"
smi() { printf '#!/usr/bin/env bash\n%s\n' "$1" >"$tmp/bin/nvidia-smi"; chmod +x "$tmp/bin/nvidia-smi"; }
want() {  # want WHAT EXPECTED [ARGS...]: cuda-archs.sh ARGS with the stand-in on PATH prints EXPECTED
  local what=$1 expected=$2 got; shift 2
  got=$(PATH="$tmp/bin:$PATH" bash "$here/scripts/cuda-archs.sh" "$@")
  [ "$got" = "$expected" ] || fail "$what: printed '$got', wanted '$expected'"
}
smi 'exit 9'
want "no GPU (nvidia-smi fails)" "80;90a"
smi 'echo 9.0'
want "an H100" "90a"
smi 'echo 8.6; echo 9.0; echo 8.6'
want "two A10s and an H100" "86;90a"
smi 'echo 12.0'
want "compute capability 12.0" "120"
smi 'echo "No devices were found"'
want "an answer that is no compute capability" "80;90a"
want "the caller's list" "" -G Ninja -DDFLASH_CUDA_ARCHS=86
want "the caller's list, typed" "" -DDFLASH_CUDA_ARCHS:STRING=86
want "the caller's list after -D" "" -D DFLASH_CUDA_ARCHS=86
smi 'echo 12.0'
want "another variable" "120" -DDFLASH_WERROR=ON
nvcc=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; }) || nvcc=""
if [ -n "$nvcc" ]; then
  cmake -S "$here" -B "$tmp/build" -G Ninja -DDFLASH_EXTRA_INCLUDE="$here/.deps/include" \
    -DDFLASH_CUDA_ARCHS="80;sm_90" >"$tmp/configure.log" 2>&1 && fail "cmake accepted DFLASH_CUDA_ARCHS=80;sm_90"
  tr -s ' \n' ' ' <"$tmp/configure.log" | grep -q 'DFLASH_CUDA_ARCHS = "80;sm_90": "sm_90" is not a compute capability; list them as CMake writes them, e.g. -DDFLASH_CUDA_ARCHS="80;86;89;90a;100;120"' ||
    { fail "cmake's refusal of sm_90 does not name the variable, the entry and the fix"; tail -n 8 "$tmp/configure.log"; }
  cmake -S "$here" -B "$tmp/build" -DDFLASH_CUDA_ARCHS="" >"$tmp/configure.log" 2>&1 &&
    fail "cmake accepted an empty DFLASH_CUDA_ARCHS"
  tr -s ' \n' ' ' <"$tmp/configure.log" | grep -q 'DFLASH_CUDA_ARCHS is empty: name at least one compute capability' ||
    { fail "cmake's refusal of an empty list does not say so"; tail -n 8 "$tmp/configure.log"; }
else
  echo "test-cuda-archs: no nvcc; CMake's refusal of a bad entry not checked"
fi
[ "$failures" -eq 0 ] && echo "test-cuda-archs: the build's GPUs chosen right" || exit 1
