#!/usr/bin/env bash
# Twentieth session, fourth device call, binary of 60a8e83 (carry [".gpu/s20b"]): status run of the
# table-B shapes (Kimi-K2 and DeepSeek-V3 at TP8, gpt-oss-120b) at 1-2048 tokens with torch's baselines.
set -u
B=.gpu/s20b
for f in $B/*.gz; do gunzip -f $f; done; chmod +x $B/qmoe $B/qmoe_cuda_tests
start=$SECONDS
for m in kimi-k2-tp8 deepseek-v3-tp8 gpt-oss-120b; do
  (( SECONDS - start > 480 )) && { echo "skip $m"; continue; }
  r=$OUT/status_b/$m; mkdir -p $r
  timeout $((560 - (SECONDS - start))) bash tools/gpu_bench.sh $B $r --models $m \
    --schemes w4a16_g32,mxfp4,nvfp4a16,fp8_channel,bf16 --tokens 1,8,32,64,128,512,2048 \
    --rotations 2 --replays 5 > $r/run.log 2>&1
  echo "$m done at $((SECONDS - start)) s"
done
tar -C $OUT -czf $OUT/s20_run4.tgz status_b && rm -rf $OUT/status_b
