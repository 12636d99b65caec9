#!/usr/bin/env bash
# The layer check (docs/DESIGN.md, "Layers"): no source file includes one from a higher folder.
# Order, bottom to top: kernels < runtime < graphs < model < data < train < apps (kernels/cpu and
# kernels/cuda count as kernels, runtime/cuda and runtime/ops as runtime; tests/ may include anything).
# Usage: scripts/check-layers.sh [ROOT]   checks ROOT (default: this repository); exit 1 on a violation
#        scripts/check-layers.sh --self-test   plants an upward include in a temp tree, expects failure
set -uo pipefail
layers=(kernels runtime graphs model data train apps)

declare -A rank  # layer folder -> its index, bottom = 0
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done

check() {  # check ROOT: prints every upward include under ROOT; returns 1 when there is one
  local root=$1 bad=0 dirs=() d
  for d in "${layers[@]}"; do [ -d "$root/$d" ] && dirs+=("$d"); done
  [ ${#dirs[@]} -gt 0 ] || { echo "check-layers: no layer folder under $root" >&2; return 2; }
  local file line text inc own to ro rt
  while IFS=: read -r file line text; do
    [[ $text =~ include[[:space:]]*\"(\.\./)*([A-Za-z0-9_]+)/ ]] || continue
    inc=${BASH_REMATCH[2]}
    own=${file%%/*}
    ro=${rank[$own]:-}; rt=${rank[$inc]:-}
    [ -n "$ro" ] && [ -n "$rt" ] || continue
    if [ "$rt" -gt "$ro" ]; then
      echo "$file:$line: ${text#"${text%%[![:space:]]*}"}: $own/ may not include $inc/ (a higher layer);" \
        "fix: move what it needs down into $own/ or lower (docs/DESIGN.md, Layers)"
      bad=1
    fi
  done < <(cd "$root" && grep -rnE --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' \
             '^[[:space:]]*#[[:space:]]*include[[:space:]]*"(\.\./)*[A-Za-z0-9_]+/' "${dirs[@]}")
  return $bad
}

self_test() {  # a clean tree passes, a planted upward include fails and is named
  local tmp rc out
  tmp=$(mktemp -d) || return 1
  trap 'rm -rf "$tmp"' RETURN
  mkdir -p "$tmp/kernels/cuda" "$tmp/model" "$tmp/data" "$tmp/train"
  printf '#include "runtime/tensor.h"\n#include "data/data.h"\n' >"$tmp/train/job.cpp"
  printf '#include "model/target.h"\n' >"$tmp/data/synthetic.cpp"
  printf '#include "kernels/cuda/cuda_kernels.h"\n' >"$tmp/kernels/cuda/a.cu"
  check "$tmp" >/dev/null || { echo "check-layers self-test: a clean tree failed" >&2; return 1; }
  printf '#include "graphs/buckets.h"\n  #include "train/config.h"  // upward\n' >"$tmp/model/target.h"
  out=$(check "$tmp"); rc=$?
  [ $rc -eq 1 ] && grep -q '^model/target.h:2: .*train/config.h' <<<"$out" ||
    { echo "check-layers self-test: the planted upward include was not caught (rc=$rc): $out" >&2; return 1; }
  printf '#include "../apps/x.h"\n' >"$tmp/model/target.h"
  check "$tmp" >/dev/null && { echo "check-layers self-test: a relative upward include was not caught" >&2; return 1; }
  echo "check-layers self-test: ok"
}

if [ "${1:-}" = "--self-test" ]; then
  self_test
  exit $?
fi
root=${1:-"$(cd "$(dirname "$0")/.." && pwd)"}
if check "$root"; then
  echo "check-layers: ok (${layers[*]})"
else
  echo "check-layers: includes point upward; dependencies must point down (docs/DESIGN.md, Layers)" >&2
  exit 1
fi
