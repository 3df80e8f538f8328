#!/usr/bin/env bash
# Carry [".gpu/f16"]. The tests the review fixes touch, then memcheck of the f16 ones. Logs to $OUT.
set -u
B=.gpu/f16
for f in $B/*.gz; do [[ -e $f ]] && gunzip -f $f; done; chmod +x $B/qmoe $B/qmoe_cuda_tests
export LD_LIBRARY_PATH=$PWD/$B QMOE_TEST_DATA_DIR=$PWD/tests/data
w=$OUT; mkdir -p $w/tests
timeout 300 $B/qmoe_cuda_tests --gtest_filter='DequantizedPrefill.*:PrefillKernels.*:RandomLayerEdges.HalfPrecisionModels:W4Prefill.*' > $w/tests/tests.log 2>&1; echo "tests exit $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran|OK \]" $w/tests/tests.log | head -20
grep -E "f16 (auto|prefill)" $w/tests/tests.log | head -40
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/qmoe_cuda_tests \
  --gtest_filter='DequantizedPrefill.WeightsAreTheCpusBitForBit:DequantizedPrefill.HalfPrecisionModels' > $w/tests/memcheck.log 2>&1
echo "memcheck exit $?"; tail -n 3 $w/tests/memcheck.log
tar -C $w -czf $w/tests_logs.tgz tests && rm -rf $w/tests
