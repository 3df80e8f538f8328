#!/usr/bin/env bash
# On main `1a4e208` (batched epilogue fast paths, build in .gpu/e): the whole GPU suite with the
# sanitizers and torch's grouped baselines in the same call; then an A/B of e against .gpu/f (the
# same with groups of 8 outputs instead of 4 in the fused activation epilogue, except MXFP4).
set -u
for d in .gpu/e .gpu/f; do xz -d $d/*.xz 2>/dev/null; chmod +x $d/qmoe $d/qmoe_cuda_tests 2>/dev/null; done
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
tools/gpu_test.sh .gpu/e $OUT/suite > $OUT/suite_tail.txt 2>&1; echo "suite rc $? ($((SECONDS - start)) s)"
grep -hE "^\[  (PASSED|FAILED)|SUMMARY|FAILED" $OUT/suite/*.log | head
o=$OUT/torch; mkdir -p $o
QMOE_COMMIT=1a4e208 timeout 200 tools/gpu_bench.sh .gpu/e $o \
  --models deepseek-v3-tp8,kimi-k2-tp8,qwen3-30b-a3b,gpt-oss-120b,mixtral-8x7b --schemes nvfp4a16,mxfp4,w4a16_g32 \
  --tokens 2048,4096,8192 --rotations 2 --replays 5 > $o/tail.txt 2>&1
echo "torch rc $? ($((SECONDS - start)) s)"; grep -h "| auto |\|^| model" $o/results.md
timeout 150 tools/gpu_ab.sh .gpu/e .gpu/f $OUT/ab8 3 --models qwen3-30b-a3b,deepseek-v3-tp8,mixtral-8x7b --schemes nvfp4a16,w4a16_g32 \
  --tokens 4096 --rotations 2 --replays 5 > /dev/null 2>&1; echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab8/summary.txt
cd $OUT && tar czf logs.tgz suite torch ab8 suite_tail.txt
