#!/usr/bin/env bash
# The bf16 kernel's GEMM2 writing the combine's bf16 terms (make_grouped_bf16_terms; .gpu/t, main
# 6887bed plus the change, uncommitted when run): the prefill and fixture tests, the A/B of the
# same binary with QMOE_CUTLASS_TERMS=0 (A: fp32 rows, as before) against the terms (B), bf16 at
# 2048 / 8192 tokens, three rounds; torch's baselines for the bf16 rows; memcheck of the prefill
# edge cases if time is left.
set -u
d=.gpu/t; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/$d timeout 170 $d/qmoe_cuda_tests \
  --gtest_filter='PrefillKernels.*:DequantizedPrefill.*:CudaMoeLayerApi.*:CudaFixtures.*' > $OUT/t_tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED|OK \]" $OUT/t_tests.log | head -30
AB_ENV_A=QMOE_CUTLASS_TERMS=0 timeout 90 tools/gpu_ab.sh $d $d $OUT/ab 3 --models deepseek-v3-tp8,kimi-k2-tp8,qwen3-30b-a3b,mixtral-8x7b \
  --schemes bf16 --tokens 2048,8192 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab/summary.txt
o=$OUT/torch; mkdir -p $o
QMOE_COMMIT=6887bed+terms timeout 60 tools/gpu_bench.sh $d $o --models deepseek-v3-tp8,kimi-k2-tp8,qwen3-30b-a3b,mixtral-8x7b \
  --schemes bf16 --tokens 2048,8192 --rotations 2 --replays 5 > $o/tail.txt 2>&1
echo "torch rc $? ($((SECONDS - start)) s)"; grep -h "| auto |" $o/results.md
if (( SECONDS - start < 200 )); then
  LD_LIBRARY_PATH=$PWD/$d timeout $((250 - (SECONDS - start))) compute-sanitizer --tool memcheck --error-exitcode 9 $d/qmoe_cuda_tests \
    --gtest_filter='PrefillKernels.EdgeCases' > $OUT/t_memcheck.log 2>&1
  echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -n 2 $OUT/t_memcheck.log
fi
cd $OUT && tar czf logs.tgz ab torch t_tests.log t_memcheck.log 2>/dev/null; rm -rf ab torch
