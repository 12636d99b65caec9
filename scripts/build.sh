#!/usr/bin/env bash
# Configures and builds into build/ (CUDA backend too when nvcc is found). Extra arguments go to cmake.
# Prints one progress line (rewritten in place on a terminal, else a line every 10 %); the whole
# cmake and ninja output goes to build/build.log. On failure it prints the log's last lines and its
# path. A warning the compiler printed is counted in the last line, so a quiet build is a clean one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p build
log=build/build.log
: >"$log"
tty=0
[ -t 1 ] && tty=1

say() {  # say TEXT: the progress line, in place on a terminal
  if [ $tty = 1 ]; then printf '\r\033[K%s' "$1"; else printf '%s\n' "$1"; fi
}

fail() {  # fail WHAT: the log's tail, its path, exit 1
  [ $tty = 1 ] && printf '\n'
  echo "build: $1 failed; the last 40 lines of $log:" >&2
  tail -n 40 "$log" >&2
  echo "build: $1 failed; the full output is in $PWD/$log" >&2
  exit 1
}

progress() {  # reads ninja's output: "[N/M] ..." lines; a step of 10 % (N of M) prints a line off a terminal
  local line n m pct shown=-1
  while IFS= read -r line; do
    [[ $line =~ ^\[([0-9]+)/([0-9]+)\] ]] || continue
    n=${BASH_REMATCH[1]} m=${BASH_REMATCH[2]}
    [ "$n" -gt 0 ] && [ "$m" -gt 0 ] || continue
    pct=$((n * 100 / m))
    if [ $tty = 1 ]; then
      say "build: [$n/$m] $pct % (full output: $log)"
    elif [ $((pct / 10)) -gt "$shown" ]; then
      shown=$((pct / 10))
      say "build: [$n/$m] $pct % (full output: $log)"
    fi
  done
}

start=$SECONDS
say "build: configuring (full output: $log)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >>"$log" 2>&1 || fail "configure"
cmake --build build 2>&1 | tee -a "$log" | progress || fail "build"
warnings=$(grep -ciE 'warning[: ]' "$log" || true)
if grep -q '^ninja: no work to do' "$log"; then
  done_line="build: up to date"
else
  done_line="build: done in $((SECONDS - start)) s"
fi
if [ "$warnings" -gt 0 ]; then
  done_line+=", $warnings warning$([ "$warnings" = 1 ] || echo s) (full output: $log)"
else
  done_line+=" (full output: $log)"
fi
say "$done_line"
[ $tty = 1 ] && printf '\n'
exit 0
