#!/usr/bin/env bash
# Branch wip/int8-mma built into .gpu/i: the 4-bit register kernel's int8-input variant (W4A8 with
# INT8 activations on int8 MMAs, W4Format::kInt4Int8), its direct test against exact integer sums,
# and the register kernel's other tests (the template now takes the format's k-tile and code bytes).
set -u
tools/gpu_unpack.sh .gpu/i
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/i timeout 200 .gpu/i/qmoe_cuda_tests --gtest_filter='Int4Int8Mainloop.*' > $OUT/i8_tests.log 2>&1
echo "int8 test rc $? ($((SECONDS - start)) s)"; grep -E "int4 x int8|FAILED|PASSED|Failure|error" $OUT/i8_tests.log | head -60
LD_LIBRARY_PATH=$PWD/.gpu/i timeout 250 .gpu/i/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $OUT/w4_tests.log 2>&1
echo "w4 tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/w4_tests.log | head
