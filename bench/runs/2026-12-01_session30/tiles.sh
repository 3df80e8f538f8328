#!/usr/bin/env bash
# One call, after first.sh and fourth.sh: the register kernel's prefill tile (128 input rows up to a
# mean of kMxfp4MaxRowsFor128 = 128 rows per expert, then 256) around that switch, forced either way
# (prefill:2 = 128-row tiles, prefill:1 = 256): fourth.sh saw DeepSeek-V3 W4A16 g128 at 4096 tokens
# (a mean of 128 rows per expert) 1.6x slower than at 2048 on the register kernel, and only 1.45x
# faster at 8192. With random routing about half the experts then get more than 128 rows and run a
# second, nearly empty 128-row tile. Also the GEMMs apart (--split-gemms) for W4A16 g128 on Mixtral
# under CUTLASS (unset) and the register kernel (QMOE_INT4_REGS=1), to see where the layer's gain
# comes from. Build: branch wip/int8-three `fa31fb2` (.gpu/3).
set -u
d=.gpu/3; tools/gpu_unpack.sh $d
export LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
for s in w4a16_asym_g128 mxfp4 nvfp4a16; do
  timeout 60 $d/qmoe bench --models deepseek-v3 --schemes $s --tokens 3072,3584,4096,4608,5120,6144 \
    --gemm-paths prefill:2,prefill:1 --rotations 2 --replays 5 >> $OUT/tiles_dsv3.txt 2>&1
  echo "$s rc $? ($((SECONDS - start)) s)"
done
timeout 40 $d/qmoe bench --models qwen3-30b-a3b --schemes w4a16_asym_g128,mxfp4 --tokens 1536,2048,2560,3072 \
  --gemm-paths prefill:2,prefill:1 --rotations 2 --replays 5 >> $OUT/tiles_qwen3.txt 2>&1
echo "qwen3 rc $? ($((SECONDS - start)) s)"
grep -h "prefill" $OUT/tiles_dsv3.txt $OUT/tiles_qwen3.txt | cut -c1-100
for v in 0 1; do
  QMOE_INT4_REGS=$v timeout 60 $d/qmoe bench --models mixtral-8x7b,qwen3-30b-a3b --schemes w4a16_g128 --tokens 4096,8192 \
    --split-gemms --rotations 2 --replays 5 > $OUT/split_$v.txt 2>&1
  echo "split $v rc $? ($((SECONDS - start)) s)"; grep -h "w4a16\|model" $OUT/split_$v.txt | cut -c1-140
done
