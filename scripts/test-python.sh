#!/usr/bin/env bash
# Sets up the Python tools' environment (scripts/setup-python.sh) and runs their tests (python/tests),
# offline. Tests that run the C++ trainer use build/ (scripts/test.sh builds it first).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-python.sh
.venv/bin/python -m pytest -q -p no:cacheprovider python/tests "$@"
