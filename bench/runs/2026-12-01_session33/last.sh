#!/usr/bin/env bash
# Sixth call (carry [".gpu/f"]: `b563901`, the register kernel's 192-row tile planned, MXFP4's range
# ending at 180): qmoe against torch's bf16 grouped GEMM on the 4-bit rows the plan changed most,
# then racecheck with the register kernel's tests (QMOE_RACECHECK_KERNELS=1: its 192-row instances
# now hand the producer's registers to the consumers, which racecheck has not seen).
set -u
d=.gpu/f; tools/gpu_unpack.sh $d
start=$SECONDS
o=$OUT/l; mkdir -p $o/torch $o/rc
QMOE_COMMIT=b563901 timeout 90 tools/gpu_bench.sh $d $o/torch --rotations 2 --replays 5 --models mixtral-8x7b,qwen3-30b-a3b \
  --schemes w4a16_g128,mxfp4,nvfp4a16,bf16 --tokens 576,2304 > /dev/null 2>&1
echo "torch rc $? ($((SECONDS - start)) s)"; tail -12 $o/torch/torch.log
QMOE_GPU_TEST_PARTS=racecheck QMOE_RACECHECK_KERNELS=1 timeout $((430 - SECONDS)) tools/gpu_test.sh $d $o/rc > $o/rc/summary.txt 2>&1
echo "racecheck rc $? ($((SECONDS - start)) s)"; tail -4 $o/rc/racecheck.log; grep -c "Race reported" $o/rc/racecheck.log
tar czf $OUT/l.tgz -C $OUT l && rm -rf $o
