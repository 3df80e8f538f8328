#!/usr/bin/env bash
# Nsight Compute's full set on the register kernel's two launches of one Qwen3-30B-A3B NVFP4 forward
# at 4096 tokens (GEMM1 with the fused activation, GEMM2 writing the terms) on main `b2d53bc`
# (.gpu/f), to compare with 2026-12-01_session23/profile/ (before the batched epilogues): details
# and the per-instruction source page (stall samples).
set -u
d=.gpu/f; xz -d $d/*.xz 2>/dev/null; chmod +x $d/qmoe
export LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
model=qwen3-30b-a3b
timeout 200 ncu --clock-control none --set full --import-source no -k regex:fp4_grouped_gemm --launch-count 2 \
  -o $OUT/$model $d/qmoe bench --models $model --schemes nvfp4a16 --tokens 4096 --rotations 1 --replays 1 \
  > $OUT/$model.log 2>&1; echo "$model rc $? ($((SECONDS - start)) s)"
ncu -i $OUT/$model.ncu-rep --page details > $OUT/$model.details.txt 2>&1
ncu -i $OUT/$model.ncu-rep --page source --csv --print-source sass > $OUT/$model.source.csv 2>&1 || echo "source page failed"
grep -E "fp4_grouped|Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible" $OUT/$model.details.txt | head -20
cd $OUT && xz -T4 $model.source.csv && tar czf profile.tgz $model.details.txt $model.log && rm -f $model.ncu-rep $model.log $model.details.txt
