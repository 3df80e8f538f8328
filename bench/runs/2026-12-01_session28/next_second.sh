#!/usr/bin/env bash
# For the next session (not run): branch wip/int8-planes (`4eb4877` on main `e5ba808`, built into
# .gpu/p, full): the
# int8 register kernel's codes in two planes of 16 bytes per thread, so that each warp's code load
# reads 512 contiguous bytes (ncu, 28th session: 35% of its shared-load wavefronts were bank
# conflicts, 8448 spill requests). Against main (.gpu/n, full; carry both: the tree is ~31 MB).
# 1. Its tests (the kernel's, prefill layers, the W4A8-INT8 random layer schemes); memcheck.
# 2. A/B main vs branch: W4A8-INT8 g128 and per row at 2048-8192 tokens, three shapes, two rounds.
# Land it if faster (its repack layout and loads only); else delete the branch.
set -u
tools/gpu_unpack.sh .gpu/p .gpu/n
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/p timeout 200 .gpu/p/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*:PrefillKernels.MatchTheCpuBackend:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8*' \
  > $OUT/p_tests.log 2>&1
echo "p tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/p_tests.log | head
LD_LIBRARY_PATH=$PWD/.gpu/p timeout 100 compute-sanitizer --tool memcheck .gpu/p/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*' > $OUT/p_memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/p_memcheck.log | tail -2
timeout 200 tools/gpu_ab.sh .gpu/n .gpu/p $OUT/ab_p 2 --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 \
  --schemes w4a8_int8,w4a8_int8_channel --tokens 2048,4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_p/summary.txt
cd $OUT && tar czf ab_p.tgz ab_p && rm -rf ab_p
