#!/usr/bin/env bash
# Status run on main 6887bed (.gpu/m): tools/gpu_bench.sh per model shape at the issue's token
# counts 1-8192 with torch's grouped baselines in the same call; eight schemes on Mixtral, Qwen3 and
# DeepSeek-V3, five on the TP8 shapes and gpt-oss-120b (the twentieth session's sets). A shape is
# skipped when the call's time runs short (the output says which).
set -u
d=.gpu/m; tools/gpu_unpack.sh $d
start=$SECONDS
for spec in qwen3-30b-a3b:8 mixtral-8x7b:8 deepseek-v3-tp8:5 kimi-k2-tp8:5 gpt-oss-120b:5 deepseek-v3:8; do
  IFS=: read m n <<< "$spec"
  left=$((470 - (SECONDS - start)))
  (( left < 40 )) && { echo "skip $m ($((SECONDS - start)) s)"; continue; }
  if [[ $n == 8 ]]; then s=w4a16_g128,mxfp4,nvfp4a16,fp8_channel,fp8_block,w4a8_fp8,int8,bf16
  else s=w4a16_g32,mxfp4,nvfp4a16,fp8_channel,bf16; fi
  r=$OUT/status/$m; mkdir -p $r
  QMOE_COMMIT=6887bed timeout $left tools/gpu_bench.sh $d $r --models $m --schemes $s \
    --tokens 1,8,32,64,128,512,2048,8192 --rotations 2 --replays 5 > $r/run.log 2>&1
  echo "$m rc $? ($((SECONDS - start)) s)"
  grep -h "| auto |" $r/results.md 2>/dev/null | awk -F'|' '{gsub(/ /,"",$14); v=$14; sub(/x.*/,"",v); if (v+0 < 1.0) print "below torch:", $2, $3, $5, $14}'
done
cd $OUT && tar czf status.tgz status && rm -rf status
