#!/usr/bin/env bash
# wip/int8-mma after the second call (.gpu/i): the prefill tests that failed there (forced prefill on
# fewer tokens than the repack's crossover, now on layers sized for it), the W4A8-INT8 random
# layers and the fixtures; then the new decode/prefill switch against both paths forced.
set -u
tools/gpu_unpack.sh .gpu/i
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/i timeout 220 .gpu/i/qmoe_cuda_tests \
  --gtest_filter='PrefillKernels.*:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8:CudaFixtures.*:Int4Int8Mainloop.*' > $OUT/i3_tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED|Failure|exception" $OUT/i3_tests.log | head -20
for m in "mixtral-8x7b 16,20,24,32" "qwen3-30b-a3b 16,24,32" "deepseek-v3 16,32" "deepseek-v3-tp8 16,32,64"; do
  set -- $m
  LD_LIBRARY_PATH=$PWD/.gpu/i timeout 40 .gpu/i/qmoe bench --models $1 --schemes w4a8_int8 --tokens $2 \
    --gemm-paths auto,decode,prefill --rotations 2 --replays 5 >> $OUT/switch.txt 2>&1
done
echo "switch ($((SECONDS - start)) s)"; grep w4a8 $OUT/switch.txt
