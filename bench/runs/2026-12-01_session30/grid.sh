#!/usr/bin/env bash
# One call, after tiles.sh: (a) the register kernel's 128- vs 256-row tiles (prefill:2 / prefill:1)
# between a mean of 112 and 128 rows per expert, where tiles.sh saw the switch; (b) under
# QMOE_INT4_REGS=1, decode vs prefill for W4A16 g128 (and g32, whose constants the register kernel's
# decode-to-prefill switch was measured on) around that switch (12-24 rows per expert; a count of
# >= 512 in each list so the prefill copy is allocated). Build: wip/int8-three `fa31fb2` (.gpu/3).
set -u
d=.gpu/3; tools/gpu_unpack.sh $d
export LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
timeout 60 $d/qmoe bench --models deepseek-v3 --schemes w4a16_asym_g128,mxfp4,nvfp4a16 --tokens 3584,3712,3840,3968,4096 \
  --gemm-paths prefill:2,prefill:1 --rotations 2 --replays 5 > $OUT/tiles_dsv3.txt 2>&1
echo "dsv3 rc $? ($((SECONDS - start)) s)"
timeout 60 $d/qmoe bench --models qwen3-30b-a3b --schemes w4a16_asym_g128,mxfp4,nvfp4a16 --tokens 1792,1856,1920,1984,2048 \
  --gemm-paths prefill:2,prefill:1 --rotations 2 --replays 5 > $OUT/tiles_qwen3.txt 2>&1
echo "qwen3 rc $? ($((SECONDS - start)) s)"
grep -h "prefill" $OUT/tiles_dsv3.txt $OUT/tiles_qwen3.txt | cut -c1-100
for job in "mixtral-8x7b 48,56,64,72,80,88,96,104,512" "qwen3-30b-a3b 160,192,224,256,288,320,512" \
           "deepseek-v3 320,384,448,512,576,640,704,1024"; do
  set -- $job
  QMOE_INT4_REGS=1 timeout 60 $d/qmoe bench --models $1 --schemes w4a16_g128,w4a16_g32 --tokens $2 \
    --gemm-paths decode,prefill --rotations 2 --replays 5 >> $OUT/switch.txt 2>&1
  echo "switch $1 rc $? ($((SECONDS - start)) s)"
done
grep -h "w4a16" $OUT/switch.txt | cut -c1-100
