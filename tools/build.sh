#!/usr/bin/env bash
# Configures and builds qmoe into build/ (Release, Ninja, ccache when present).
# Extra arguments go to CMake, e.g. tools/build.sh -DQMOE_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j "${QMOE_JOBS:-2}"
