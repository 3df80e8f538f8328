#!/usr/bin/env bash
# The automatic path with the moved 4-bit switches (planner only; device code as final.sh tested)
# and torch's grouped GEMMs on the same routed problems, on the shapes whose rows moved.
B=.gpu/s21e
for f in $B/*.gz; do gunzip -f $f; done; chmod +x $B/qmoe
o=$OUT/auto; mkdir -p $o/tp8 $o/qwen3
QMOE_COMMIT=s21e tools/gpu_bench.sh $B $o/tp8 --models deepseek-v3-tp8 --schemes nvfp4a16,mxfp4,w4a16_g32 \
  --tokens 512,768,1024,2048 --rotations 2 --replays 5 > /dev/null 2>&1
QMOE_COMMIT=s21e tools/gpu_bench.sh $B $o/qwen3 --models qwen3-30b-a3b --schemes nvfp4a16,mxfp4,w4a16_g32 \
  --tokens 256,320,512 --rotations 2 --replays 5 > /dev/null 2>&1
grep -h "| auto |" $o/tp8/results.md $o/qwen3/results.md
