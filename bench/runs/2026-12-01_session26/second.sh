#!/usr/bin/env bash
# Second call (twenty-sixth session): branch wip/fp8-terms's build in .gpu/f8 (qmoe, qmoe_cuda_tests,
# libfmt.so.9; xz) and branch wip/wide-tile's qmoe in .gpu/w (xz; runs with f8's libfmt).
# 1. wip/fp8-terms: the prefill, dequantized, fixture and API tests; memcheck of the prefill edge cases.
# 2. wip/wide-tile: every tile, the new pingpong 64 x 256 (prefill:6) included, on FP8 channel
#    (DeepSeek-V3, Qwen3-30B-A3B, DeepSeek-V3 TP8) and bf16 (the TP8 shapes) at 2048-8192 tokens:
#    the first call found the cooperative 128 x 256 (prefill:3) 16% faster than the planned tile for
#    bf16 on the TP8 shapes at 8192.
set -u
tools/gpu_unpack.sh .gpu/f8 .gpu/w
cp .gpu/f8/libfmt.so.9 .gpu/w/
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/f8 timeout 200 .gpu/f8/qmoe_cuda_tests \
  --gtest_filter='PrefillKernels.*:DequantizedPrefill.*:CudaMoeLayerApi.*:CudaFixtures.*' > $OUT/f8_tests.log 2>&1
echo "f8 tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/f8_tests.log | head
LD_LIBRARY_PATH=$PWD/.gpu/w timeout 150 .gpu/w/qmoe bench --models deepseek-v3,qwen3-30b-a3b,deepseek-v3-tp8 --schemes fp8_channel \
  --tokens 2048,4096,8192 --gemm-paths auto,prefill:0,prefill:1,prefill:2,prefill:3,prefill:6 --rotations 2 --replays 5 > $OUT/wide_fp8.txt 2>&1
echo "wide fp8 rc $? ($((SECONDS - start)) s)"; grep -E "fp8_channel" $OUT/wide_fp8.txt
LD_LIBRARY_PATH=$PWD/.gpu/w timeout 120 .gpu/w/qmoe bench --models deepseek-v3-tp8,kimi-k2-tp8,qwen3-30b-a3b --schemes bf16 --tokens 2048,4096,8192 \
  --gemm-paths auto,prefill:0,prefill:1,prefill:2,prefill:3,prefill:6 --rotations 2 --replays 5 > $OUT/wide_bf16.txt 2>&1
echo "wide bf16 rc $? ($((SECONDS - start)) s)"; grep -E " bf16 " $OUT/wide_bf16.txt
LD_LIBRARY_PATH=$PWD/.gpu/f8 timeout $((570 - (SECONDS - start))) compute-sanitizer --tool memcheck --error-exitcode 9 \
  .gpu/f8/qmoe_cuda_tests --gtest_filter='PrefillKernels.EdgeCases' > $OUT/f8_memcheck.log 2>&1
echo "f8 memcheck rc $? ($((SECONDS - start)) s)"; tail -n 2 $OUT/f8_memcheck.log
cd $OUT && tar czf logs.tgz f8_tests.log f8_memcheck.log wide_fp8.txt wide_bf16.txt
