#!/usr/bin/env bash
# Fifth call (carry [".gpu/y", ".gpu/n"]: main at the thirty-second session's end, and `.gpu/n` =
# the register kernel's 192-row tile planned): MXFP4's upper bound for that tile (forced 192 /
# 256 / auto on .gpu/y at 176-200 mean rows per expert, two rounds), then .gpu/y (a) against .gpu/n (b)
# on the automatic path, two alternated rounds, then the whole GPU suite on .gpu/n (no memcheck).
set -u
tools/gpu_unpack.sh .gpu/y .gpu/n
start=$SECONDS
o=$OUT/c; mkdir -p $o/mx
mx() {  # round paths model tokens
  LD_LIBRARY_PATH=$PWD/.gpu/y timeout 40 .gpu/y/qmoe bench --rotations 2 --replays 5 --split-gemms --schemes mxfp4 \
    --gemm-paths $2 --models $3 --tokens $4 > $o/mx/$3_r$1.txt 2>&1
  echo "mx $3 r$1 rc $? ($((SECONDS - start)) s)"
}
for r in 1 2; do
  paths=prefill:1,prefill:6; [[ $r == 2 ]] && paths=prefill:6,prefill:1
  mx $r $paths deepseek-v3 5632,5888,6144,6400
  mx $r $paths qwen3-30b-a3b 2816,2944,3072,3200
  mx $r $paths mixtral-8x7b 704,736,768,800
done
O="--rotations 2 --replays 5 --split-gemms --schemes w4a16_g128,mxfp4,nvfp4a16"
ab() {  # model tokens timeout
  timeout $3 tools/gpu_ab.sh .gpu/y .gpu/n $o/ab_$1 2 --models $1 --tokens $2 $O > /dev/null 2>&1
  echo "ab $1 rc $? ($((SECONDS - start)) s)"; cat $o/ab_$1/summary.txt
}
ab deepseek-v3 3840,4096,4608,5120,5632 90
ab qwen3-30b-a3b 1920,2048,2304,2560,2816 30
ab mixtral-8x7b 480,512,576,640,704 30
mkdir -p $o/t
QMOE_GPU_TEST_PARTS="tests" timeout $((570 - SECONDS)) tools/gpu_test.sh .gpu/n $o/t > $o/t/summary.txt 2>&1
echo "gpu_test rc $? ($((SECONDS - start)) s)"
grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/t/gpu_tests.log
grep -h "Failure" -A8 $o/t/gpu_tests.log | head -30
tar czf $OUT/c.tgz -C $OUT c && rm -rf $o
