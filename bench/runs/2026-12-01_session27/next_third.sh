#!/usr/bin/env bash
# For the next session (not run): branch wip/int8-f32-scales (the int8 register kernel with fp32
# scales, W4Format::kInt4Int8F32, planned for W4A8-INT8 layers with vLLM's per-row fp32 scales)
# built into .gpu/f (full). Its tests: the kernel's (bf16 and fp32 scales), the prefill layers
# (a new channel-wise fp32 scheme), the random layers of both W4A8-INT8 schemes; memcheck of the
# kernel's test. If they pass, merge it (after wip/int8-overlap's verdict).
set -u
tools/gpu_unpack.sh .gpu/f
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/f timeout 300 .gpu/f/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*:PrefillKernels.MatchTheCpuBackend:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8*' \
  > $OUT/f_tests.log 2>&1
echo "f tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED|fp32 scales" $OUT/f_tests.log | head -20
LD_LIBRARY_PATH=$PWD/.gpu/f timeout $((560 - (SECONDS - start))) compute-sanitizer --tool memcheck .gpu/f/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*' > $OUT/f_memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/f_memcheck.log | tail -3
