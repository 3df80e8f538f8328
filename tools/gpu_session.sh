#!/usr/bin/env bash
# One device call: GPU tests + sanitizers and/or the benchmark tables with the torch baselines.
# Everything lands in OUT/all.tgz (the device tool returns at most 8 files).
#   tools/gpu_session.sh BIN_DIR OUT [PARTS]
# PARTS: comma list of tests, a, b, c, d (default: all of them; a device call is limited to 10
# minutes, so split: tests,a then b,c,d).
#   a  decode tokens (QMOE_BENCH_TOKENS, default 1,8,32,64,128) x QMOE_BENCH_MODELS x QMOE_BENCH_SCHEMES
#   b  the same tokens on QMOE_BENCH_B_MODELS x QMOE_BENCH_B_SCHEMES (TP8 shapes, gpt-oss)
#   c  prefill tokens (QMOE_BENCH_C_TOKENS) x QMOE_BENCH_C_MODELS x QMOE_BENCH_C_SCHEMES
#   d  the decode/prefill crossover: QMOE_BENCH_D_TOKENS x QMOE_BENCH_D_SCHEMES on the decode,
#      prefill and auto paths
# QMOE_BENCH_{A,B,C,D}_S: time limits in seconds; QMOE_COMMIT: the tables' heading.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$1 out=$2 parts=,${3:-tests,a,b,c,d},
work=$(mktemp -d)
has() { [[ $parts == *,$1,* ]]; }
bench() {  # bench NAME LIMIT_S qmoe-bench-options...
  local name=$1 limit=$2
  shift 2
  mkdir -p "$work/bench_$name"
  timeout "$limit" tools/gpu_bench.sh "$bin" "$work/bench_$name" "$@" > /dev/null 2>&1
  echo "table $name exit $?"
}
if has tests; then
  mkdir -p "$work/tests"
  tools/gpu_test.sh "$bin" "$work/tests" > "$work/tests/summary.txt" 2>&1
  echo "gpu tests exit $?" >> "$work/tests/summary.txt"
  tail -n 5 "$work/tests/summary.txt"; grep -E "^\[  (PASSED|FAILED) " "$work/tests/gpu_tests.log"
fi
tokens=${QMOE_BENCH_TOKENS:-1,8,32,64,128}
has a && bench a "${QMOE_BENCH_A_S:-250}" --models "${QMOE_BENCH_MODELS:-qwen3-30b-a3b,mixtral-8x7b,deepseek-v3}" \
  --schemes "${QMOE_BENCH_SCHEMES:-w4a16_g128,mxfp4,nvfp4a16,fp8_channel,fp8_block,w4a8_fp8,bf16}" \
  --tokens "$tokens" --replays 10
has b && bench b "${QMOE_BENCH_B_S:-160}" --models "${QMOE_BENCH_B_MODELS:-kimi-k2-tp8,gpt-oss-120b,deepseek-v3-tp8}" \
  --schemes "${QMOE_BENCH_B_SCHEMES:-w4a16_g32,mxfp4,fp8_channel}" --tokens "$tokens" --replays 10
# Prefill token counts: fewer input sets and replays (each forward is milliseconds). Only schemes
# with prefill kernels by default; the others run their decode kernels there (see RESULTS.md).
has c && bench c "${QMOE_BENCH_C_S:-200}" --models "${QMOE_BENCH_C_MODELS:-qwen3-30b-a3b,mixtral-8x7b,deepseek-v3}" \
  --schemes "${QMOE_BENCH_C_SCHEMES:-fp8_channel,int8,bf16}" --tokens "${QMOE_BENCH_C_TOKENS:-1024,2048,4096,8192,16384}" \
  --rotations 3 --replays 5
has d && bench d "${QMOE_BENCH_D_S:-150}" --models "${QMOE_BENCH_D_MODELS:-qwen3-30b-a3b,mixtral-8x7b,deepseek-v3}" \
  --schemes "${QMOE_BENCH_D_SCHEMES:-fp8_channel,int8,bf16}" --tokens "${QMOE_BENCH_D_TOKENS:-1,4,8,16,32,64,256}" \
  --gemm-paths decode,prefill,auto --rotations 4 --replays 10
cat "$work"/bench_*/results.md 2>/dev/null | cut -c1-170
tar -czf "$out/all.tgz" -C "$work" .
