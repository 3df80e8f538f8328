#!/usr/bin/env bash
# For the next session (not run), one call: main's build in .gpu/n (qmoe, qmoe_cuda_tests,
# libfmt.so.9; xz) and branch wip/fp8-terms's qmoe in .gpu/f8 (carry .gpu/n and .gpu/f8 with
# f8's qmoe_cuda_tests.xz moved out: the tracked tree is ~43 MB of the 64 MiB a call carries).
# 1. Main (`57bae6e`'s code): the prefill, dequantized, fixture and API tests (the bf16 terms
#    instances have run 12 of these 13 only, before two small edits; EdgeCases failed on its own
#    new case, since changed), and last, with the time left, memcheck of the prefill edge cases.
# 2. wip/fp8-terms: the A/B of its binary with QMOE_CUTLASS_TERMS=0 (A) against the terms (B) on
#    FP8 channel and bf16 at 2048 / 8192 tokens, three rounds.
# 3. bf16 at 8192 tokens on the TP8 shapes (0.81-0.85x torch): every tile of the bf16 kernel.
# 4. FP8 channel on DeepSeek-V3 and Qwen3-30B-A3B: every tile (below).
set -u
tools/gpu_unpack.sh .gpu/n .gpu/f8
cp .gpu/n/libfmt.so.9 .gpu/f8/ 2>/dev/null
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/n timeout 200 .gpu/n/qmoe_cuda_tests \
  --gtest_filter='PrefillKernels.*:DequantizedPrefill.*:CudaMoeLayerApi.*:CudaFixtures.*' > $OUT/n_tests.log 2>&1
echo "n tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/n_tests.log | head
AB_ENV_A=QMOE_CUTLASS_TERMS=0 timeout 120 tools/gpu_ab.sh .gpu/f8 .gpu/f8 $OUT/ab_f8 3 \
  --models deepseek-v3,qwen3-30b-a3b,mixtral-8x7b,deepseek-v3-tp8 --schemes fp8_channel,bf16 --tokens 2048,8192 \
  --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab f8 rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_f8/summary.txt
LD_LIBRARY_PATH=$PWD/.gpu/n timeout 60 .gpu/n/qmoe bench --models deepseek-v3-tp8,kimi-k2-tp8 --schemes bf16 --tokens 8192 \
  --gemm-paths auto,prefill:0,prefill:1,prefill:2,prefill:3 --rotations 2 --replays 5 > $OUT/bf16_tiles.txt 2>&1
echo "tiles rc $? ($((SECONDS - start)) s)"; grep -E "tp8" $OUT/bf16_tiles.txt
# 4. FP8 channel on DeepSeek-V3 and Qwen3-30B-A3B at 4096 / 8192 tokens on every tile: with ~128-256
#    rows per expert a 128-row tile pads 19-32% of its rows on DeepSeek-V3's routing (a uniform
#    routing simulated: 64-row tiles 10-19%), a candidate for the FP8 targets' gap.
LD_LIBRARY_PATH=$PWD/.gpu/n timeout 90 .gpu/n/qmoe bench --models deepseek-v3,qwen3-30b-a3b --schemes fp8_channel \
  --tokens 4096,8192 --gemm-paths auto,prefill:0,prefill:1,prefill:2,prefill:3 --rotations 2 --replays 5 \
  > $OUT/fp8_tiles.txt 2>&1
echo "fp8 tiles rc $? ($((SECONDS - start)) s)"; grep -E "fp8_channel" $OUT/fp8_tiles.txt
# Memcheck last, with the time left (EdgeCases runs ~8 s natively; memcheck is much slower).
LD_LIBRARY_PATH=$PWD/.gpu/n timeout $((570 - (SECONDS - start))) compute-sanitizer --tool memcheck --error-exitcode 9 \
  .gpu/n/qmoe_cuda_tests --gtest_filter='PrefillKernels.EdgeCases' > $OUT/n_memcheck.log 2>&1
echo "n memcheck rc $? ($((SECONDS - start)) s)"; tail -n 2 $OUT/n_memcheck.log
cd $OUT && tar czf logs.tgz ab_f8 n_tests.log n_memcheck.log bf16_tiles.txt fp8_tiles.txt && rm -rf ab_f8
