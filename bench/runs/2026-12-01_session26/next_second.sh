#!/usr/bin/env bash
# For the next session (not run): where the CUTLASS prefill kernels lose on many-expert layers.
# Nsight Compute's details (full set, clocks not controlled) of the two grouped GEMM launches of one
# forward, on main's build in .gpu/n (as next_first.sh): DeepSeek-V3 FP8 channel at 8192 tokens
# (~940-980 TFLOP/s against the 1250 target) and Kimi-K2 TP8 bf16 at 8192 (0.93x torch). Compare
# each GEMM's tensor pipe activity, issue slots, L2 / DRAM throughput and stall reasons; the
# per-group tensor-map updates of CUTLASS's ptr-array schedule show as producer-warp stalls.
set -u
d=.gpu/n; tools/gpu_unpack.sh $d
export LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
for job in "deepseek-v3 fp8_channel" "kimi-k2-tp8 bf16"; do
  set -- $job
  name=$1_$2
  timeout 200 ncu --clock-control none --set full --import-source no -k regex:device_kernel --launch-count 2 \
    -o $OUT/$name $d/qmoe bench --models $1 --schemes $2 --tokens 8192 --rotations 1 --replays 1 \
    > $OUT/$name.log 2>&1; echo "$name rc $? ($((SECONDS - start)) s)"
  ncu -i $OUT/$name.ncu-rep --page details > $OUT/$name.details.txt 2>&1
  grep -E "device_kernel|Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy" \
    $OUT/$name.details.txt | cut -c1-160 | head -14
done
cd $OUT && tar czf profile.tgz *.details.txt *.log && rm -f *.ncu-rep *.log *.details.txt
