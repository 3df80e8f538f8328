#!/usr/bin/env bash
# Third call (carry [".gpu/y"]: main at the thirty-second session's end, code of `f157fd4`): the 4-bit
# register kernel's 192-row tile (prefill:6, not planned) against the plan at 128-176 mean rows per
# expert, now that its fused-activation instances no longer spill (`f80ee9d`). Last session's one
# round (with spills) was 0.89-1.24x, no consistent win. GEMMs apart, two rounds in both orders.
set -u
d=.gpu/y; tools/gpu_unpack.sh $d
export LD_LIBRARY_PATH=$PWD/$d
o=$OUT/r; mkdir -p $o
start=$SECONDS
B="$d/qmoe bench --rotations 2 --replays 5 --split-gemms --schemes w4a16_g128,mxfp4,nvfp4a16"
for r in 1 2; do
  paths=auto,prefill:6; [[ $r == 2 ]] && paths=prefill:6,auto
  run() {  # name timeout args... (the call must end by ~560 s)
    local name=$1 t=$2; shift 2
    (( t = t < 540 - SECONDS ? t : 540 - SECONDS )); (( t > 5 )) || { echo "$name r$r skipped"; return; }
    timeout $t $B --gemm-paths $paths "$@" > $o/${name}_r$r.txt 2>&1; echo "$name r$r rc $? ($((SECONDS - start)) s)"
  }
  run ds 100 --models deepseek-v3 --tokens 4096,4608,5120,5632
  run qwen 40 --models qwen3-30b-a3b --tokens 2048,2304,2560,2816
  run mixtral 60 --models mixtral-8x7b --tokens 512,576,640,704
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $o
