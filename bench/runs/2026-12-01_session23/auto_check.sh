#!/usr/bin/env bash
# The final build's automatic path (the new switches) at token counts where the switch moved:
# its layer µs should match the faster of decode / prefill in tileinfo/switches_t.txt.
d=.gpu/f; xz -d $d/*.xz; chmod +x $d/qmoe
LD_LIBRARY_PATH=$PWD/$d timeout 40 $d/qmoe bench --models deepseek-v3-tp8,qwen3-30b-a3b,gpt-oss-120b \
  --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 224,416,544 --rotations 2 --replays 5 > $OUT/auto.txt 2>&1
echo "rc $?"; cat $OUT/auto.txt
