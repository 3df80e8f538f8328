#!/usr/bin/env bash
# Third call (twenty-sixth session): main 50825f3's build in .gpu/m (qmoe, qmoe_cuda_tests,
# libfmt.so.9; xz): FP8 terms landed, prefill:<tile1>/<tile2> new.
# 1. The prefill kernel tests (EveryTileMatchesTheCpuBackend now also runs GEMM1 and GEMM2 on
#    different tiles).
# 2. Each GEMM's tile apart, at 2048 / 4096 / 8192 tokens on the five many-token shapes: bf16 (the
#    128 x 256 tile beat the planned one by 4-22% on the TP8 shapes and Qwen3-30B-A3B in the second
#    call; it lost 1-4% on DeepSeek-V3 in an earlier session), FP8 channel and INT8.
set -u
tools/gpu_unpack.sh .gpu/m
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/m timeout 200 .gpu/m/qmoe_cuda_tests --gtest_filter='PrefillKernels.*' > $OUT/m_tests.log 2>&1
echo "m tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED|tiles [0-9]" $OUT/m_tests.log | head -40
models=deepseek-v3,mixtral-8x7b,qwen3-30b-a3b,deepseek-v3-tp8,kimi-k2-tp8
LD_LIBRARY_PATH=$PWD/.gpu/m timeout 150 .gpu/m/qmoe bench --models $models --schemes bf16 --tokens 2048,4096,8192 \
  --gemm-paths auto,prefill:0,prefill:1,prefill:3,prefill:1/3,prefill:3/1,prefill:0/3,prefill:3/0 --rotations 2 --replays 5 \
  > $OUT/tiles_bf16.txt 2>&1
echo "bf16 rc $? ($((SECONDS - start)) s)"; grep -E " bf16 " $OUT/tiles_bf16.txt
LD_LIBRARY_PATH=$PWD/.gpu/m timeout 150 .gpu/m/qmoe bench --models $models --schemes fp8_channel --tokens 2048,4096,8192 \
  --gemm-paths auto,prefill:1,prefill:1/3,prefill:3/1,prefill:0/3,prefill:3/0 --rotations 2 --replays 5 \
  > $OUT/tiles_fp8.txt 2>&1
echo "fp8 rc $? ($((SECONDS - start)) s)"; grep -E "fp8_channel" $OUT/tiles_fp8.txt
LD_LIBRARY_PATH=$PWD/.gpu/m timeout 100 .gpu/m/qmoe bench --models $models --schemes int8 --tokens 4096,8192 \
  --gemm-paths auto,prefill:0,prefill:3,prefill:0/3,prefill:3/0 --rotations 2 --replays 5 > $OUT/tiles_int8.txt 2>&1
echo "int8 rc $? ($((SECONDS - start)) s)"; grep -E " int8 " $OUT/tiles_int8.txt
