#!/usr/bin/env bash
# Branch wip/int8-mma (.gpu/i: the int8 register kernel planned for W4A8-INT8, kInt4Int8Regs) against
# main `2f3dc8f`'s qmoe (.gpu/n, carried without its tests).
# 1. Tests: the kernel's own, the prefill layers (W4A8-INT8 now on it; EveryTile; edges), the
#    W4A8-INT8 random layers and the fixtures.
# 2. A/B main vs branch on the automatic path at 2048-8192 tokens (W4A8-INT8, and FP8 channel as the
#    target's reference and a control), two alternated rounds.
# 3. Decode against prefill at 16-512 tokens on the branch (the crossover, kInt4Codes's until now).
# 4. memcheck of the kernel's test.
set -u
tools/gpu_unpack.sh .gpu/i .gpu/n
cp .gpu/i/libfmt.so.9 .gpu/n/ 2>/dev/null
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/i timeout 230 .gpu/i/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*:PrefillKernels.*:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8:CudaFixtures.*' > $OUT/i_tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED|Failure" $OUT/i_tests.log | head -20
timeout 170 tools/gpu_ab.sh .gpu/n .gpu/i $OUT/ab_i 2 --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 \
  --schemes w4a8_int8,fp8_channel --tokens 2048,4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_i/summary.txt
LD_LIBRARY_PATH=$PWD/.gpu/i timeout 80 .gpu/i/qmoe bench --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --schemes w4a8_int8 \
  --tokens 16,32,64,128,256,512 --gemm-paths decode,prefill --rotations 2 --replays 5 > $OUT/crossover.txt 2>&1
echo "crossover rc $? ($((SECONDS - start)) s)"; grep -E "w4a8" $OUT/crossover.txt
LD_LIBRARY_PATH=$PWD/.gpu/i timeout $((575 - (SECONDS - start))) compute-sanitizer --tool memcheck .gpu/i/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*' > $OUT/i_memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/i_memcheck.log | tail -3
cd $OUT && tar czf ab_i.tgz ab_i && rm -rf ab_i
