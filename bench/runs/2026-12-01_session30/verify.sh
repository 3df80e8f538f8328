#!/usr/bin/env bash
# One call: main `afbf7e2` (.gpu/n, full): W4A16 g>=64 / channel on the register kernel, the register
# kernel's tile switches per format (118/119/121 rows per expert), INT4's few-experts switch at 21.
# 1. The GPU suite's tests part (tools/gpu_test.sh, QMOE_GPU_TEST_PARTS=tests).
# 2. A/B against main `039e807` (.gpu/m, CUTLASS's W4A16 and the old tile switch): W4A16 g128 / asym
#    g128, MXFP4, NVFP4 A16 on three shapes at 1024-8192 tokens, two rounds.
# 3. The switches on the new build: auto vs decode vs prefill for W4A16 g128 around 21 rows per expert
#    on Mixtral-8x7B; auto vs the forced tiles around 118 rows on DeepSeek-V3.
set -u
tools/gpu_unpack.sh .gpu/n .gpu/m
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/.gpu/n
start=$SECONDS
mkdir -p $OUT/suite
QMOE_GPU_TEST_PARTS=tests timeout 330 tools/gpu_test.sh .gpu/n $OUT/suite > $OUT/suite/tail.txt 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|tests ran" $OUT/suite/gpu_tests.log | tail -4
timeout 150 tools/gpu_ab.sh .gpu/m .gpu/n $OUT/ab 2 \
  --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --schemes w4a16_g128,w4a16_asym_g128,mxfp4,nvfp4a16 \
  --tokens 1024,2048,4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab/summary.txt
timeout 30 .gpu/n/qmoe bench --models mixtral-8x7b --schemes w4a16_g128 --tokens 72,80,84,88,96,512 \
  --gemm-paths auto,decode,prefill --rotations 2 --replays 5 > $OUT/switch.txt 2>&1
timeout 40 .gpu/n/qmoe bench --models deepseek-v3 --schemes w4a16_g128 --tokens 3712,3776,3840,4096 \
  --gemm-paths auto,prefill:2,prefill:1 --rotations 2 --replays 5 >> $OUT/switch.txt 2>&1
echo "switch ($((SECONDS - start)) s)"; grep -h "w4a16" $OUT/switch.txt | cut -c1-100
cd $OUT && tar czf ab.tgz ab && rm -rf ab && xz suite/*.log
