#!/usr/bin/env bash
# One call after verify.sh: the GPU suite's memcheck and racecheck parts (tools/gpu_test.sh) on main
# `afbf7e2` (.gpu/n, full).
set -u
tools/gpu_unpack.sh .gpu/n
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
mkdir -p $OUT/suite
QMOE_GPU_TEST_PARTS="memcheck racecheck" timeout 480 tools/gpu_test.sh .gpu/n $OUT/suite > $OUT/suite/tail.txt 2>&1
echo "sanitizers rc $? ($((SECONDS - start)) s)"; cat $OUT/suite/tail.txt
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|tests ran|PASSED|FAILED" $OUT/suite/*.log
cd $OUT && xz suite/*.log
