#!/usr/bin/env bash
# For the next session (not run), one call with carry [".gpu/n"]: main `1e5a483` (.gpu/n; rebuild
# and repack it if .gpu/ did not survive). The whole suite and memcheck (~360 s): the review
# follow-ups of `107f3ef` ran only the tests they touch (8 of 8); `1e5a483` changed only the CLI's
# report (CPU-tested). Then the mid-range A/B of the thirty-first session again, if time is left.
set -u
d=.gpu/n; tools/gpu_unpack.sh $d
start=$SECONDS
mkdir -p $OUT/t
QMOE_GPU_TEST_PARTS="tests memcheck" timeout 450 tools/gpu_test.sh $d $OUT/t > $OUT/t/summary.txt 2>&1
echo "gpu_test rc $? ($((SECONDS - start)) s)"
grep -hE "^\[  (PASSED|FAILED)|FAILED TEST|ERROR SUMMARY" $OUT/t/gpu_tests.log $OUT/t/memcheck.log
grep -h "Failure" -A8 $OUT/t/gpu_tests.log | head -40
export LD_LIBRARY_PATH=$PWD/$d
if (( SECONDS - start < 480 )); then
  timeout 90 $d/qmoe bench --models mixtral-8x7b,deepseek-v3 --schemes w4a16_g128 --tokens 64,128,512,1024 \
    --gemm-paths auto,decode,prefill --rotations 2 --replays 5 > $OUT/t/mid.txt 2>&1
  echo "mid rc $?"; grep -E "auto|decode|prefill" $OUT/t/mid.txt | cut -c1-75
fi
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t
