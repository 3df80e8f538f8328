#!/usr/bin/env bash
# For the next session (not run), one call: the same build as next_first.sh (branch wip/int8-three
# `fa31fb2`, .gpu/3), its second switch: QMOE_INT4_REGS=1 plans W4A16 with groups of >= 64 (and
# channel scales) on qmoe's register kernel instead of CUTLASS's mixed-input kernel. Why: issue 4's
# W4A16 g128 target on Mixtral at 4096 tokens (650 TFLOP/s) is unmet at 626-645 on CUTLASS; the
# register kernel runs INT4 g32 at ~617 and MXFP4 at ~656 with lighter conversion per group than
# g32, and its GEMM2 writes the combine's terms (CUTLASS's W4A16 GEMM2 does not).
# 1. Tests under QMOE_INT4_REGS=1: the W4A16 random layers and the prefill layers.
# 2. A/B of the same binary, unset vs 1: W4A16 g128 (asym g128 already runs the register kernel: a
#    control) at 1024-8192 tokens on three shapes, two rounds.
# 3. Under 1, decode vs prefill around the register kernel's INT4 crossover on Mixtral and
#    DeepSeek-V3 (gemm_tuning.h's kGroupedMinRowsPerExpertInt4Regs*).
# Land if faster (then in the planner, with its tests), else drop.
set -u
d=.gpu/3; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
QMOE_INT4_REGS=1 timeout 150 $d/qmoe_cuda_tests \
  --gtest_filter='Formats/RandomLayers.MatchTheCpuBackend/w4a16*:PrefillKernels.MatchTheCpuBackend' > $OUT/int4_tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/int4_tests.log | head
AB_ENV_B=QMOE_INT4_REGS=1 timeout 150 tools/gpu_ab.sh $d $d $OUT/ab_int4 2 \
  --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --schemes w4a16_g128,w4a16_asym_g128 --tokens 1024,2048,4096,8192 \
  --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_int4/summary.txt
for job in "mixtral-8x7b 64,96,128,160" "deepseek-v3 128,192,256,384"; do
  set -- $job
  QMOE_INT4_REGS=1 timeout 40 $d/qmoe bench --models $1 --schemes w4a16_g128 --tokens $2 \
    --gemm-paths decode,prefill --rotations 2 --replays 5 >> $OUT/int4_switch.txt 2>&1
done
echo "switch ($((SECONDS - start)) s)"; grep -h "w4a16" $OUT/int4_switch.txt | cut -c1-100
cd $OUT && tar czf ab_int4.tgz ab_int4 && rm -rf ab_int4
