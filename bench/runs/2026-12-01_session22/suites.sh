#!/usr/bin/env bash
# Call 1: the whole GPU suite with the sanitizers on main (ce940a9: the combine rewrite and the 50
# DivideRn divisors had not run it whole), then the wip/bf16-terms branch's first GPU run: the
# kernel and layer tests its change reaches, and memcheck / racecheck on the direct terms test.
set -u
for d in .gpu/m .gpu/b; do xz -d $d/*.xz; chmod +x $d/qmoe $d/qmoe_cuda_tests; done
export QMOE_TEST_DATA_DIR=$PWD/tests/data
o=$OUT/s; mkdir -p $o
start=$SECONDS
tools/gpu_test.sh .gpu/m $o/main_suite > $o/main_suite_tail.txt 2>&1; echo "main suite rc $? ($((SECONDS - start)) s)" | tee $OUT/summary.txt
grep -hE "^\[  (PASSED|FAILED)|SUMMARY" $o/main_suite/*.log | tee -a $OUT/summary.txt
export LD_LIBRARY_PATH=$PWD/.gpu/b
f='Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:CudaMoeLayerApi.*:RandomLayerEdges.*'
timeout 100 .gpu/b/qmoe_cuda_tests --gtest_filter="$f" > $o/b_tests.log 2>&1; echo "branch tests rc $? ($((SECONDS - start)) s)" | tee -a $OUT/summary.txt
grep -hE "^\[  (PASSED|FAILED)|FAILED" $o/b_tests.log | tee -a $OUT/summary.txt
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/b/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $o/b_memcheck.log 2>&1; echo "branch memcheck rc $? ($((SECONDS - start)) s)" | tee -a $OUT/summary.txt
timeout 120 compute-sanitizer --tool racecheck .gpu/b/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $o/b_racecheck.log 2>&1; echo "branch racecheck rc $? ($((SECONDS - start)) s)" | tee -a $OUT/summary.txt
grep -hE "^\[  (PASSED|FAILED)|SUMMARY" $o/b_memcheck.log $o/b_racecheck.log | tee -a $OUT/summary.txt
tar czf $OUT/logs.tgz -C $o .
