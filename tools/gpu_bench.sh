#!/usr/bin/env bash
# Runs `qmoe bench` and the torch grouped-GEMM baselines on the same routed problems, then writes
# the merged table and plot.   tools/gpu_bench.sh BIN_DIR OUT_DIR [qmoe bench options...]
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$1 out=$2
shift 2
export LD_LIBRARY_PATH=$PWD/$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > "$out/gpu_bench.txt" 2>&1
# SM clock, power and clock-event reasons every 100 ms while qmoe runs: the H200 holds its 700 W cap
# by lowering the SM clock under long compute-bound loads, so sustained rates depend on how long
# the GPU has been busy (bench/NOTES.md, twenty-fifth session).
nvidia-smi --query-gpu=clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader,nounits -lms 100 \
  > "$out/clocks.csv" 2>/dev/null &
sampler=$!
"$bin/qmoe" bench --json "$out/qmoe_bench.json" "$@" 2>&1 | tee "$out/qmoe_bench.log"
kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
# Loaded samples (over 300 W; idle and decode-sized work draw far less): their SM clock, power and
# share under the software power cap (event reason bit 0x4).
clocks=$(awk -F', ' '$2 > 300 {n++; c += $1; w += $2; if ($2 > m) m = $2; if (index("4567cdefCDEF", substr($3, length($3), 1))) cap++}
  END {if (n) printf "%d samples over 300 W: SM clock mean %.0f MHz, power mean %.0f W, max %.0f W, under the power cap %.0f%%", n, c / n, w / n, m, 100 * cap / n}' \
  "$out/clocks.csv" 2>/dev/null)
echo "${clocks:-no clock samples}" >> "$out/gpu_bench.txt"
python3 tools/bench_torch_baseline.py "$out/qmoe_bench.json" "$out/torch_baseline.json" 2>&1 | tee "$out/torch.log"
python3 tools/bench_report.py "$out/qmoe_bench.json" "$out/torch_baseline.json" "$out" \
  "H200 ($(head -2 "$out/gpu_bench.txt" | tail -1)), qmoe ${QMOE_COMMIT:-?}; during qmoe's rows: $(tail -1 "$out/gpu_bench.txt")" > /dev/null
