#!/usr/bin/env bash
# One device call: GPU tests + sanitizers, then the benchmark matrix with the torch baselines.
# Everything lands in OUT/all.tgz (the device tool returns at most 8 files).
#   tools/gpu_session.sh BIN_DIR OUT [all|tests|bench]
# Environment (defaults: the matrix of bench/RESULTS.md): QMOE_BENCH_MODELS, QMOE_BENCH_SCHEMES,
# QMOE_BENCH_TOKENS for table A (and B); QMOE_BENCH_B_MODELS, QMOE_BENCH_B_SCHEMES for table B;
# QMOE_BENCH_C_MODELS, QMOE_BENCH_C_SCHEMES, QMOE_BENCH_C_TOKENS for table C (empty tokens: skip);
# QMOE_BENCH_A_S, QMOE_BENCH_B_S, QMOE_BENCH_C_S time limits in seconds; QMOE_COMMIT for the
# tables' heading.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$1 out=$2 what=${3:-all}
work=$(mktemp -d)
mkdir -p "$work/tests" "$work/bench_a" "$work/bench_b"
if [[ $what != bench ]]; then
  tools/gpu_test.sh "$bin" "$work/tests" > "$work/tests/summary.txt" 2>&1
  echo "gpu tests exit $?" >> "$work/tests/summary.txt"
  tail -n 5 "$work/tests/summary.txt"; grep -E "^\[  (PASSED|FAILED) " "$work/tests/gpu_tests.log"
fi
if [[ $what != tests ]]; then
  tokens=${QMOE_BENCH_TOKENS:-1,8,32,64,128}
  timeout ${QMOE_BENCH_A_S:-250} tools/gpu_bench.sh "$bin" "$work/bench_a" \
    --models ${QMOE_BENCH_MODELS:-qwen3-30b-a3b,mixtral-8x7b,deepseek-v3} \
    --schemes ${QMOE_BENCH_SCHEMES:-w4a16_g128,mxfp4,nvfp4a16,fp8_channel,fp8_block,w4a8_fp8,bf16} \
    --tokens "$tokens" --replays 10 > /dev/null 2>&1
  timeout ${QMOE_BENCH_B_S:-160} tools/gpu_bench.sh "$bin" "$work/bench_b" \
    --models ${QMOE_BENCH_B_MODELS:-kimi-k2-tp8,gpt-oss-120b,deepseek-v3-tp8} \
    --schemes ${QMOE_BENCH_B_SCHEMES:-w4a16_g32,mxfp4,fp8_channel} --tokens "$tokens" --replays 10 > /dev/null 2>&1
  # Table C: prefill token counts (fewer input sets and replays: each forward is milliseconds).
  if [[ -n ${QMOE_BENCH_C_TOKENS-512,2048,8192} ]]; then
    mkdir -p "$work/bench_c"
    timeout ${QMOE_BENCH_C_S:-190} tools/gpu_bench.sh "$bin" "$work/bench_c" \
      --models ${QMOE_BENCH_C_MODELS:-qwen3-30b-a3b,mixtral-8x7b,deepseek-v3} \
      --schemes ${QMOE_BENCH_C_SCHEMES:-w4a16_g128,fp8_channel,bf16} --tokens "${QMOE_BENCH_C_TOKENS-512,2048,8192}" \
      --rotations 4 --replays 5 > /dev/null 2>&1
  fi
  cat "$work"/bench_*/results.md 2>/dev/null | cut -c1-160
fi
tar -czf "$out/all.tgz" -C "$work" .
