#!/usr/bin/env bash
# One call after sanitize.sh (the time left): verify.sh measured auto first and found it faster than
# both forced tiles at some counts; here the forced tiles first and in reverse order (256-row tiles,
# then 128, then auto) on DeepSeek-V3 around the new switch, main `afbf7e2` (.gpu/n).
set -u
tools/gpu_unpack.sh .gpu/n
export LD_LIBRARY_PATH=$PWD/.gpu/n
timeout 100 .gpu/n/qmoe bench --models deepseek-v3 --schemes w4a16_g128,mxfp4 --tokens 3712,3840,3968 \
  --gemm-paths prefill:1,prefill:2,auto --rotations 2 --replays 5 > $OUT/order.txt 2>&1
echo "rc $?"; grep -h "prefill\|auto" $OUT/order.txt | cut -c1-100
