#!/usr/bin/env bash
# Creates the git-ignored virtual environment .venv for the Python tools (python/: dflash-data) from
# the pinned packages of python/requirements.lock, and installs dflash-data into it (editable, so the
# repository's sources are what runs). Idempotent: silent when .venv already matches the lock file.
set -euo pipefail
cd "$(dirname "$0")/.."
lock=python/requirements.lock
stamp=.venv/.dflash-lock.sha256
want=$(cat "$lock" python/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
python=$(command -v python3 || true)
[ -n "$python" ] || { echo "setup-python: python3 (3.10 or newer) is needed; install it (apt-get install python3 python3-venv)" >&2; exit 1; }
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
  { echo "setup-python: $("$python" --version) is too old; Python 3.10 or newer is needed" >&2; exit 1; }
echo "setup-python: installing the pinned packages of $lock into .venv"
[ -x .venv/bin/python ] || "$python" -m venv .venv || {
  echo "setup-python: could not create .venv; on Debian/Ubuntu install python3-venv" >&2; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { .venv/bin/python -m pip install -q --disable-pip-version-check -r "$lock" &&
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e python; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "setup-python: pip could not install $lock into .venv (output above); the package registry must be reachable" >&2
  exit 1
fi
echo "$want" > "$stamp"
