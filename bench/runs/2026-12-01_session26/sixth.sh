#!/usr/bin/env bash
# Sixth call (twenty-sixth session): branch wip/wide-tile rebased on main (the per-GEMM tiles), its
# qmoe in .gpu/wt (xz; libfmt.so.9 beside it). The 64 x 256 pingpong tile (prefill:6) for GEMM1
# alone, GEMM2 on its planned tile: it lost as the tile of both GEMMs (second call), but GEMM1 has
# the long reduction where padded rows cost most (Kimi-K2 TP8 at 8192: ~170 rows per expert, a
# 128-row tile pads ~33%).
set -u
tools/gpu_unpack.sh .gpu/wt
start=$SECONDS
export LD_LIBRARY_PATH=$PWD/.gpu/wt
timeout 60 .gpu/wt/qmoe bench --models kimi-k2-tp8,deepseek-v3-tp8 --schemes bf16 --tokens 4096,8192 \
  --gemm-paths auto,prefill:6/1,prefill:6/3 --rotations 2 --replays 5 > $OUT/wide_gemm1_bf16.txt 2>&1
echo "bf16 rc $? ($((SECONDS - start)) s)"; grep -E " bf16 " $OUT/wide_gemm1_bf16.txt
timeout 120 .gpu/wt/qmoe bench --models qwen3-30b-a3b,kimi-k2-tp8,deepseek-v3-tp8 --schemes bf16,int8,fp8_channel --tokens 4096,8192 \
  --gemm-paths auto,prefill:6/3 --rotations 2 --replays 5 > $OUT/wide_gemm1.txt 2>&1
echo "all rc $? ($((SECONDS - start)) s)"; grep -E "auto|prefill" $OUT/wide_gemm1.txt
timeout 100 .gpu/wt/qmoe bench --models deepseek-v3 --schemes fp8_channel --tokens 4096,8192 \
  --gemm-paths auto,prefill:6/3 --rotations 2 --replays 5 > $OUT/wide_gemm1_dsv3.txt 2>&1
echo "dsv3 rc $? ($((SECONDS - start)) s)"; grep -E "auto|prefill" $OUT/wide_gemm1_dsv3.txt
