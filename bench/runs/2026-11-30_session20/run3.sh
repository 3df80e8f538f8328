#!/usr/bin/env bash
# Twentieth session, third device call, binary of 60a8e83 (carry [".gpu/s20b"]): the whole GPU suite
# with memcheck and racecheck, then crossover sweeps (decode / prefill / auto, layer and GEMM µs)
# for the kernels whose switch was measured before the later decode changes: bf16, W8A16, FP8 blocks.
set -u
B=.gpu/s20b
for f in $B/*.gz; do gunzip -f $f; done; chmod +x $B/qmoe $B/qmoe_cuda_tests
start=$SECONDS
t=$OUT/suite; mkdir -p $t
timeout 420 bash tools/gpu_test.sh $B $t > $t/run.log 2>&1; echo "gpu_test exit $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $t/gpu_tests.log | head; tail -n 2 $t/memcheck.log $t/racecheck.log
echo "suite done at $((SECONDS - start)) s"
export LD_LIBRARY_PATH=$PWD/$B
s=$OUT/sweep; mkdir -p $s
run() {  # name models schemes tokens
  (( SECONDS - start > 540 )) && { echo "skip $1"; return; }
  timeout 60 $B/qmoe bench --models $2 --schemes $3 --tokens $4 --gemm-paths decode,prefill,auto --rotations 2 --replays 5 > $s/$1.log 2>&1
}
run bf16 qwen3-30b-a3b,mixtral-8x7b bf16 8,12,16,24,32
run bf16_tp8 deepseek-v3-tp8,kimi-k2-tp8 bf16 8,12,16,24,32
run fp8_block qwen3-30b-a3b,mixtral-8x7b,deepseek-v3 fp8_block 1,2,3,4
run w8a16_qwen3 qwen3-30b-a3b w8a16 128,192,256,352,512
run w8a16_mixtral mixtral-8x7b w8a16 32,48,64,88,128
echo "sweeps done at $((SECONDS - start)) s"
tar -C $OUT -czf $OUT/s20_run3.tgz suite sweep && rm -rf $t $s
