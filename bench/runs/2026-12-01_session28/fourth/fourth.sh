#!/usr/bin/env bash
# Session 28, device call 5: the per-row W4A8-INT8 layout's decode/prefill crossover (call 2's
# switch.txt: with g128's switch, Mixtral at 24-32 tokens and DeepSeek-V3 at 32-64 tokens ran the
# prefill kernel while the decode kernel was 4-32% faster). .gpu/c (branch wip/i2f-mix, QMOE_I2F
# unset: main `e984978`'s code). Decode vs prefill, GEMM us, two rounds.
set -u
tools/gpu_unpack.sh .gpu/c
start=$SECONDS
for round in 1 2; do
  for job in "mixtral-8x7b 32,40,48,56,64" "deepseek-v3 128,160,192,256" "qwen3-30b-a3b 16,32,48,64,96" \
             "deepseek-v3-tp8 32,64,96,128,192"; do
    set -- $job
    LD_LIBRARY_PATH=$PWD/.gpu/c timeout 60 .gpu/c/qmoe bench --models $1 --schemes w4a8_int8_channel --tokens $2 \
      --gemm-paths decode,prefill --rotations 2 --replays 5 >> $OUT/crossover_r$round.txt 2>&1
  done
  echo "round $round ($((SECONDS - start)) s)"
done
grep -h "w4a8" $OUT/crossover_r1.txt $OUT/crossover_r2.txt | cut -c1-100
