#!/usr/bin/env bash
# Twentieth session, sixth device call, binary of 8b5b0fb (carry [".gpu/s20d"]): W4A8-FP8 held as
# vLLM's FP8 products. First the bench (W4A8-FP8 and FP8 channel on the same shapes, torch's
# baselines), then the whole GPU suite with the sanitizers (cut off by the call's limit if need be).
set -u
start=$SECONDS
B=.gpu/s20d; for f in $B/*.gz; do gunzip -f $f; done; chmod +x $B/qmoe $B/qmoe_cuda_tests
for m in qwen3-30b-a3b mixtral-8x7b deepseek-v3; do
  (( SECONDS - start > 200 )) && { echo "skip $m"; continue; }
  r=$OUT/w4a8/$m; mkdir -p $r
  timeout 100 bash tools/gpu_bench.sh $B $r --models $m --schemes w4a8_fp8,fp8_channel \
    --tokens 1,8,64,512,4096,8192 --rotations 2 --replays 5 > $r/run.log 2>&1
  echo "$m done at $((SECONDS - start)) s"; grep -E "w4a8_fp8|fp8_channel" $r/qmoe_bench.log | awk '{print $1,$2,$4,$6,$9}'
done
t=$OUT/suite; mkdir -p $t
timeout $((575 - (SECONDS - start))) bash tools/gpu_test.sh $B $t > $t/run.log 2>&1; echo "gpu_test exit $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $t/gpu_tests.log | head; tail -n 2 $t/memcheck.log $t/racecheck.log 2>/dev/null
echo "done at $((SECONDS - start)) s"
tar -C $OUT -czf $OUT/s20_run6.tgz w4a8 suite && rm -rf $OUT/w4a8 $t
