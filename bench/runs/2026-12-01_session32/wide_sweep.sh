#!/usr/bin/env bash
# Third call (carry [".gpu/s"], the same build as swap.sh): where the swapped 128 x 192 tile (6,
# wide) beats the plan's, per GEMM (--split-gemms), at 128-213 mean rows per expert on every shape,
# FP8 channel, INT8 and bf16; two rounds, the plan first in one and the wide tile first in the other.
set -u
b=.gpu/s; tools/gpu_unpack.sh $b
export LD_LIBRARY_PATH=$PWD/$b
o=$OUT/w; mkdir -p $o
start=$SECONDS
B="$b/qmoe bench --rotations 2 --replays 5 --split-gemms"
for r in 1 2; do
  paths=auto,prefill:6; [[ $r == 2 ]] && paths=prefill:6,auto
  run() {  # name timeout args...
    local name=$1 t=$2; shift 2
    timeout $t $B --gemm-paths $paths "$@" > $o/${name}_r$r.txt 2>&1; echo "$name r$r rc $? ($((SECONDS - start)) s)"
  }
  run kimi 90 --models kimi-k2-tp8 --schemes bf16 --tokens 6144,7168,8192,9216,10240
  run dstp8 60 --models deepseek-v3-tp8 --schemes bf16 --tokens 4608,5120,5632,6144
  run ds 120 --models deepseek-v3 --schemes fp8_channel,int8,bf16 --tokens 4608,5120,5632,6144
  run qwen 60 --models qwen3-30b-a3b --schemes fp8_channel,int8,bf16 --tokens 2560,2816,3072
  run mixtral 60 --models mixtral-8x7b --schemes fp8_channel,int8,bf16 --tokens 512,640,704,768
done
tar czf $OUT/w.tgz -C $OUT w && rm -rf $o
