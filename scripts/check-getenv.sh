#!/usr/bin/env bash
# The environment check: the sources under kernels/ runtime/ graphs/ model/ data/ train/ dist/ apps/
# read (getenv, secure_getenv) or set (setenv, unsetenv, putenv) only the variables that
# docs/config.md lists in its section "Environment variables read" (first column of its table, in
# backticks): standard ones that launchers and tools set. Kernel choices are kernels/heuristics.h's,
# a user's choice is a config key, a test's is a test seam. A call whose variable is not a string
# literal names the ones it may read in a `// env: NAME, NAME` comment on its line or the one above.
# Usage: scripts/check-getenv.sh [ROOT]   checks ROOT (default: this repository); exit 1 on a violation,
#                                          2 when docs/config.md has no allow-list
#        scripts/check-getenv.sh --self-test   plants violations in a temp tree, expects each caught
set -uo pipefail
dirs=(kernels runtime graphs model data train dist apps)
calls='(secure_getenv|getenv|setenv|unsetenv|putenv)'

allowed_names() {  # allowed_names DOC: the backticked names of DOC's "Environment variables read" table
  awk '/^## Environment variables read/ { on = 1; next } /^## / { on = 0 }
       on && /^\| *`/ { if (match($0, /`[A-Za-z_][A-Za-z0-9_]*`/)) print substr($0, RSTART + 1, RLENGTH - 2) }' "$1"
}

check() {  # check ROOT: prints every call of a variable outside the allow-list; returns 1 when there is one
  local root=$1 doc=$1/docs/config.md
  [ -f "$doc" ] || { echo "check-getenv: $doc not found" >&2; return 2; }
  local -A allowed=()
  local n
  while IFS= read -r n; do allowed[$n]=1; done < <(allowed_names "$doc")
  [ ${#allowed[@]} -gt 0 ] || {
    echo "check-getenv: $doc has no table under '## Environment variables read' (the allow-list)" >&2
    return 2
  }
  local present=() d
  for d in "${dirs[@]}"; do [ -d "$root/$d" ] && present+=("$d"); done
  [ ${#present[@]} -gt 0 ] || { echo "check-getenv: no source folder under $root" >&2; return 2; }
  local bad=0 count=0 file line text code prev names call rest
  while IFS=: read -r file line text; do
    code=${text%%//*}  # a call in a comment does not count
    [[ $code =~ $calls[[:space:]]*\( ]] || continue
    names=()
    rest=$code
    while [[ $rest =~ $calls[[:space:]]*\((.*) ]]; do
      call=${BASH_REMATCH[1]}
      rest=${BASH_REMATCH[2]}
      count=$((count + 1))
      if [[ $rest =~ ^[[:space:]]*\"([A-Za-z_][A-Za-z0-9_]*)[\"=] ]]; then
        names+=("${BASH_REMATCH[1]}")
      else  # not a literal: the names of its `// env:` comment
        prev=$(sed -n "$((line > 1 ? line - 1 : 1))p;${line}p" "$root/$file" | grep -o '// env:.*' | head -n 1)
        if [ -z "$prev" ]; then
          echo "$file:$line: $call of a variable that is not a string literal; fix: name the variables it may" \
            "read in a '// env: NAME, NAME' comment on its line or the line above"
          bad=1
          continue
        fi
        # shellcheck disable=SC2207
        names+=($(grep -oE '[A-Za-z_][A-Za-z0-9_]*' <<<"${prev#// env:}"))
      fi
    done
    for n in "${names[@]}"; do
      [ -n "${allowed[$n]:-}" ] && continue
      echo "$file:$line: $n is not in docs/config.md's 'Environment variables read'; fix: choose by" \
        "kernels/heuristics.h, a config key (docs/config.md) or a test seam (kernels/cuda/test_seams.h)," \
        "or, for a standard variable a launcher or tool sets, list it there with who reads it"
      bad=1
    done
  done < <(cd "$root" && grep -rnE --include='*.h' --include='*.hpp' --include='*.cpp' --include='*.cc' \
             --include='*.cu' --include='*.cuh' "$calls[[:space:]]*\(" "${present[@]}")
  [ "$bad" = 0 ] && echo "check-getenv: ok ($count calls; ${#allowed[@]} variables allowed by docs/config.md)"
  return $bad
}

self_test() {  # a clean tree passes; each planted violation fails and is named
  local tmp out rc
  tmp=$(mktemp -d) || return 1
  trap 'rm -rf "$tmp"' RETURN
  mkdir -p "$tmp/docs" "$tmp/kernels/cuda" "$tmp/runtime" "$tmp/train" "$tmp/apps"
  printf '# Config\n\n## Environment variables read\n\n| variable | read by |\n|---|---|\n| `CUDA_VISIBLE_DEVICES` | train/cluster.cpp |\n| `RANK` | runtime/launch.cpp |\n\n## Other\n\n| `NOT_ALLOWED` | a later section |\n' \
    >"$tmp/docs/config.md"
  printf 'const char* v = std::getenv("CUDA_VISIBLE_DEVICES");\n// std::getenv("DFLASH_IN_A_COMMENT")\n' \
    >"$tmp/kernels/cuda/a.cu"
  printf '  // env: RANK\n  const char* v = std::getenv(name.c_str());\n' >"$tmp/runtime/b.cpp"
  check "$tmp" >/dev/null || { echo "check-getenv self-test: a clean tree failed: $(check "$tmp")" >&2; return 1; }
  expect() {  # expect FILE TEXT WANT: planting TEXT in FILE fails, naming WANT
    printf '%s\n' "$2" >"$tmp/$1"
    out=$(check "$tmp"); rc=$?
    rm -f "$tmp/$1"
    [ $rc -eq 1 ] && grep -q "$3" <<<"$out" ||
      { echo "check-getenv self-test: '$2' in $1 was not caught (rc=$rc): $out" >&2; return 1; }
  }
  expect train/c.cpp 'if (std::getenv("DFLASH_KNOB")) fast = true;' '^train/c.cpp:1: DFLASH_KNOB is not' || return 1
  expect apps/d.cpp 'setenv("DFLASH_ATTENTION_DQ", "fused", 1);' 'DFLASH_ATTENTION_DQ is not' || return 1
  expect apps/e.cpp 'const char* x = secure_getenv("NOT_ALLOWED");' 'NOT_ALLOWED is not' || return 1
  expect runtime/f.cpp 'putenv("HOME_KNOB=1");' 'HOME_KNOB is not' || return 1
  expect runtime/g.cpp 'const char* v = getenv(key);' "not a string literal" || return 1
  expect runtime/h.cpp $'// env: RANK, DFLASH_HIDDEN\nconst char* v = getenv(key);' 'DFLASH_HIDDEN is not' || return 1
  printf '# Config\n' >"$tmp/docs/config.md"
  check "$tmp" >/dev/null 2>&1; rc=$?
  [ $rc -eq 2 ] || { echo "check-getenv self-test: a docs/config.md without the allow-list gave rc=$rc" >&2; return 1; }
  echo "check-getenv self-test: ok"
}

if [ "${1:-}" = "--self-test" ]; then
  self_test
  exit $?
fi
root=${1:-"$(cd "$(dirname "$0")/.." && pwd)"}
check "$root"
rc=$?
[ $rc -eq 1 ] && echo "check-getenv: the sources read environment variables outside the allow-list" >&2
exit $rc
