#!/usr/bin/env bash
# For the next session (not run): the whole GPU suite (tools/gpu_test.sh) on main `039e807` (.gpu/m,
# full; the kernel code of the merged `wip/int8-planes` build that ran this session's tests, plus
# `6b3cd84`'s host helper that the suite ran, and the load-time checks of bad input (`a8954e8`..`039e807`), which
# the fixtures' GPU tests load through): the tests and memcheck (~410 s); racecheck in
# next_third.sh (~220 s; the whole suite no longer fits one 600 s call).
set -u
d=.gpu/m; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
mkdir -p $OUT/suite
QMOE_GPU_TEST_PARTS="tests memcheck" timeout 570 tools/gpu_test.sh $d $OUT/suite > $OUT/suite/tail.txt 2>&1
echo "suite rc $? ($((SECONDS - start)) s)"; tail -n 4 $OUT/suite/tail.txt; grep -hE "ERROR SUMMARY" $OUT/suite/*.log
cd $OUT && tar czf logs.tgz suite && rm -rf suite
