#!/usr/bin/env bash
# Sets up, builds and runs the main job: one MoE layer of the bundled default checkpoint
# (Qwen3-MoE, W4A16 group 128) on the CPU, checked against the reference and timed.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
build/qmoe inspect tests/data/fixtures/w4a16_g128
echo
build/qmoe run tests/data/fixtures/w4a16_g128 --tokens 64 --seed 1 "$@"
