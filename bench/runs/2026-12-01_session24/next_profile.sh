#!/usr/bin/env bash
# For the next session (not run yet): why Mixtral's 4-bit layers run fewer TFLOP/s at 8192 tokens
# than at 4096 (MXFP4 661 vs 613-617, NVFP4 598-652 vs 601-614 in the twenty-fourth session).
# Nsight Compute's details (full set, clocks not controlled) of the register kernel's two launches
# of one Mixtral MXFP4 forward at 4096 and at 8192 tokens, on main's build in .gpu/n: compare each
# GEMM's duration per FLOP, tensor pipe, L2 and DRAM throughput, and the stall reasons.
set -u
d=.gpu/n; tools/gpu_unpack.sh $d
export LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
for tokens in 4096 8192; do
  timeout 150 ncu --clock-control none --set full --import-source no -k regex:fp4_grouped_gemm --launch-count 2 \
    -o $OUT/mixtral_$tokens $d/qmoe bench --models mixtral-8x7b --schemes mxfp4 --tokens $tokens --rotations 1 --replays 1 \
    > $OUT/mixtral_$tokens.log 2>&1; echo "$tokens rc $? ($((SECONDS - start)) s)"
  ncu -i $OUT/mixtral_$tokens.ncu-rep --page details > $OUT/mixtral_$tokens.details.txt 2>&1
  grep -E "fp4_grouped|Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy" \
    $OUT/mixtral_$tokens.details.txt | head -14
done
cd $OUT && tar czf profile.tgz mixtral_*.details.txt mixtral_*.log && rm -f *.ncu-rep mixtral_*.log mixtral_*.details.txt
