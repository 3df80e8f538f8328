#!/usr/bin/env bash
# For the next session (not run): where the CUTLASS prefill kernels lose on many-expert layers.
# Nsight Compute's details (full set, clocks not controlled) of the two grouped GEMM launches of one
# forward, on main's build in .gpu/n (as next_first.sh): DeepSeek-V3 FP8 channel at 8192 tokens
# (~940-980 TFLOP/s against the 1250 target) and Kimi-K2 TP8 bf16 at 8192 (0.93x torch). Compare
# each GEMM's tensor pipe activity, issue slots, L2 / DRAM throughput and stall reasons; the
# per-group tensor-map updates of CUTLASS's ptr-array schedule show as producer-warp stalls.
# Then the 4-bit prefill kernels' tiles per GEMM on Mixtral and Qwen3-30B-A3B (below).
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
# The 4-bit prefill kernels' tiles per GEMM (prefill:<tile1>/<tile2>) on Mixtral at 4096 / 8192:
# W4A16 g128 on the mixed-input kernel (0: 128 x 192, 1: 128 x 256, 2: 128 x 128; target 650
# TFLOP/s, 626-632 at 4096), MXFP4 and NVFP4 on the register kernel (2: 128, 1: 256 input rows).
LD_LIBRARY_PATH=$PWD/$d timeout 150 $d/qmoe bench --models mixtral-8x7b,qwen3-30b-a3b --schemes w4a16_g128 --tokens 4096,8192 \
  --gemm-paths auto,prefill:0,prefill:0/1,prefill:1/0,prefill:2/1,prefill:1/2 --rotations 2 --replays 5 > $OUT/w4_tiles.log 2>&1
echo "w4 tiles rc $? ($((SECONDS - start)) s)"; grep -E "prefill|auto" $OUT/w4_tiles.log
LD_LIBRARY_PATH=$PWD/$d timeout 120 $d/qmoe bench --models mixtral-8x7b,qwen3-30b-a3b --schemes mxfp4,nvfp4a16 --tokens 4096,8192 \
  --gemm-paths auto,prefill:2/1,prefill:1/2,prefill:2 --rotations 2 --replays 5 > $OUT/fp4_tiles.log 2>&1
echo "fp4 tiles rc $? ($((SECONDS - start)) s)"; grep -E "prefill|auto" $OUT/fp4_tiles.log
cd $OUT && tar czf profile.tgz *.details.txt *.log && rm -f *.ncu-rep *.log *.details.txt
