#!/usr/bin/env bash
# Sets up, builds and runs the whole CPU test suite (GPU tests are labelled `gpu` and skipped here).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh "$@"
ctest --test-dir build --output-on-failure -LE gpu -j "${QMOE_JOBS:-2}"
