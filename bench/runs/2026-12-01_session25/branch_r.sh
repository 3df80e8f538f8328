#!/usr/bin/env bash
# The wip/ring-position half of 2026-12-01_session24/next_branches.sh (the two branches' builds and
# the tracked tree did not fit one call's 64 MiB): .gpu/r's register-kernel tests, memcheck of its
# kernel tests, the A/B against main (.gpu/n, qmoe only) at 4096 tokens.
set -u
tools/gpu_unpack.sh .gpu/n .gpu/r
cp .gpu/n/libfmt.so.9 .gpu/r/
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
kernel_tests='Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:W4Prefill.*'
LD_LIBRARY_PATH=$PWD/.gpu/r timeout 120 .gpu/r/qmoe_cuda_tests --gtest_filter="$kernel_tests" > $OUT/r_tests.log 2>&1
echo "r tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/r_tests.log | head
LD_LIBRARY_PATH=$PWD/.gpu/r timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/r/qmoe_cuda_tests \
  --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $OUT/r_memcheck.log 2>&1
echo "r memcheck rc $? ($((SECONDS - start)) s)"; tail -n 2 $OUT/r_memcheck.log
timeout 100 tools/gpu_ab.sh .gpu/n .gpu/r $OUT/ab_r 3 --models qwen3-30b-a3b,deepseek-v3-tp8,mixtral-8x7b \
  --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 4096 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab r rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_r/summary.txt
cd $OUT && tar czf logs_r.tgz ab_r r_tests.log r_memcheck.log && rm -rf ab_r
