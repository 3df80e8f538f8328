#!/usr/bin/env bash
# Branch wip/cluster-2x1 built into .gpu/c (qmoe, qmoe_cuda_tests, libfmt.so.9; xz): the bf16 and FP8
# 128 x 192 / 128 x 256 tiles in clusters of 2 along the input rows (sharing the weight tile) when
# QMOE_CLUSTER_2X1=1, against the 1 x 2 clusters of main in the same binary.
# 1. A/B on the automatic path, alternated rounds: FP8 channel on five shapes, bf16 on four.
# 2. With the time left, the prefill tests with the switch on (EveryTile forces each tile).
set -u
tools/gpu_unpack.sh .gpu/c
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
AB_ENV_B=QMOE_CLUSTER_2X1=1 timeout 230 tools/gpu_ab.sh .gpu/c .gpu/c $OUT/ab_fp8 2 \
  --models mixtral-8x7b,deepseek-v3,qwen3-30b-a3b,deepseek-v3-tp8,kimi-k2-tp8 --schemes fp8_channel \
  --tokens 2048,4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab fp8 rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_fp8/summary.txt
AB_ENV_B=QMOE_CLUSTER_2X1=1 timeout 200 tools/gpu_ab.sh .gpu/c .gpu/c $OUT/ab_bf16 2 \
  --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3-tp8,kimi-k2-tp8 --schemes bf16 \
  --tokens 2048,4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab bf16 rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_bf16/summary.txt
QMOE_CLUSTER_2X1=1 LD_LIBRARY_PATH=$PWD/.gpu/c timeout $((580 - (SECONDS - start))) .gpu/c/qmoe_cuda_tests \
  --gtest_filter='PrefillKernels.*' > $OUT/c_tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED|OK \]" $OUT/c_tests.log | head -20
cd $OUT && tar czf ab.tgz ab_fp8 ab_bf16 && rm -rf ab_fp8 ab_bf16
