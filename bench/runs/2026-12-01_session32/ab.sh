#!/usr/bin/env bash
# Fifth call (carry [".gpu/n", ".gpu/w"]): main `1e5a483` (a) against `wip/swapped` (b) on the
# automatic path, two alternated rounds, at mean rows per expert inside the wide tile's range and at
# its edges (128, 192: the same plan on both), then torch's grouped GEMMs on the rows it changes most.
set -u
tools/gpu_unpack.sh .gpu/n .gpu/w
start=$SECONDS
mkdir -p $OUT/ab
O="--rotations 2 --replays 5"
timeout 90 tools/gpu_ab.sh .gpu/n .gpu/w $OUT/ab/tp8 2 --models kimi-k2-tp8 --schemes bf16 --tokens 6144,7168,8192 $O > /dev/null 2>&1
echo "tp8 rc $? ($((SECONDS - start)) s)"
timeout 150 tools/gpu_ab.sh .gpu/n .gpu/w $OUT/ab/ds 2 --models deepseek-v3 --schemes fp8_channel,int8,bf16 --tokens 4608,5632,6144 $O > /dev/null 2>&1
echo "ds rc $? ($((SECONDS - start)) s)"
timeout 80 tools/gpu_ab.sh .gpu/n .gpu/w $OUT/ab/small 2 --models qwen3-30b-a3b,mixtral-8x7b,deepseek-v3-tp8 --schemes fp8_channel,bf16 --tokens 640,2560,2816,5120 $O > /dev/null 2>&1
echo "small rc $? ($((SECONDS - start)) s)"
for f in tp8 ds small; do echo "== $f"; cat $OUT/ab/$f/summary.txt; done
mkdir -p $OUT/ab/torch
QMOE_COMMIT=wip/swapped timeout 90 tools/gpu_bench.sh .gpu/w $OUT/ab/torch --models kimi-k2-tp8,deepseek-v3 --schemes bf16,fp8_channel --tokens 4608,8192 $O > /dev/null 2>&1
echo "torch rc $? ($((SECONDS - start)) s)"; tail -5 $OUT/ab/torch/torch.log
tar czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
