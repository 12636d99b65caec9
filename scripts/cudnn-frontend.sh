#!/usr/bin/env bash
# Fetches NVIDIA's header-only cudnn-frontend, pinned, from its official PyPI wheel into the
# git-ignored .deps/cudnn-frontend/include; CMake builds the cuDNN attention path when it is there.
# Idempotent and silent when present. Without network it warns and the build goes on without the
# cuDNN path; a wheel whose checksum differs from the pinned one is an error.
set -euo pipefail
version=1.32.0
wheel=nvidia_cudnn_frontend-1.32.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
sha256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/.deps/cudnn-frontend
if [ -f "$dest/include/cudnn_frontend.h" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
echo "setup: fetching cudnn-frontend $version (headers) from PyPI"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One wheel file whatever the local Python: the headers are the same in every wheel of a version.
if ! python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.11 --implementation cp --abi cp311 --platform manylinux_2_28_x86_64 \
  -d "$tmp" "nvidia-cudnn-frontend==$version" >"$tmp/pip.log" 2>&1; then
  echo "setup: warning: could not download nvidia-cudnn-frontend==$version ($(tail -n 1 "$tmp/pip.log"));" \
    "the build goes on without the cuDNN attention path" >&2
  exit 0
fi
got=$(sha256sum "$tmp/$wheel" | cut -d' ' -f1)
if [ "$got" != "$sha256" ]; then
  echo "setup: $wheel has sha256 $got, not the pinned $sha256; refusing it" >&2
  exit 1
fi
python3 - "$tmp/$wheel" "$tmp/x" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/") or "/licenses/" in n])
PY
mkdir -p "$tmp/new"
mv "$tmp/x/include" "$tmp/new/include"
cp "$tmp"/x/*.dist-info/licenses/* "$tmp/new/"
echo "$version" >"$tmp/new/VERSION"
mkdir -p "$root/.deps"
rm -rf "$dest"
mv "$tmp/new" "$dest"
