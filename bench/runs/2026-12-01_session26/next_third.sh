#!/usr/bin/env bash
# For the next session (not run): branch wip/decode-k-blocks (`dfa1756`: GEMM2 of the tensor-core
# decode kernel split over several blocks along its reduction, `decode:<n>`) built into .gpu/k
# (qmoe, qmoe_cuda_tests, libfmt.so.9; xz), against main's qmoe in .gpu/n (carry .gpu/k and .gpu/n
# with n's qmoe_cuda_tests.xz moved out: the tracked tree is ~44 MB of a call's 64 MiB).
# 1. Its tests: the new DecodeKernels.GemmTwoOverSeveralBlocksMatchesTheCpuBackend, the decode
#    layers and chained launches; memcheck of the new test.
# 2. Main against the branch on the automatic path at 1-8 tokens (the kernel's instances spill a
#    little more: blockIdx.z and the slices parameter), two alternated rounds.
# 3. The sweep: decode:1..4 (and plain decode) at 1-8 tokens where GEMM2's grid is short (Mixtral,
#    gpt-oss-120b) and where it is not (DeepSeek-V3, Qwen3-30B-A3B).
set -u
tools/gpu_unpack.sh .gpu/k .gpu/n
cp .gpu/k/libfmt.so.9 .gpu/n/ 2>/dev/null
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/k timeout 200 .gpu/k/qmoe_cuda_tests \
  --gtest_filter='DecodeKernels.*:Formats/RandomLayers.*:RandomLayerEdges.*:ChainedLaunches.*:CudaMoeLayerApi.*' > $OUT/k_tests.log 2>&1
echo "k tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/k_tests.log | head
timeout 120 tools/gpu_ab.sh .gpu/n .gpu/k $OUT/ab_k 2 --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 \
  --schemes w4a16_g128,mxfp4,fp8_channel --tokens 1,2,8 --rotations 4 --replays 20 > /dev/null 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_k/summary.txt
LD_LIBRARY_PATH=$PWD/.gpu/k timeout 120 .gpu/k/qmoe bench --models mixtral-8x7b,gpt-oss-120b,qwen3-30b-a3b,deepseek-v3 \
  --schemes w4a16_g128,mxfp4,nvfp4a16,fp8_channel --tokens 1,2,4,8 --gemm-paths decode,decode:2,decode:3,decode:4 \
  --rotations 4 --replays 20 --split-gemms > $OUT/k_sweep.txt 2>&1
echo "sweep rc $? ($((SECONDS - start)) s)"; grep -E "decode" $OUT/k_sweep.txt | head -130
LD_LIBRARY_PATH=$PWD/.gpu/k timeout $((570 - (SECONDS - start))) compute-sanitizer --tool memcheck --error-exitcode 9 \
  .gpu/k/qmoe_cuda_tests --gtest_filter='DecodeKernels.*' > $OUT/k_memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -n 2 $OUT/k_memcheck.log
cd $OUT && tar czf logs.tgz k_tests.log ab_k k_sweep.txt k_memcheck.log && rm -rf ab_k
