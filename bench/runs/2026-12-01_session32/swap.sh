#!/usr/bin/env bash
# Second call (carry [".gpu/s"]; `wip/swapped` first build): the swapped FP8 / INT8 / BF16 tiles
# (4 tiny 128 x 32, 5 tiny48 128 x 48, 6 wide 128 x 192; weight rows x input rows). Their tests
# (every tile of every prefill kernel against the CPU, the edge cases), then forced tiles against the
# plan: FP8 channel at 4-64 rows per expert, FP8 and bf16 at 64-256, bf16 on the TP8 shapes.
set -u
b=.gpu/s; tools/gpu_unpack.sh $b
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$b
o=$OUT/r; mkdir -p $o
start=$SECONDS
timeout 240 $b/qmoe_cuda_tests --gtest_filter='PrefillKernels.*' > $o/tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"
grep -E "^\[  (PASSED|FAILED)|FAILED|Failure" $o/tests.log | head -20
B="$b/qmoe bench --rotations 2 --replays 5 --split-gemms"
run() {  # name timeout args...
  local name=$1 t=$2; shift 2
  timeout $t $B "$@" > $o/$name.txt 2>&1; echo "$name rc $? ($((SECONDS - start)) s)"
}
run fp8_qwen 60 --models qwen3-30b-a3b --schemes fp8_channel --tokens 64,128,256,512,1024 --gemm-paths auto,prefill:2,prefill:4,prefill:5
run fp8_mixtral 60 --models mixtral-8x7b --schemes fp8_channel --tokens 16,32,64,128,256 --gemm-paths auto,prefill:2,prefill:4,prefill:5
run fp8_ds 90 --models deepseek-v3 --schemes fp8_channel --tokens 128,256,512,1024,2048 --gemm-paths auto,prefill:2,prefill:4,prefill:5
run bf16_tp8 120 --models kimi-k2-tp8,deepseek-v3-tp8 --schemes bf16 --tokens 2048,4096,8192 --gemm-paths auto,prefill:6
run wide 120 --models deepseek-v3,qwen3-30b-a3b --schemes fp8_channel,bf16 --tokens 2048,4096 --gemm-paths auto,prefill:6,prefill:5
tar czf $OUT/r.tgz -C $OUT r && rm -rf $o
