#!/usr/bin/env bash
# Times two builds of qmoe on the same synthetic layers, alternating them round by round (A, B, A,
# B, ...) so that clock and thermal drift fall on both, and prints the medians (tools/bench_ab.py).
#   tools/gpu_ab.sh BIN_A BIN_B OUT_DIR ROUNDS [qmoe bench options...]
# BIN_A / BIN_B hold a qmoe binary each (with libfmt.so.9 next to it when built on the Debian build
# machine); OUT_DIR gets a<N>.json / b<N>.json and summary.txt. AB_ENV_A / AB_ENV_B (optional):
# VAR=VALUE words set for that side only, to compare switches of one build (BIN_A = BIN_B).
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 4 ]] || { sed -n 2,7p "$0"; exit 2; }
bin_a=$1 bin_b=$2 out=$3 rounds=$4
shift 4
mkdir -p "$out"
for ((r = 1; r <= rounds; ++r)); do
  for side in a b; do
    bin=$bin_a side_env=${AB_ENV_A:-}
    [[ $side == b ]] && bin=$bin_b side_env=${AB_ENV_B:-}
    # (side_env unquoted: its words become env's VAR=VALUE arguments)
    env $side_env LD_LIBRARY_PATH=$PWD/$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$bin/qmoe" bench --json "$out/$side$r.json" "$@" \
      > "$out/$side$r.log" 2>&1 || { echo "gpu_ab.sh: $bin/qmoe bench failed (round $r): $out/$side$r.log"; exit 1; }
  done
  # (after every round, so that a call cut short by its time limit still leaves the rounds it ran)
  python3 tools/bench_ab.py "$out" > "$out/summary.txt"
done
cat "$out/summary.txt"
