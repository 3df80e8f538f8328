#!/usr/bin/env bash
# Times two GEMM paths of one qmoe build on the same synthetic layers (a forced tile against the
# plan, say), GEMMs apart, in rounds that alternate which path runs first (the H200's power cap
# favours the first row at a batch size by up to ~6% on its longest layers), and prints the
# medians (tools/bench_ab.py --paths).
#   tools/gpu_sweep.sh BIN OUT_DIR ROUNDS PATH_A PATH_B [qmoe bench options...]
# BIN holds a qmoe binary (with libfmt.so.9 next to it when built on the Debian build machine);
# OUT_DIR gets r<N>.json / r<N>.log and summary.txt (ratios B / A). Paths as `qmoe bench
# --gemm-paths` takes them: auto, decode, prefill, prefill:<tile>, prefill:<tile1>/<tile2>.
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 5 ]] || { sed -n 2,9p "$0"; exit 2; }
bin=$1 out=$2 rounds=$3 path_a=$4 path_b=$5
shift 5
mkdir -p "$out"
for ((r = 1; r <= rounds; ++r)); do
  paths=$path_a,$path_b
  ((r % 2 == 0)) && paths=$path_b,$path_a
  LD_LIBRARY_PATH=$PWD/$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$bin/qmoe" bench --split-gemms --gemm-paths "$paths" \
    --json "$out/r$r.json" "$@" > "$out/r$r.log" 2>&1 || { echo "gpu_sweep.sh: $bin/qmoe bench failed (round $r): $out/r$r.log"; exit 1; }
  # (after every round, so that a call cut short by its time limit still leaves the rounds it ran)
  python3 tools/bench_ab.py "$out" --paths "$path_a" "$path_b" > "$out/summary.txt"
done
cat "$out/summary.txt"
