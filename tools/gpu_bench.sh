#!/usr/bin/env bash
# Runs `qmoe bench` and the torch grouped-GEMM baselines on the same routed problems, then writes
# the merged table and plot.   tools/gpu_bench.sh BIN_DIR OUT_DIR [qmoe bench options...]
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$1 out=$2
shift 2
export LD_LIBRARY_PATH=$PWD/$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > "$out/gpu_bench.txt" 2>&1
"$bin/qmoe" bench --json "$out/qmoe_bench.json" "$@" 2>&1 | tee "$out/qmoe_bench.log"
python3 tools/bench_torch_baseline.py "$out/qmoe_bench.json" "$out/torch_baseline.json" 2>&1 | tee "$out/torch.log"
python3 tools/bench_report.py "$out/qmoe_bench.json" "$out/torch_baseline.json" "$out" \
  "H200 ($(head -2 "$out/gpu_bench.txt" | tail -1)), qmoe ${QMOE_COMMIT:-?}" > /dev/null
