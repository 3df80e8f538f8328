#!/usr/bin/env bash
# For the next session (not run), one call: branch wip/int8-three (`fa31fb2`, built into .gpu/3,
# full): the int8 register kernel with more consumer warpgroups, QMOE_INT8_CONSUMERS=3 (192 x 96
# tiles, 152 registers a consumer) or 4 (256 x 64 tiles, 112 registers); unset: main's 128 x 128
# tiles with two, the same binary. Why: per consumer warp and k-tile the MMAs and the promotion run
# mostly one after the other (bounds: each alone 0.6-0.8 of the whole, 29th session), and with two
# consumer warps per scheduler the tensor pipe sits at ~47%; more warps per scheduler can issue
# while others wait on their MMAs. A last weight tile may hold fewer 64-row groups than consumers;
# the others compute on stale codes and store nothing (the kernel test's n = 200, 320, 512 cover
# it). Steps, the A/B first (the sanitizers take what time is left):
# 1. Tests under 3 and 4: the int8 kernel's (bf16 and fp32 scales, groups of 128-65536, fused
#    activation, terms, 2 CTAs) and the W4A8-INT8 random layers.
# 2. A/B of the same binary, unset vs 3 and unset vs 4: W4A8-INT8 g128 and per row at 2048-8192
#    tokens on three shapes, two rounds; FP8 channel in the same call for the target's ratio.
# 3. The kernel's tests unset (its new n = 512 case on two consumers); the prefill layers under 3
#    and 4; memcheck and racecheck of the kernel's tests under 3 and 4 (barriers 3 and 4 are the
#    third and fourth consumers' epilogue barriers).
# Land the faster if it is faster (then without the switch: the planner's tile_inputs for int8).
set -u
d=.gpu/3; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
left() { echo $(( $1 - SECONDS > 5 ? $1 - SECONDS : 5 )); }  # seconds until the script's mark $1
pass() { grep -hE "^\[  (PASSED|FAILED)|FAILED|SUMMARY" "$1" | tail -3; }
for c in 3 4; do
  QMOE_INT8_CONSUMERS=$c timeout 60 $d/qmoe_cuda_tests \
    --gtest_filter='Int4Int8Mainloop.*:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8*' > $OUT/tests_$c.log 2>&1
  echo "tests $c rc $? ($((SECONDS - start)) s)"; pass $OUT/tests_$c.log
done
for c in 3 4; do
  AB_ENV_B=QMOE_INT8_CONSUMERS=$c timeout 100 tools/gpu_ab.sh $d $d $OUT/ab_$c 2 \
    --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --schemes w4a8_int8,w4a8_int8_channel --tokens 2048,4096,8192 \
    --rotations 2 --replays 5 > /dev/null 2>&1
  echo "ab $c rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_$c/summary.txt
done
timeout 40 $d/qmoe bench --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --schemes fp8_channel \
  --tokens 2048,4096,8192 --rotations 2 --replays 5 > $OUT/fp8.txt 2>&1
echo "fp8 ($((SECONDS - start)) s)"; grep -h "fp8" $OUT/fp8.txt | cut -c1-100
timeout 40 $d/qmoe_cuda_tests --gtest_filter='Int4Int8Mainloop.*' > $OUT/tests_2.log 2>&1
echo "tests unset rc $? ($((SECONDS - start)) s)"; pass $OUT/tests_2.log
for c in 3 4; do
  QMOE_INT8_CONSUMERS=$c timeout $(left 420) $d/qmoe_cuda_tests --gtest_filter='PrefillKernels.MatchTheCpuBackend' \
    > $OUT/prefill_$c.log 2>&1
  echo "prefill $c rc $? ($((SECONDS - start)) s)"; pass $OUT/prefill_$c.log
done
for tool in memcheck racecheck; do
  for c in 3 4; do
    mark=$([[ $tool == memcheck ]] && echo 470 || echo 580)
    QMOE_INT8_CONSUMERS=$c timeout $(left $mark) compute-sanitizer --tool $tool $d/qmoe_cuda_tests \
      --gtest_filter='Int4Int8Mainloop.*' > $OUT/${tool}_$c.log 2>&1
    echo "$tool $c rc $? ($((SECONDS - start)) s)"; pass $OUT/${tool}_$c.log
  done
done
cd $OUT && tar czf ab.tgz ab_3 ab_4 && rm -rf ab_3 ab_4
