#!/usr/bin/env bash
# Thirty-third session, second call, carry [".gpu/z"] = branch `wip/swap144`'s build (written last
# session on that branch, copied here to run it): the FP8 / INT8 /
# bf16 kernels' kMedium (prefill:0, otherwise a 128 x 128 sweep option) there is a swapped 128 x 144
# tile. The padding model (bench/NOTES.md, next step 9) says 144 input rows should beat 128-row
# tiles at ~110-144 and ~230-288 mean rows per expert (DeepSeek-V3 at 8192 tokens: 256 rows, item
# 5's nearly empty third tiles). Its tests first (every tile against the CPU), then prefill:0
# against the plan, GEMMs apart, two rounds in both orders.
set -u
d=.gpu/z; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
o=$OUT/m; mkdir -p $o
start=$SECONDS
timeout 150 $d/qmoe_cuda_tests --gtest_filter='PrefillKernels.EveryTileMatchesTheCpuBackend:PrefillKernels.WideTile*' > $o/tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -E "^\[  (PASSED|FAILED)|Failure" -A3 $o/tests.log | head -12
B="$d/qmoe bench --rotations 2 --replays 5 --split-gemms"
for r in 1 2; do
  paths=auto,prefill:0; [[ $r == 2 ]] && paths=prefill:0,auto
  run() {  # name timeout args... (the call must end by ~560 s)
    local name=$1 t=$2; shift 2
    (( t = t < 540 - SECONDS ? t : 540 - SECONDS )); (( t > 5 )) || { echo "$name r$r skipped"; return; }
    timeout $t $B --gemm-paths $paths "$@" > $o/${name}_r$r.txt 2>&1; echo "$name r$r rc $? ($((SECONDS - start)) s)"
  }
  run ds 120 --models deepseek-v3 --schemes fp8_channel,int8,bf16 --tokens 3584,4096,7680,8192,8704
  run qwen 40 --models qwen3-30b-a3b --schemes fp8_channel,bf16 --tokens 1792,2048,3840,4096
  run mixtral 40 --models mixtral-8x7b --schemes fp8_channel,bf16 --tokens 448,512,960,1024
  run kimi 60 --models kimi-k2-tp8 --schemes bf16 --tokens 5376,6144,11520,12288
done
tar czf $OUT/m.tgz -C $OUT m && rm -rf $o
