#!/usr/bin/env bash
# 29th session, last call: branch wip/int8-bounds (.gpu/b): how far the W4A8-INT8 g128 prefill
# kernel's parts bound it (the time of each part alone, results wrong). Same binary, alternated:
# QMOE_INT8_BOUND unset (as main) vs 1 (the sums promoted only at the last k-tile: MMAs and code
# conversion), unset vs 2 (no MMAs: conversion and promotions). If 1 and 2 each run well under the
# whole, the consumers' MMAs and promotions are serialized per warp and more consumer warps (three
# warpgroups on 96-row tiles) can overlap them.
set -u
d=.gpu/b; tools/gpu_unpack.sh $d
start=$SECONDS
for bound in 1 2; do
  AB_ENV_B=QMOE_INT8_BOUND=$bound timeout 90 tools/gpu_ab.sh $d $d $OUT/ab_$bound 2 \
    --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --schemes w4a8_int8 --tokens 4096,8192 \
    --rotations 2 --replays 5 > /dev/null 2>&1
  echo "bound=$bound rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_$bound/summary.txt
done
cd $OUT && tar czf ab.tgz ab_1 ab_2 && rm -rf ab_1 ab_2
