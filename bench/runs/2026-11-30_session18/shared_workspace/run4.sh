#!/usr/bin/env bash
# Carry [".gpu/f16"]. The API tests (the shared workspace), memcheck of the new test, then the rest of
# the suite in the time left. Logs to $OUT (written as they go).
set -u
B=.gpu/f16
for f in $B/*.gz; do [[ -e $f ]] && gunzip -f $f; done; chmod +x $B/qmoe $B/qmoe_cuda_tests
export LD_LIBRARY_PATH=$PWD/$B QMOE_TEST_DATA_DIR=$PWD/tests/data
w=$OUT
timeout 90 $B/qmoe_cuda_tests --gtest_filter='CudaMoeLayerApi.*' > $w/api.log 2>&1; echo "api exit $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|OK \]|Failure|differs|own " $w/api.log | head -20
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/qmoe_cuda_tests --gtest_filter='CudaMoeLayerApi.LayersSharingAWorkspaceMatchTheirOwn' > $w/memcheck.log 2>&1
echo "memcheck exit $?"; tail -n 3 $w/memcheck.log
timeout ${REST:-170} $B/qmoe_cuda_tests --gtest_filter='-CudaMoeLayerApi.*' > $w/gpu_tests.log 2>&1; echo "rest exit $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran|^\[ RUN" $w/gpu_tests.log | tail -5
grep -c "^\[       OK" $w/gpu_tests.log
