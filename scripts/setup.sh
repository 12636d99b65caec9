#!/usr/bin/env bash
# Installs the build dependencies that are missing (Debian packages only); idempotent, and
# silent when everything is present. python3-matplotlib draws the training curves (scripts/plot.py).
# First the pinned cudnn-frontend headers for the cuDNN attention path (scripts/cudnn-frontend.sh).
bash "$(dirname "$0")/cudnn-frontend.sh" || exit 1
set -euo pipefail
packages=(g++ cmake ninja-build libeigen3-dev libtomlplusplus-dev doctest-dev nlohmann-json3-dev python3-matplotlib)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "setup: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || {
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}
