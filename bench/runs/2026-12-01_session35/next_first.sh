#!/usr/bin/env bash
# For the next session (not run), carry [".gpu/m"]: main at the thirty-fifth session's end (rebuild
# and repack .gpu/m if .gpu/ did not survive). The 320-row tile is planned at 244-312 and 504-624
# rows per expert (NVFP4 528-592); its second range was swept forced, never run on the automatic
# path against torch. Calls:
#   next_first.sh auto    the automatic path with torch's grouped GEMMs where the second range is
#                         planned: Qwen3-30B-A3B at 8192 / 9216 tokens, Mixtral-8x7B at 2048 / 2304,
#                         DeepSeek-V3 at 16384 (uniform routing, 4-bit formats; ~250 s)
#   next_first.sh third   the 320-row tile forced (prefill:3) against the plan (256) at 704-960 rows
#                         per expert (three 320-row tiles where 256-row ones take four): Qwen3-30B-A3B
#                         at 11264-15360 tokens, Mixtral-8x7B at 2816-3840, two rounds (~200 s)
set -u
d=.gpu/${BIN:-m}; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
o=$OUT/n; mkdir -p $o
start=$SECONDS
part=${1:-}
O="--rotations 2 --replays 5"
S="--schemes w4a16_g128,mxfp4,nvfp4a16"
case $part in
  auto)
    # (a short warm-up first: the thirty-fifth session's first row, from an idle GPU, read ~8% slow)
    timeout 30 $d/qmoe bench --models qwen3-30b-a3b --schemes w4a16_g128 --tokens 4096 $O > /dev/null 2>&1
    for m in "qwen3-30b-a3b 8192,9216" "mixtral-8x7b 2048,2304" "deepseek-v3 16384"; do
      set -- $m; mkdir -p $o/$1
      QMOE_COMMIT=session35-end timeout $((560 - SECONDS)) tools/gpu_bench.sh $d $o/$1 $O --models $1 $S --tokens $2 > /dev/null 2>&1
      echo "$1 rc $? ($((SECONDS - start)) s)"; grep -E "^\| $1" $o/$1/results.md
    done ;;
  third)
    timeout $((300 - SECONDS)) tools/gpu_sweep.sh $d $o/qwen3 2 auto prefill:3 --models qwen3-30b-a3b $S \
      --tokens 11264,11776,12288,13312,14336,15360 $O > /dev/null 2>&1
    echo "qwen3 rc $? ($((SECONDS - start)) s)"; cat $o/qwen3/summary.txt
    timeout $((560 - SECONDS)) tools/gpu_sweep.sh $d $o/mixtral 2 auto prefill:3 --models mixtral-8x7b $S \
      --tokens 2816,2944,3072,3328,3584,3840 $O > /dev/null 2>&1
    echo "mixtral rc $? ($((SECONDS - start)) s)"; cat $o/mixtral/summary.txt ;;
  *) echo "next_first.sh: auto or third"; exit 2 ;;
esac
tar czf $OUT/n_$part.tgz -C $OUT n && rm -rf $o
