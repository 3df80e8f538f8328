#!/usr/bin/env bash
# On main with the ring and swigluoai commits (.gpu/m, 6887bed):
# 1. Mixtral MXFP4 sustained: `qmoe bench --replays 400` at 4096 and 8192 tokens with nvidia-smi
#    sampling clocks and power every 20 ms; is the median per-FLOP slower at 8192 because the SM
#    clock falls under a longer load (a power cap)?
# 2. The bench against torch's grouped GEMMs at 2048 / 4096 / 8192 tokens on the four shapes.
set -u
d=.gpu/m; tools/gpu_unpack.sh $d
export LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
for tokens in 4096 8192; do
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader -lms 20 > $OUT/sustained_$tokens.csv 2>&1 &
  mon=$!
  timeout 90 $d/qmoe bench --models mixtral-8x7b --schemes mxfp4 --tokens $tokens --rotations 2 --replays 400 \
    > $OUT/sustained_$tokens.txt 2>&1
  kill $mon; wait $mon 2>/dev/null
  echo "sustained $tokens ($((SECONDS - start)) s)"; grep -h "mixtral" $OUT/sustained_$tokens.txt | head -3
  awk -F', ' '$2+0 > 400 {n++; s += $2; p += $3; if ($3+0 > pm) pm = $3+0} END {printf "busy samples %d, mean SM MHz %.0f, mean W %.0f, max W %.0f\n", n, s/n, p/n, pm}' $OUT/sustained_$tokens.csv
  awk -F', ' '{r[$5]++} END {for (k in r) print "reasons", k, r[k]}' $OUT/sustained_$tokens.csv
done
o=$OUT/torch; mkdir -p $o
QMOE_COMMIT=6887bed timeout 150 tools/gpu_bench.sh $d $o \
  --models deepseek-v3-tp8,qwen3-30b-a3b,mixtral-8x7b,gpt-oss-120b --schemes nvfp4a16,mxfp4,w4a16_g32 \
  --tokens 2048,4096,8192 --rotations 2 --replays 5 > $o/tail.txt 2>&1
echo "torch rc $? ($((SECONDS - start)) s)"; grep -h "| auto |\|^| model" $o/results.md
cd $OUT && tar czf logs.tgz torch sustained_* && rm -rf torch sustained_*
