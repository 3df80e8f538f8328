#!/usr/bin/env bash
# Fourth call (twenty-sixth session): main's build with the per-GEMM tile rule in .gpu/p (qmoe,
# qmoe_cuda_tests, libfmt.so.9; xz) and the previous plan's qmoe (50825f3) in .gpu/m (runs with
# p's libfmt).
# 1. The prefill, dequantized, fixture and API tests on the new plan (not EveryTileMatchesTheCpuBackend,
#    which forces each tile and passed on the third call).
# 2. A/B, old plan (A) against new (B), alternating rounds: bf16 and INT8 on the TP8 shapes and
#    Qwen3-30B-A3B at 2048-8192 tokens (3 rounds).
# 3. The new plan against torch's grouped GEMMs in the same run (tools/gpu_bench.sh): bf16 and
#    INT8 on the five many-token shapes at 2048-8192 tokens.
# 4. With the time left, the A/B on Mixtral and DeepSeek-V3 at 4096 / 8192 tokens (2 rounds).
set -u
tools/gpu_unpack.sh .gpu/p .gpu/m
cp .gpu/p/libfmt.so.9 .gpu/m/
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/p timeout 200 .gpu/p/qmoe_cuda_tests \
  --gtest_filter='PrefillKernels.*:DequantizedPrefill.*:CudaMoeLayerApi.*:CudaFixtures.*:-PrefillKernels.EveryTileMatchesTheCpuBackend' > $OUT/p_tests.log 2>&1
echo "p tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/p_tests.log | head
timeout 180 tools/gpu_ab.sh .gpu/m .gpu/p $OUT/ab_small 3 --models qwen3-30b-a3b,deepseek-v3-tp8,kimi-k2-tp8 \
  --schemes bf16,int8 --tokens 2048,4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab small rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_small/summary.txt
mkdir -p $OUT/torch
QMOE_COMMIT=1e06bd9 timeout 200 tools/gpu_bench.sh .gpu/p $OUT/torch \
  --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3,deepseek-v3-tp8,kimi-k2-tp8 --schemes bf16,int8 --tokens 2048,4096,8192 \
  --rotations 2 --replays 5 > /dev/null 2>&1
echo "torch rc $? ($((SECONDS - start)) s)"; tail -n 40 $OUT/torch/results.md 2>/dev/null
timeout $((570 - (SECONDS - start))) tools/gpu_ab.sh .gpu/m .gpu/p $OUT/ab_large 2 --models mixtral-8x7b,deepseek-v3 \
  --schemes bf16,int8 --tokens 4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab large rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_large/summary.txt
cd $OUT && tar czf logs.tgz p_tests.log ab_small ab_large torch && rm -rf ab_small ab_large torch
