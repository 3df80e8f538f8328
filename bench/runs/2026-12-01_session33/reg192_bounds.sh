#!/usr/bin/env bash
# Fourth call (carry [".gpu/y"], as reg192.sh): where the register kernel's 192-row tile (prefill:6)
# stops paying. reg192.sh found it 0.85-0.97x the plan's 256-row tile at 128-160 mean rows per
# expert and 0.93-1.035x at 176; here the means 104-124 (the plan's 128-row tile up to ~118-121,
# then 256) and 164-172. GEMMs apart, two rounds in both orders.
set -u
d=.gpu/y; tools/gpu_unpack.sh $d
export LD_LIBRARY_PATH=$PWD/$d
o=$OUT/b; mkdir -p $o
start=$SECONDS
B="$d/qmoe bench --rotations 2 --replays 5 --split-gemms --schemes w4a16_g128,mxfp4,nvfp4a16"
for r in 1 2; do
  paths=auto,prefill:6; [[ $r == 2 ]] && paths=prefill:6,auto
  run() {  # name timeout args... (the call must end by ~560 s)
    local name=$1 t=$2; shift 2
    (( t = t < 540 - SECONDS ? t : 540 - SECONDS )); (( t > 5 )) || { echo "$name r$r skipped"; return; }
    timeout $t $B --gemm-paths $paths "$@" > $o/${name}_r$r.txt 2>&1; echo "$name r$r rc $? ($((SECONDS - start)) s)"
  }
  run ds 150 --models deepseek-v3 --tokens 3328,3584,3840,3968,5248,5376,5504
  run qwen 60 --models qwen3-30b-a3b --tokens 1664,1792,1920,1984,2624,2688,2752
  run mixtral 80 --models mixtral-8x7b --tokens 416,448,480,496,656,672,688
done
tar czf $OUT/b.tgz -C $OUT b && rm -rf $o
