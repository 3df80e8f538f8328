#!/usr/bin/env bash
# For the next session (not run), the second call: branch wip/fp8-terms's build in .gpu/f8 (qmoe,
# qmoe_cuda_tests, libfmt.so.9; xz) and branch wip/wide-tile's qmoe in .gpu/w (xz; it runs with
# f8's libfmt). Carry .gpu/f8 and .gpu/w only (the tracked tree is ~43 MB of a call's 64 MiB).
# 1. wip/fp8-terms: the prefill, fixture and API tests (FP8's GEMM2 now writes the terms, and the
#    routing weights moved to the sorted-scales piece's tail), memcheck of the prefill edge cases.
# 2. wip/wide-tile: the new 64 x 256 pingpong tile (prefill:6) against the pingpong 64 x 128
#    (prefill:2) and the cooperative 128 x 256 (prefill:3) / 128 x 192 (prefill:1) tiles: FP8
#    channel on DeepSeek-V3 and Qwen3-30B-A3B at 4096 / 8192 tokens, bf16 on the TP8 shapes at 8192.
#    (Its own tests, PrefillKernels.EveryTileMatchesTheCpuBackend on a build with its test binary,
#    are for the call that lands it.)
set -u
tools/gpu_unpack.sh .gpu/f8 .gpu/w
cp .gpu/f8/libfmt.so.9 .gpu/w/
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/f8 timeout 200 .gpu/f8/qmoe_cuda_tests \
  --gtest_filter='PrefillKernels.*:DequantizedPrefill.*:CudaMoeLayerApi.*:CudaFixtures.*' > $OUT/f8_tests.log 2>&1
echo "f8 tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/f8_tests.log | head
LD_LIBRARY_PATH=$PWD/.gpu/w timeout 120 .gpu/w/qmoe bench --models deepseek-v3,qwen3-30b-a3b --schemes fp8_channel \
  --tokens 4096,8192 --gemm-paths auto,prefill:1,prefill:2,prefill:3,prefill:6 --rotations 2 --replays 5 > $OUT/wide_fp8.txt 2>&1
echo "wide fp8 rc $? ($((SECONDS - start)) s)"; grep -E "fp8_channel" $OUT/wide_fp8.txt
LD_LIBRARY_PATH=$PWD/.gpu/w timeout 60 .gpu/w/qmoe bench --models deepseek-v3-tp8,kimi-k2-tp8 --schemes bf16 --tokens 8192 \
  --gemm-paths auto,prefill:0,prefill:1,prefill:2,prefill:6 --rotations 2 --replays 5 > $OUT/wide_bf16.txt 2>&1
echo "wide bf16 rc $? ($((SECONDS - start)) s)"; grep -E "tp8" $OUT/wide_bf16.txt
LD_LIBRARY_PATH=$PWD/.gpu/f8 timeout $((570 - (SECONDS - start))) compute-sanitizer --tool memcheck --error-exitcode 9 \
  .gpu/f8/qmoe_cuda_tests --gtest_filter='PrefillKernels.EdgeCases' > $OUT/f8_memcheck.log 2>&1
echo "f8 memcheck rc $? ($((SECONDS - start)) s)"; tail -n 2 $OUT/f8_memcheck.log
cd $OUT && tar czf logs.tgz f8_tests.log f8_memcheck.log wide_fp8.txt wide_bf16.txt
