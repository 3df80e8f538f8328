#!/usr/bin/env bash
# Nsight Compute's full set on the 4-bit register kernel's two launches (GEMM1 with the fused
# activation, GEMM2 writing the terms) in one forward: DeepSeek-V3 TP8 NVFP4 at 2048 tokens (GEMM2's
# k is 256: 4 k-tiles per tile), Mixtral NVFP4 at 4096, Qwen3-30B-A3B NVFP4 at 4096. Details and the
# per-instruction source page (stall samples) for each. main's build in .gpu/n.
set -u
d=.gpu/n; xz -d $d/*.xz; chmod +x $d/qmoe
export LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
for m in deepseek-v3-tp8:2048 mixtral-8x7b:4096 qwen3-30b-a3b:4096; do
  model=${m%:*}; tokens=${m#*:}
  timeout 150 ncu --clock-control none --set full --import-source no -k regex:fp4_grouped_gemm --launch-count 2 \
    -o $OUT/$model $d/qmoe bench --models $model --schemes nvfp4a16 --tokens $tokens --rotations 1 --replays 1 \
    > $OUT/$model.log 2>&1; echo "$model rc $? ($((SECONDS - start)) s)"
  ncu -i $OUT/$model.ncu-rep --page details > $OUT/$model.details.txt 2>&1
  ncu -i $OUT/$model.ncu-rep --page source --csv --print-source sass > $OUT/$model.source.csv 2>&1 || echo "source page failed"
done
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Registers Per|Issue Slots Busy|No Eligible" $OUT/deepseek-v3-tp8.details.txt | head -30
cd $OUT && tar czf profile.tgz *.details.txt *.source.csv *.log && rm -f *.source.csv *.log *.details.txt
