#!/usr/bin/env bash
# 29th session, one call: branch wip/int8-turns (.gpu/t, full build): the two int8 consumer
# warpgroups' k-tile MMAs alternate (named barriers 3 and 4), QMOE_MMA_TURNS=1 hands the turn over
# once a warpgroup's MMAs are done, =2 after its first three of four (while the last runs), unset:
# as main (the k-tile's MMAs in two commit groups). ncu (this session's second call): 21% of the
# int8 kernel's warp samples wait on their own MMAs, tensor pipe ~47%, issue 54%: the two
# consumers promote in lockstep.
# 1. Tests under both settings (kernel, W4A8-INT8 random layers; prefill layers under 1), synccheck
#    and memcheck (the barriers), 2. A/B of the same binary: unset vs 1, unset vs 2; then the
#    prefill layers' test under 1 in the time left.
set -u
d=.gpu/t; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
f='Int4Int8Mainloop.*:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8*'
for turns in 1 2; do
  QMOE_MMA_TURNS=$turns timeout 60 $d/qmoe_cuda_tests --gtest_filter="$f" > $OUT/tests_$turns.log 2>&1
  echo "tests turns=$turns rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/tests_$turns.log | head -5
done
small='Int4Int8Mainloop.SumsAtTheLargestGroup:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8*'
for turns in 1 2; do
  for tool in synccheck $([[ $turns == 2 ]] && echo memcheck); do
    QMOE_MMA_TURNS=$turns timeout 50 compute-sanitizer --tool $tool $d/qmoe_cuda_tests --gtest_filter="$small" \
      > $OUT/${tool}_$turns.log 2>&1
    echo "$tool turns=$turns rc $? ($((SECONDS - start)) s)"; grep -hE "SUMMARY|PASSED|FAILED" $OUT/${tool}_$turns.log | tail -2
  done
done
for turns in 1 2; do
  AB_ENV_B=QMOE_MMA_TURNS=$turns timeout 80 tools/gpu_ab.sh $d $d $OUT/ab_$turns 2 \
    --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --schemes w4a8_int8,w4a8_int8_channel --tokens 2048,8192 \
    --rotations 2 --replays 5 > /dev/null 2>&1
  echo "ab turns=$turns rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_$turns/summary.txt
done
QMOE_MMA_TURNS=1 timeout $((440 - SECONDS)) $d/qmoe_cuda_tests --gtest_filter='PrefillKernels.MatchTheCpuBackend' > $OUT/prefill_1.log 2>&1
echo "prefill turns=1 rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/prefill_1.log | head -5
cd $OUT && tar czf ab.tgz ab_1 ab_2 && rm -rf ab_1 ab_2
