#!/usr/bin/env bash
# Seventh call (twenty-sixth session): main with the review follow-ups to the per-GEMM tiles
# (.gpu/f: qmoe, qmoe_cuda_tests, libfmt.so.9; xz): the prefill kernel tests, whose tile tests now
# also run the planner's GEMM1 with a forced GEMM2, a GEMM2 tile its kernel lacks, and a TP8-like
# dense layer on the automatic path (128 x 256, then 128 x 192 on the short GEMM2).
set -u
tools/gpu_unpack.sh .gpu/f
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/f timeout 240 .gpu/f/qmoe_cuda_tests --gtest_filter='PrefillKernels.*' > $OUT/f_tests.log 2>&1
echo "f tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED|inter 256|planned/" $OUT/f_tests.log | head -30
