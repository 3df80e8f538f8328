#!/usr/bin/env bash
# For the next session (not run): branch wip/int8-overlap (`6283aa3`: the int8 k-loop in two
# 64-row chunks, the first promoted while the second's MMAs run; ptxas: no spills, no injected
# waits) built into .gpu/o (full), against main `dbf6646` (.gpu/n; carry it with its
# qmoe_cuda_tests.xz moved out: two full builds exceed a call's 64 MiB).
# 1. Its kernel test and the W4A8-INT8 layer tests.
# 2. A/B main vs branch on W4A8-INT8 at 64-8192 tokens on three shapes, two alternated rounds.
# If it wins, land it (then the crossover re-check); if not, note it and delete the branch.
set -u
tools/gpu_unpack.sh .gpu/o .gpu/n
cp .gpu/o/libfmt.so.9 .gpu/n/ 2>/dev/null
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/o timeout 200 .gpu/o/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*:PrefillKernels.MatchTheCpuBackend:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8' > $OUT/o_tests.log 2>&1
echo "o tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/o_tests.log | head
timeout 250 tools/gpu_ab.sh .gpu/n .gpu/o $OUT/ab_o 2 --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 \
  --schemes w4a8_int8 --tokens 64,512,2048,4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_o/summary.txt
cd $OUT && tar czf ab_o.tgz ab_o && rm -rf ab_o
