#!/usr/bin/env bash
# The whole GPU suite and memcheck on the session's final build (.gpu/fin; commit in the README).
set -u
d=.gpu/fin; tools/gpu_unpack.sh $d
mkdir -p $OUT/t
QMOE_GPU_TEST_PARTS="tests memcheck" timeout 570 tools/gpu_test.sh $d $OUT/t > $OUT/t/summary.txt 2>&1
echo "gpu_test rc $?"
grep -hE "^\[  (PASSED|FAILED)|FAILED TEST|ERROR SUMMARY" $OUT/t/gpu_tests.log $OUT/t/memcheck.log
grep -h "Failure" -A8 $OUT/t/gpu_tests.log | head -40
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t
