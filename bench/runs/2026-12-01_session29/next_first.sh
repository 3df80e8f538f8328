#!/usr/bin/env bash
# For the next session (not run), one call: branch wip/int8-three (`a0dfe88`, built into .gpu/3,
# full): the int8 register kernel on 192 x 96 tiles with three consumer warpgroups
# (QMOE_INT8_THREE=1; unset: main's 128 x 128 tiles with two, the same binary). Why: per consumer
# warp and k-tile the MMAs and the promotion run mostly one after the other (bounds: each alone
# 0.6-0.8 of the whole, 29th session), and with two consumer warps per scheduler the tensor pipe
# sits at ~47%; a third warp per scheduler can issue while two wait on their MMAs. A last 192-row
# tile may hold one or two 64-row groups of the repacked rows; its other consumers compute on stale
# codes and store nothing (the tests' odd n cover it: check they do).
# 1. Tests under QMOE_INT8_THREE=1: the int8 kernel's (bf16 and fp32 scales, groups of 128-65536,
#    fused activation, terms, 2 CTAs), prefill layers, W4A8-INT8 random layers; memcheck and
#    racecheck of the kernel's tests (barrier 3 is now the third consumer's epilogue barrier);
#    the kernel's tests unset too (the new n = 512 case on the two-consumer kernel).
# 2. A/B of the same binary, unset vs 1: W4A8-INT8 g128 and per row at 2048-8192 tokens on three
#    shapes, two rounds; then FP8 channel in the same call for the target's ratio.
# Land if faster (then drop the switch: int8 always on 96-row tiles; the planner's tile_inputs).
set -u
d=.gpu/3; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
QMOE_INT8_THREE=1 timeout 150 $d/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*:PrefillKernels.MatchTheCpuBackend:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8*' \
  > $OUT/three_tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/three_tests.log | head
AB_ENV_B=QMOE_INT8_THREE=1 timeout 150 tools/gpu_ab.sh $d $d $OUT/ab_three 2 \
  --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --schemes w4a8_int8,w4a8_int8_channel --tokens 2048,4096,8192 \
  --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_three/summary.txt
timeout 60 $d/qmoe bench --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --schemes fp8_channel \
  --tokens 2048,4096,8192 --rotations 2 --replays 5 > $OUT/fp8.txt 2>&1
echo "fp8 ($((SECONDS - start)) s)"; grep -h "fp8" $OUT/fp8.txt | cut -c1-100
timeout 60 $d/qmoe_cuda_tests --gtest_filter='Int4Int8Mainloop.*' > $OUT/two_tests.log 2>&1  # (unset: the new n = 512 case)
echo "tests (unset) rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/two_tests.log | head
for tool in memcheck racecheck; do  # (memcheck a third of the time left, racecheck the rest)
  limit=$((575 - SECONDS)); [[ $tool == memcheck ]] && limit=$((limit / 3))
  QMOE_INT8_THREE=1 timeout $limit compute-sanitizer --tool $tool $d/qmoe_cuda_tests --gtest_filter='Int4Int8Mainloop.*' \
    > $OUT/three_$tool.log 2>&1
  echo "$tool rc $? ($((SECONDS - start)) s)"; grep -hE "SUMMARY|PASSED|FAILED" $OUT/three_$tool.log | tail -2
done
cd $OUT && tar czf ab_three.tgz ab_three && rm -rf ab_three
