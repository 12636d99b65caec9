#!/usr/bin/env bash
# Mutation probes: plants each bug of the list (scripts/mutants-list.sh), one at a time, in a scratch copy of the tree
# (never this one), rebuilds the CPU test binary incrementally and runs the CPU suites; some test
# must fail for every mutant. A mutant is keyed by a snippet of the code it changes, which must occur
# exactly once in the sources outside tests/, scripts/ and docs/, so it follows the code when files
# move. Before any verdict: every snippet is found once, the unmutated suite passes, and each mutant
# changes a file that the CPU build compiles and still compiles (else the list is stale: exit 2).
# Mutants of the Python tools (python/dflash_data/*.py) run pytest instead (their hint: pytest
# arguments), over the scratch tree's sources, after the unmutated Python tests pass there.
# The list is ordered by source file, so consecutive mutants recompile one translation unit.
# --headers: adds the mutants in headers nearly every file includes (each rebuilds the whole test binary).
# --gpu: the CUDA kernels' mutants (scripts/mutants-gpu-list.sh) against the one-GPU suites, on the
# a GPU host (scripts/gpu-test.sh mutants); the baseline runs each mutant's hint unmutated.
# --in-place: plants the bugs in this tree and rebuilds its build/ (as scripts/build.sh left it)
# instead of a scratch copy, saving the copy's full build; each file is restored after its mutant.
# Refused unless the tracked files equal the last commit (a fresh clone, as CI has).
# --budget-s N: start no mutant after N seconds (the rest are counted as not run; that alone is no failure).
# --rotate: run the mutants of the files the last 10 commits changed first, then the rest of the
# list from a point that the HEAD commit's hash picks (wrapping), so that runs cut short by a
# budget cover the whole list over successive commits. scripts/test.sh runs --in-place --rotate with a budget.
# Usage: bash scripts/mutants.sh [--gpu] [--headers] [--in-place] [--budget-s N] [--rotate] [--list]
#   [WORD...]   WORD: only mutants whose name contains it, or #A-B: the list's mutants A to B
# Exit: 0 every mutant that ran was caught (the budget may have left some unrun: the last lines say how
# many); 1 one survived; 2 the list, the baseline or the build is broken.
# Env: DFLASH_MUTANTS_DIR (scratch; default under $TMPDIR, kept between runs so rebuilds are
# incremental), DFLASH_MUTANTS_JOBS (build jobs; default nproc), DFLASH_MUTANTS_TIMEOUT (s per run),
# DFLASH_MUTANTS_BUDGET_S (as --budget-s).
set -uo pipefail
shopt -u patsub_replacement 2>/dev/null || true  # "&" in a replacement stays "&"

gpu=0 list=0 with_headers=0 in_place=0 rotate=0
budget=${DFLASH_MUTANTS_BUDGET_S:-0}
filters=()
while [ $# -gt 0 ]; do
  case $1 in
    --gpu) gpu=1 ;;
    --list) list=1 ;;
    --headers) with_headers=1 ;;
    --in-place) in_place=1 ;;
    --rotate) rotate=1 ;;
    --budget-s)
      [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "mutants: --budget-s takes a whole number of seconds, not '${2:-}'" >&2; exit 2; }
      budget=$2
      shift ;;
    -h | --help) sed -n '2,29p' "$0"; exit 0 ;;
    -*) echo "mutants: unknown option $1 (see bash scripts/mutants.sh --help)" >&2; exit 2 ;;
    *) filters+=("$1") ;;
  esac
  shift
done

names=() hints=() olds=() news=()
# mutant NAME HINT OLD NEW: HINT is doctest filters for the tests expected to catch it, run first
# (the whole CPU suites, or with --gpu the one-GPU suites, run when they do not).
mutant() { names+=("$1"); hints+=("$2"); olds+=("$3"); news+=("$4"); }

if [ "$gpu" = 1 ]; then source "$(dirname "$0")/mutants-gpu-list.sh"; else source "$(dirname "$0")/mutants-list.sh"; fi

# --- Machinery ---
fail() {
  echo "mutants: $*" >&2
  exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)
selected=()
for i in "${!names[@]}"; do
  keep=$(( ${#filters[@]} == 0 ))
  for f in "${filters[@]}"; do
    if [[ $f =~ ^#([0-9]+)-([0-9]+)$ ]]; then  # #A-B: the list's mutants A to B
      [ $((i + 1)) -ge "${BASH_REMATCH[1]}" ] && [ $((i + 1)) -le "${BASH_REMATCH[2]}" ] && keep=1
    elif [[ ${names[$i]} == *"$f"* ]]; then keep=1; fi
  done
  [ "$keep" = 1 ] && selected+=("$i")
done
if [ "$list" = 1 ]; then
  for i in "${selected[@]}"; do printf '%2d  %s\n' "$((i + 1))" "${names[$i]}"; done
  exit 0
fi
[ ${#selected[@]} -gt 0 ] || fail "no mutant matches ${filters[*]}"

jobs=${DFLASH_MUTANTS_JOBS:-$(nproc)}
limit=${DFLASH_MUTANTS_TIMEOUT:-900}
t_start=$SECONDS
if [ "$in_place" = 1 ]; then
  [ "$gpu" = 0 ] || fail "--in-place is for the CPU list; --gpu builds its own CUDA test binary in a scratch folder"
  git -C "$root" diff --quiet HEAD -- 2>/dev/null ||
    fail "--in-place edits the tracked files and restores them from the last commit's content, so it needs a tree without uncommitted changes (commit or stash them, or run without --in-place)"
  [ -f "$root/build/build.ninja" ] || fail "--in-place rebuilds $root/build, which is not configured; run bash scripts/build.sh first"
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/dflash-mutants-logs.XXXXXX") || fail "cannot create a folder for the logs"
  src=$root
  build=$root/build
else
  scratch=${DFLASH_MUTANTS_DIR:-${TMPDIR:-/tmp}/dflash-mutants-$(id -u)-$(printf %s "$root" | cksum | cut -d' ' -f1)}
  src=$scratch/src
  build=$scratch/build
  [ "$gpu" = 1 ] && build=$scratch/build-gpu
  case $scratch in "$root" | "$root"/*) fail "DFLASH_MUTANTS_DIR=$scratch lies inside the tree; choose a folder outside it" ;; esac
  mkdir -p "$src" || fail "cannot create $scratch"
  # The scratch tree mirrors the tracked and untracked (not ignored) files. Only files whose content
  # differs are copied, so the build stays incremental and every copied file is newer than its objects.
  echo "mutants: syncing $root -> $src"
  mapfile -d '' files < <(git -C "$root" ls-files -z --cached --others --exclude-standard)
  declare -A wanted=()
  for f in "${files[@]}"; do
    [ -f "$root/$f" ] || continue
    wanted[$f]=1
    if ! cmp -s "$root/$f" "$src/$f"; then
      mkdir -p "$(dirname "$src/$f")" && cp "$root/$f" "$src/$f" || fail "cannot copy $f"
    fi
  done
  while IFS= read -r -d '' f; do
    f=${f#"$src/"}
    [ -n "${wanted[$f]:-}" ] || rm -f "$src/$f"
  done < <(find "$src" -type f -print0)
fi
logs=$scratch/logs
mkdir -p "$logs" || fail "cannot create $logs"

# Every snippet once in the production sources, and the replacement different (checked up front).
mapfile -t sources < <(git -C "$root" ls-files --cached --others --exclude-standard |
  grep -E '\.(cpp|h|cu|cuh)$|^python/dflash_data/.*\.py$' | grep -vE '^(tests|scripts|docs)/')
present=()
for f in "${sources[@]}"; do [ -f "$src/$f" ] && present+=("$f"); done
where=()
for i in "${selected[@]}"; do
  [ "${olds[$i]}" != "${news[$i]}" ] || fail "mutant '${names[$i]}': the replacement equals the snippet"
  # one grep over every source: a line "FILE:MATCH" per occurrence
  mapfile -t found < <(cd "$src" && grep -oHF -e "${olds[$i]}" -- "${present[@]}")
  hits=${#found[@]} file=${found[0]:-}
  file=${file%%:*}
  [ "$hits" = 1 ] || fail "mutant '${names[$i]}': its snippet occurs $hits times in the sources (it must occur exactly once; update scripts/mutants-list.sh): ${olds[$i]}"
  where[$i]=$file
done

if [ "$rotate" = 1 ]; then  # the recently changed files' mutants first, then the rest from a point the commit picks
  head=$(git -C "$root" rev-parse HEAD 2>/dev/null) || fail "--rotate needs a git checkout (it orders by the HEAD commit)"
  depth=$(git -C "$root" rev-list --count HEAD)
  back=$((depth > 10 ? 10 : depth - 1))
  declare -A recent=()
  if [ "$back" -gt 0 ]; then
    while IFS= read -r f; do recent[$f]=1; done < <(git -C "$root" diff --name-only "HEAD~$back" HEAD)
  fi
  first=() rest=()
  for i in "${selected[@]}"; do
    if [ -n "${recent[${where[$i]}]:-}" ]; then first+=("$i"); else rest+=("$i"); fi
  done
  start=0
  [ ${#rest[@]} -gt 0 ] && start=$(( 0x${head:0:8} % ${#rest[@]} ))
  selected=("${first[@]}" "${rest[@]:start}" "${rest[@]:0:start}")
  echo "mutants: ${#first[@]} mutants of the files the last $back commits changed first, then the rest from list position $((${rest[start]:-0} + 1)) (picked by commit ${head:0:12})"
fi

# A GPU host without a package source: scripts/gpu-prepare.sh filled .deps here before the call.
if [ "$gpu" = 1 ]; then
  backend=(-DDFLASH_CPU_ONLY=OFF -DCUDNN_FRONTEND_INCLUDE="$root/.deps/cudnn-frontend/include")
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || fail "--gpu needs nvcc (the CUDA build)"
else
  bash "$root/scripts/setup.sh" || fail "setup failed"
  backend=(-DDFLASH_CPU_ONLY=ON)
fi
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${backend[@]}" \
    -DDFLASH_EXTRA_INCLUDE="$root/.deps/include" >"$logs/configure.log" 2>&1 ||
    fail "configure failed; see $logs/configure.log"
fi

build_tests() {  # build_tests LOG: incremental build of the CPU test binary and dflash-train, which it runs
  cmake --build "$build" -j "$jobs" --target dflash-tests dflash-train >"$1" 2>&1
}

# The suites a mutant runs against: the CPU ones, or (--gpu) the one-GPU ones; all_suites is the
# fallback when its hint passes.
if [ "$gpu" = 1 ]; then
  kind="one-GPU" suites=(--test-suite-exclude='gpu2*') all_suites=(--test-suite='gpu-*')
else
  kind="CPU" suites=(--test-suite-exclude='gpu*') all_suites=()
fi
run_tests() {  # run_tests LOG [doctest args]: the suites, stopping at the first failure
  local log=$1
  shift
  (cd "$src" && timeout "$limit" "$build/dflash-tests" "${suites[@]}" --abort-after=1 "$@") >"$log" 2>&1
}
# A mutant of the Python tools (python/dflash_data) runs pytest on the scratch tree's sources (its
# HINT: pytest arguments, e.g. a test file and -k EXPR; without one, or when the hint passes, all of
# python/tests), with the scratch build's binaries at build/ as the tests expect them.
py_selected=0
for i in "${selected[@]}"; do [[ ${where[$i]} == *.py ]] && py_selected=1; done
run_py_tests() {  # run_py_tests LOG [pytest args]
  local log=$1
  shift
  [ $# -gt 0 ] || set -- python/tests
  (cd "$src" && PYTHONPATH="$src/python" timeout "$limit" "$root/.venv/bin/python" -m pytest -q -x \
    -p no:cacheprovider "$@") >"$log" 2>&1
}

echo "mutants: building the unmutated tree ($kind) in $build"
t0=$SECONDS
build_tests "$logs/baseline-build.log" || fail "the unmutated tree does not build; see $logs/baseline-build.log"
echo "mutants: built in $((SECONDS - t0)) s; running the unmutated $kind suites"
t0=$SECONDS
if [ "$gpu" = 1 ]; then  # each hint once (the whole one-GPU suites take minutes)
  declare -A hint_seen=()
  for i in "${selected[@]}"; do
    [ -n "${hint_seen[${hints[$i]}]:-}" ] && continue
    hint_seen[${hints[$i]}]=1
    read -r -a hint <<<"${hints[$i]}"
    run_tests "$logs/baseline-tests.log" "${hint[@]}" ||
      fail "the unmutated suites fail under the hint ${hints[$i]}, so no mutant can count as caught; see $logs/baseline-tests.log"
  done
else
  run_tests "$logs/baseline-tests.log" || fail "the unmutated CPU suites fail, so no mutant can count as caught; see $logs/baseline-tests.log"
fi
echo "mutants: the unmutated suites pass ($((SECONDS - t0)) s)"
if [ "$py_selected" = 1 ]; then
  bash "$root/scripts/setup-python.sh" || fail "the Python environment could not be set up (scripts/setup-python.sh)"
  # build/ beside the sources, as the tests expect, and .venv beside the build folder, where the
  # trainer looks for the trackers' follower (PYTHONPATH puts the scratch sources first for it too).
  if [ "$in_place" = 0 ]; then
    ln -sfn "$build" "$src/build"
    ln -sfn "$root/.venv" "$scratch/.venv"
  fi
  run_py_tests "$logs/baseline-python.log" ||
    fail "the unmutated Python tests fail, so no Python mutant can count as caught; see $logs/baseline-python.log"
  echo "mutants: the unmutated Python tests pass"
fi

current="" original="$scratch/original"
restore() {
  if [ -n "$current" ]; then
    cp "$original" "$src/$current" && touch "$src/$current"
    current=""
  fi
}
trap 'restore' EXIT
trap 'restore; exit 130' INT TERM

table=() survived=0 unrun=0
for i in "${selected[@]}"; do
  name=${names[$i]} file=${where[$i]}
  if [ "$budget" -gt 0 ] && [ $((SECONDS - t_start)) -ge "$budget" ]; then
    unrun=$((unrun + 1))  # counted, not listed: a budgeted run leaves most of the list for later commits
    continue
  fi
  log="$logs/mutant-$((i + 1))"
  t0=$SECONDS
  cp "$src/$file" "$original"
  current=$file
  content=$(cat "$src/$file"; printf x)
  content=${content%x}
  printf '%s' "${content/"${olds[$i]}"/"${news[$i]}"}" >"$src/$file"
  cmp -s "$original" "$src/$file" && fail "mutant '$name' did not change $file"
  read -r -a hint <<<"${hints[$i]}"
  verdict=""
  if [[ $file == *.py ]]; then
    run_py_tests "$log.hint.log" "${hint[@]}"
    rc=$?
    grep -qE '(no tests ran|0 selected)' "$log.hint.log" && fail "mutant '$name': its hint ${hints[$i]} selects no test"
    if [ $rc = 0 ]; then
      run_py_tests "$log.all.log"
      rc=$?
      tests_log="$log.all.log"
      [ $rc = 0 ] || verdict=" (not by its hint)"
    else
      tests_log="$log.hint.log"
    fi
  else
    build_tests "$log.build.log" || fail "mutant '$name' does not compile (an error of this list, not a catch); see $log.build.log"
    grep -q "no work to do" "$log.build.log" && fail "mutant '$name' changes $file, which the $kind test build does not compile"
    run_tests "$log.hint.log" "${hint[@]}"
    rc=$?
    grep -qE 'test cases: +0 \|' "$log.hint.log" && fail "mutant '$name': its hint ${hints[$i]} selects no test case"
    if [ $rc = 0 ]; then
      run_tests "$log.all.log" "${all_suites[@]}"
      rc=$?
      tests_log="$log.all.log"
      [ $rc = 0 ] || verdict=" (not by its hint)"
    else
      tests_log="$log.hint.log"
    fi
  fi
  if [ $rc = 0 ]; then
    caught="SURVIVED"
    survived=$((survived + 1))
  elif [ $rc = 124 ]; then
    caught="timeout after ${limit} s"
  else
    # the test case whose block holds the first failed assertion or crash (cases that only print come first)
    caught=$(awk '/^TEST CASE:/ { c = $0 } /ERROR:/ && c != "" { print c; exit }' "$tests_log" | sed 's/^TEST CASE: *//')
    [ -n "$caught" ] || caught=$(grep -m1 -E '^(FAILED|ERROR) ' "$tests_log" | sed -E 's/^(FAILED|ERROR) //; s/ - .*//')
    [ -n "$caught" ] || caught=$(grep -m1 '^TEST CASE:' "$tests_log" | sed 's/^TEST CASE: *//')
    [ -n "$caught" ] || caught="exit status $rc (see $tests_log)"
    caught="$caught$verdict"
  fi
  restore
  printf 'mutants: %2d/%d %-55s %s (%d s)\n' "$((i + 1))" "${#names[@]}" "$name" "$caught" "$((SECONDS - t0))"
  table+=("| $((i + 1)) | $name | \`$file\` | $caught | $((SECONDS - t0)) |")
done

echo
echo "| # | mutant | file | caught by | s |"
echo "| --- | --- | --- | --- | --- |"
printf '%s\n' "${table[@]}"
echo
[ "$unrun" = 0 ] || echo "mutants: the budget of $budget s was spent; $unrun mutants not run (all of them: bash scripts/mutants.sh)"
if [ "$in_place" = 1 ]; then
  git -C "$root" diff --quiet HEAD -- || fail "the tree differs from its last commit after the in-place run (git diff shows how); restore it with git checkout -- ."
  echo "mutants: the logs are in $logs"
fi
echo "mutants: $((${#selected[@]} - unrun)) run, $((${#selected[@]} - unrun - survived)) caught, $survived survived, $unrun not run; $((SECONDS - t_start)) s in all"
[ "$survived" = 0 ] || exit 1
