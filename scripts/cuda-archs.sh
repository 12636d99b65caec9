#!/usr/bin/env bash
# Prints the CUDA compute capabilities a build on this host is for (CMake's DFLASH_CUDA_ARCHS;
# docs/USER_GUIDE.md, "Supported GPUs"): the visible GPUs' own, as nvidia-smi reports them (9.0 as
# 90a, which adds the Hopper kernels), or, where no GPU answers (CI, a build host), 80;90a: one
# architecture of each path, so the portable and the Hopper kernels both compile, in a fraction of
# the time of CMake's default list (80;86;89;90a;100;120). Given cmake's arguments, it prints nothing
# when they name a list of their own (-DDFLASH_CUDA_ARCHS=..., or -D DFLASH_CUDA_ARCHS=...).
# scripts/build.sh (hence test.sh and train.sh), gpu-test.sh and gpu-bench.sh build with it, so none
# rebuilds after another. scripts/test-cuda-archs.sh tests it.
set -uo pipefail
prev=""
for a in "$@"; do
  case $a in
    -DDFLASH_CUDA_ARCHS[:=]*) exit 0 ;;
    DFLASH_CUDA_ARCHS[:=]*) [ "$prev" = -D ] && exit 0 ;;
  esac
  prev=$a
done
caps=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null) || caps=""
archs=()
for c in $caps; do
  if [[ ! $c =~ ^([1-9][0-9]?)\.([0-9])$ ]]; then archs=(); break; fi  # not a compute capability: no GPU's word
  a=${BASH_REMATCH[1]}${BASH_REMATCH[2]}
  [ "$a" = 90 ] && a=90a
  [[ " ${archs[*]:-} " == *" $a "* ]] || archs+=("$a")
done
if [ ${#archs[@]} -eq 0 ]; then
  echo "80;90a"
else
  (IFS=';'; echo "${archs[*]}")
fi
