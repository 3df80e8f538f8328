#!/usr/bin/env bash
# For the next session (not run), one call: main `e922871` (.gpu/n, full), CudaMoeLayer's
# repacked_copy. 1. The new GPU test RepackedCopy.OffKeepsOneCopyAndMatchesTheCpuBackend (the
# register kernel's layers without their repacked copy: CUTLASS's mixed-input kernel for W4A16 g128
# and channel, the bf16 codes kernel for W4A8-INT8, the dequantized path for asym g32, MXFP4 and
# NVFP4 A16), then under memcheck; the planner's other GPU tests it touches (W4Prefill,
# PrefillKernels.EdgeCases). 2. What the one-copy plan costs: the same binary with and
# without --no-repacked-copy, W4A16 g128, MXFP4, W4A8-INT8 g128 on three shapes at 1024 / 4096
# tokens (one round each; the with-copy side is the A/B of the thirtieth session's verify/).
set -u
d=.gpu/n; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
pass() { grep -hE "^\[  (PASSED|FAILED)|FAILED|SUMMARY" "$1" | tail -3; }
timeout 200 $d/qmoe_cuda_tests --gtest_filter='RepackedCopy.*:W4Prefill.*:PrefillKernels.EdgeCases' \
  > $OUT/tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; pass $OUT/tests.log
timeout 150 compute-sanitizer --tool memcheck $d/qmoe_cuda_tests --gtest_filter='RepackedCopy.*' > $OUT/memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; pass $OUT/memcheck.log
for side in copy one; do
  flag=$([[ $side == one ]] && echo --no-repacked-copy)
  timeout 80 $d/qmoe bench --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --schemes w4a16_g128,mxfp4,w4a8_int8 \
    --tokens 1024,4096 --rotations 2 --replays 5 $flag > $OUT/bench_$side.txt 2>&1
  echo "bench $side rc $? ($((SECONDS - start)) s)"
done
paste -d'|' <(grep -h "auto" $OUT/bench_copy.txt | cut -c1-75) <(grep -h "auto" $OUT/bench_one.txt | cut -c45-75)
