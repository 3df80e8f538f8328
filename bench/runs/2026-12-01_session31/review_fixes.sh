#!/usr/bin/env bash
# After a read-only review of `265b200` (.gpu/fin2): the plan without the copy only where it differs
# and only where max_tokens reaches CUTLASS's crossover, no such range with a short reduction,
# CudaMoeLayer::choose_plan / runs_plan_without_copy. The tests it touches, then memcheck of the
# new one. Logs in $OUT/r.tgz.
set -u
d=.gpu/fin2; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
r=$OUT/r; mkdir -p $r; start=$SECONDS
timeout 150 $d/qmoe_cuda_tests --gtest_filter='RepackedCopy.*:W4Prefill.*:PrefillKernels.EdgeCases:CudaMoeLayerApi.*' > $r/tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|^\[       OK" $r/tests.log
grep -h "Failure" -A8 $r/tests.log | head -40
timeout 60 compute-sanitizer --tool memcheck $d/qmoe_cuda_tests --gtest_filter='RepackedCopy.W4A16*' > $r/memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|ERROR SUMMARY" $r/memcheck.log
tar czf $OUT/r.tgz -C $OUT r && rm -rf $r
