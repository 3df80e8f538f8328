#!/usr/bin/env bash
# Main e922871 (.gpu/n) against the session's final build (.gpu/fin) on W4A16 g128, two alternated
# rounds, token counts across the mid range (Mixtral 16-1024 rows per expert, Qwen3-30B-A3B 4-256,
# DeepSeek-V3 2-128); then racecheck of the final build.
set -u
tools/gpu_unpack.sh .gpu/n .gpu/fin
start=$SECONDS
timeout 300 tools/gpu_ab.sh .gpu/n .gpu/fin $OUT/ab 2 --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --schemes w4a16_g128 \
  --tokens 64,128,256,512,1024,4096 --rotations 2 --replays 5 | tail -25
echo "ab ($((SECONDS - start)) s)"
mkdir -p $OUT/rc
QMOE_GPU_TEST_PARTS=racecheck timeout $((540 - SECONDS + start)) tools/gpu_test.sh .gpu/fin $OUT/rc > $OUT/rc/summary.txt 2>&1
echo "racecheck rc $? ($((SECONDS - start)) s)"; tail -3 $OUT/rc/racecheck.log
tar czf $OUT/all.tgz -C $OUT ab rc && rm -rf $OUT/ab $OUT/rc
