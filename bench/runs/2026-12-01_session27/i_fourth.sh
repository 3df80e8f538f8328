#!/usr/bin/env bash
# wip/int8-mma `7f72883` (.gpu/i): the register kernel's layer tests (its template now takes the
# format's k-tile and code bytes), then racecheck of the int8 kernel's test with the time left.
set -u
tools/gpu_unpack.sh .gpu/i
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/i timeout 110 .gpu/i/qmoe_cuda_tests --gtest_filter='W4Prefill.*' > $OUT/w4prefill.log 2>&1
echo "W4Prefill rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED|Failure" $OUT/w4prefill.log | head
LD_LIBRARY_PATH=$PWD/.gpu/i timeout $((200 - (SECONDS - start))) compute-sanitizer --tool racecheck .gpu/i/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*' > $OUT/i_racecheck.log 2>&1
echo "racecheck rc $? ($((SECONDS - start)) s)"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED|int4 x int8" $OUT/i_racecheck.log | tail -5
