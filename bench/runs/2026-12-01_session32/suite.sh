#!/usr/bin/env bash
# Fourth call (carry [".gpu/w"]: `wip/swapped` with the wide tile planned): the whole GPU suite and
# memcheck (the planner now picks the swapped 128 x 192 tile at 132-180 mean rows per expert, so
# the suite's 300-token layers on 16 experts, top-8, run it on the automatic path).
set -u
d=${1:-.gpu/w}; tools/gpu_unpack.sh $d  # (next_first.sh passes another build)
start=$SECONDS
mkdir -p $OUT/t
QMOE_GPU_TEST_PARTS="tests memcheck" timeout 560 tools/gpu_test.sh $d $OUT/t > $OUT/t/summary.txt 2>&1
echo "gpu_test rc $? ($((SECONDS - start)) s)"
grep -hE "^\[  (PASSED|FAILED)|FAILED TEST|ERROR SUMMARY" $OUT/t/gpu_tests.log $OUT/t/memcheck.log
grep -h "Failure" -A8 $OUT/t/gpu_tests.log | head -40
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t
