#!/usr/bin/env bash
# Fifth call (twenty-sixth session), the same two builds as the fourth (.gpu/p: 1e06bd9's per-GEMM
# tiles, with its tests; .gpu/m: 50825f3's qmoe).
# 1. Memcheck of the prefill edge cases on the new plan.
# 2. A/B, old plan (A) against new (B): f16 models' dense layers (the f16 kernel takes bf16's tiles).
# 3. bf16 on the TP8 shapes at 4096 / 8192: GEMM2 on the 64 x 128 pingpong and 128 x 128 tiles
#    (many experts with ~170-256 rows each pad their last 128-row tile), GEMM1 on 128 x 256.
set -u
tools/gpu_unpack.sh .gpu/p .gpu/m
cp .gpu/p/libfmt.so.9 .gpu/m/
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/p timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 \
  .gpu/p/qmoe_cuda_tests --gtest_filter='PrefillKernels.EdgeCases:DequantizedPrefill.EdgeCases' > $OUT/p_memcheck.log 2>&1
echo "p memcheck rc $? ($((SECONDS - start)) s)"; tail -n 2 $OUT/p_memcheck.log
timeout 150 tools/gpu_ab.sh .gpu/m .gpu/p $OUT/ab_f16 2 --f16 --models qwen3-30b-a3b,deepseek-v3-tp8,kimi-k2-tp8 \
  --schemes bf16 --tokens 2048,4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab f16 rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_f16/summary.txt
LD_LIBRARY_PATH=$PWD/.gpu/p timeout 100 .gpu/p/qmoe bench --models deepseek-v3-tp8,kimi-k2-tp8 --schemes bf16 --tokens 4096,8192 \
  --gemm-paths auto,prefill:3/2,prefill:3/0,prefill:3/1,prefill:2/1 --rotations 2 --replays 5 > $OUT/tp8_gemm2.txt 2>&1
echo "tp8 rc $? ($((SECONDS - start)) s)"; grep -E " bf16 " $OUT/tp8_gemm2.txt
cd $OUT && tar czf logs.tgz p_memcheck.log ab_f16 tp8_gemm2.txt && rm -rf ab_f16
