#!/usr/bin/env bash
# The layer check (docs/DESIGN.md, "Layers"): no source file includes one from a higher folder, and
# the include graph between top-level folders has no cycle.
# Order, bottom to top: kernels < runtime < dist < graphs < model < data < train < apps (kernels/cpu
# and kernels/cuda count as kernels, runtime/cuda and runtime/ops as runtime; tests/ may include
# anything). The cycle check covers every top-level folder with sources (tests/ and folders outside
# the order too, but build*/ and hidden ones), so a folder not yet placed cannot close a loop either.
# Usage: scripts/check-layers.sh [ROOT]   checks ROOT (default: this repository); exit 1 on a violation
#        scripts/check-layers.sh --self-test   plants upward includes and cycles in a temp tree,
#                                              expects each to be reported and a clean tree to pass
set -uo pipefail
layers=(kernels runtime dist graphs model data train apps)

declare -A rank  # layer folder -> its index, bottom = 0
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done

check() {  # check ROOT: prints every upward include and every folder cycle under ROOT; 1 when any
  local root=$1 bad=0 dirs=() d found=0
  for d in "${layers[@]}"; do [ -d "$root/$d" ] && found=1; done
  [ $found = 1 ] || { echo "check-layers: no layer folder under $root" >&2; return 2; }
  for d in "$root"/*/; do
    d=${d%/}; d=${d##*/}
    case $d in build*) continue ;; esac
    dirs+=("$d")
  done
  local file line text inc own ro rt
  local -A edge=()  # "from to" -> the first include that makes it, "file:line"
  while IFS=: read -r file line text; do
    [[ $text =~ include[[:space:]]*\"(\.\./)*([A-Za-z0-9_]+)/ ]] || continue
    inc=${BASH_REMATCH[2]}
    own=${file%%/*}
    [ "$inc" != "$own" ] && [ -d "$root/$inc" ] && [ -z "${edge["$own $inc"]:-}" ] &&
      edge["$own $inc"]="$file:$line"
    ro=${rank[$own]:-}; rt=${rank[$inc]:-}
    [ -n "$ro" ] && [ -n "$rt" ] || continue
    if [ "$rt" -gt "$ro" ]; then
      echo "$file:$line: ${text#"${text%%[![:space:]]*}"}: $own/ may not include $inc/ (a higher layer);" \
        "fix: move what it needs down into $own/ or lower (docs/DESIGN.md, Layers)"
      bad=1
    fi
  done < <(cd "$root" && grep -rnE --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' \
             '^[[:space:]]*#[[:space:]]*include[[:space:]]*"(\.\./)*[A-Za-z0-9_]+/' "${dirs[@]}" |
             sort -t: -k1,1 -k2,2n)
  cycles "$(for e in "${!edge[@]}"; do echo "$e ${edge[$e]}"; done | sort)" || bad=1
  return $bad
}

cycles() {  # cycles "FROM TO WHERE" lines: prints each cycle that a depth-first walk closes; 1 if any
  local -A adj=() where=() color=()  # color: unset = unseen, 1 = on the walk's path, 2 = done
  local from to at n stack=() found=0
  while read -r from to at; do
    [ -n "$from" ] || continue
    adj[$from]+="$to "
    where["$from $to"]=$at
  done <<<"$1"
  walk() {
    local u=$1 v i k first path via cyc
    color[$u]=1
    stack+=("$u")
    for v in ${adj[$u]:-}; do
      if [ "${color[$v]:-0}" = 1 ]; then  # back edge: the path from v's place on the stack is a cycle
        for i in "${!stack[@]}"; do [ "${stack[$i]}" = "$v" ] && break; done
        cyc=("${stack[@]:$i}")
        first=0  # printed from its first folder by name, so a cycle reads the same however it was found
        for k in "${!cyc[@]}"; do [[ ${cyc[$k]} < ${cyc[$first]} ]] && first=$k; done
        cyc=("${cyc[@]:$first}" "${cyc[@]:0:$first}")
        path="" via=""
        for k in "${!cyc[@]}"; do
          local next=${cyc[$((k + 1))]:-${cyc[0]}}
          path+="${cyc[$k]} -> "
          via+="${via:+; }${where["${cyc[$k]} $next"]} includes $next/"
        done
        echo "include cycle between folders: $path${cyc[0]} ($via); fix: every include must point" \
          "down the order (docs/DESIGN.md, Layers), or the folder take its place below what it includes"
        found=1
      elif [ "${color[$v]:-0}" = 0 ]; then
        walk "$v"
      fi
    done
    color[$u]=2
    unset 'stack[-1]'
  }
  for n in $(printf '%s\n' "${!adj[@]}" | sort); do
    [ "${color[$n]:-0}" = 0 ] && walk "$n"
  done
  [ $found = 0 ]
}

self_test() {  # a clean tree passes; planted upward includes and cycles fail and are named
  local tmp rc out
  tmp=$(mktemp -d) || return 1
  trap 'rm -rf "$tmp"' RETURN
  mkdir -p "$tmp/kernels/cuda" "$tmp/runtime" "$tmp/dist" "$tmp/graphs" "$tmp/model" "$tmp/data" \
    "$tmp/train" "$tmp/tests" "$tmp/build/generated"
  printf '#include "runtime/tensor.h"\n#include "data/data.h"\n' >"$tmp/train/job.cpp"
  printf '#include "model/target.h"\n' >"$tmp/data/synthetic.cpp"
  printf '#include "kernels/cuda/cuda_kernels.h"\n' >"$tmp/kernels/cuda/a.cu"
  printf '#include "runtime/tensor.h"\n' >"$tmp/dist/comm.h"
  printf '#include "dist/comm.h"\n#include "runtime/optimizer.h"\n' >"$tmp/graphs/update.h"
  printf '#include "train/job.h"\n#include "graphs/update.h"\n' >"$tmp/tests/test_job.cpp"
  printf '#include "tests/test_util.h"\n' >"$tmp/build/generated/x.h"  # build output: not a folder of ours
  out=$(check "$tmp") || { echo "check-layers self-test: a clean tree failed: $out" >&2; return 1; }
  printf '#include "graphs/buckets.h"\n  #include "train/config.h"  // upward\n' >"$tmp/model/target.h"
  out=$(check "$tmp"); rc=$?
  [ $rc -eq 1 ] && grep -q '^model/target.h:2: .*train/config.h' <<<"$out" ||
    { echo "check-layers self-test: the planted upward include was not caught (rc=$rc): $out" >&2; return 1; }
  printf '#include "../apps/x.h"\n' >"$tmp/model/target.h"
  check "$tmp" >/dev/null && { echo "check-layers self-test: a relative upward include was not caught" >&2; return 1; }
  rm "$tmp/model/target.h"
  # A cycle between layer folders: dist/ includes graphs/, which includes dist/.
  printf '#include "graphs/update.h"\n' >"$tmp/dist/comm.cpp"
  out=$(check "$tmp"); rc=$?
  [ $rc -eq 1 ] && grep -q '^include cycle between folders: dist -> graphs -> dist (dist/comm.cpp:1 includes graphs/; graphs/update.h:1 includes dist/)' <<<"$out" ||
    { echo "check-layers self-test: the planted cycle dist -> graphs -> dist was not reported (rc=$rc): $out" >&2; return 1; }
  rm "$tmp/dist/comm.cpp"
  # A cycle through a folder outside the order, which only the cycle check sees, and one through tests/.
  mkdir -p "$tmp/extra"
  printf '#include "model/target.h"\n' >"$tmp/extra/b.cpp"
  printf '#include "extra/b.h"\n' >"$tmp/model/target.h"
  out=$(check "$tmp"); rc=$?
  [ $rc -eq 1 ] && grep -q '^include cycle between folders: extra -> model -> extra ' <<<"$out" ||
    { echo "check-layers self-test: the cycle through extra/ (outside the order) was not reported (rc=$rc): $out" >&2; return 1; }
  rm -r "$tmp/extra" "$tmp/model/target.h"
  printf '#include "tests/test_util.h"\n' >"$tmp/train/job.h"
  out=$(check "$tmp"); rc=$?
  [ $rc -eq 1 ] && grep -q '^include cycle between folders: tests -> train -> tests ' <<<"$out" ||
    { echo "check-layers self-test: the cycle through tests/ was not reported (rc=$rc): $out" >&2; return 1; }
  rm "$tmp/train/job.h"
  out=$(check "$tmp") || { echo "check-layers self-test: the tree cleaned again failed: $out" >&2; return 1; }
  echo "check-layers self-test: ok"
}

if [ "${1:-}" = "--self-test" ]; then
  self_test
  exit $?
fi
root=${1:-"$(cd "$(dirname "$0")/.." && pwd)"}
if check "$root"; then
  echo "check-layers: ok (${layers[*]}; no include cycle between folders)"
else
  echo "check-layers: includes point upward or close a cycle; dependencies must point down (docs/DESIGN.md, Layers)" >&2
  exit 1
fi
