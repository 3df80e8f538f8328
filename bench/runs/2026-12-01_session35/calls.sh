#!/usr/bin/env bash
# Device calls of the thirty-fifth session (after next_first.sh of the thirty-fourth).
#   wide  (carry [".gpu/k"], main 83b36d6) the 320-row tile (prefill:3) forced against the plan at
#         448-704 rows per expert: Qwen3-30B-A3B at 7168-11264 tokens, DeepSeek-V3 at 14336-18432,
#         4-bit formats, two rounds in both orders (where 256-row tiles take 2-3 per expert)
#   check (carry [".gpu/l"]: the 320-row tile planned in a second range, 496-624 rows per expert,
#         NVFP4 528-592; fp4_gemm.cu's TMA box height from one box_rows()) memcheck of the layer
#         test (now also at 560 rows per expert), the whole suite, then the plan against 256-row
#         tiles (prefill:1) on Mixtral-8x7B at 496-608 rows per expert (1984-2432 tokens)
set -u
d=.gpu/${BIN:-k}; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
o=$OUT/n; mkdir -p $o
start=$SECONDS
part=${1:-}
O="--rotations 2 --replays 5"
case $part in
  wide)
    timeout $((230 - SECONDS)) tools/gpu_sweep.sh $d $o/qwen3 2 auto prefill:3 --models qwen3-30b-a3b \
      --schemes w4a16_g128,mxfp4,nvfp4a16 --tokens 7168,7680,8192,8704,9216,9728,10240,11264 $O > /dev/null 2>&1
    echo "qwen3 rc $? ($((SECONDS - start)) s)"; cat $o/qwen3/summary.txt
    timeout $((400 - SECONDS)) tools/gpu_sweep.sh $d $o/dsv3 2 auto prefill:3 --models deepseek-v3 \
      --schemes w4a16_g128,mxfp4 --tokens 14336,16384,17408,18432 $O > /dev/null 2>&1
    echo "dsv3 rc $? ($((SECONDS - start)) s)"; cat $o/dsv3/summary.txt ;;
  check)
    f='PrefillKernels.RegisterKernel320*'
    timeout 90 compute-sanitizer --tool memcheck $d/qmoe_cuda_tests --gtest_filter="$f" > $o/memcheck.log 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|^\[       OK" $o/memcheck.log; tail -1 $o/memcheck.log
    QMOE_GPU_TEST_PARTS=tests timeout $((300 - SECONDS)) tools/gpu_test.sh $d $o/t > $o/t_summary.txt 2>&1
    echo "gpu_test rc $? ($((SECONDS - start)) s)"
    grep -hE "^\[  (PASSED|FAILED)|FAILED TEST|RegisterKernel320" $o/t/gpu_tests.log; grep -h "Failure" -A8 $o/t/gpu_tests.log | head -30
    timeout $((360 - SECONDS)) tools/gpu_sweep.sh $d $o/mixtral 2 auto prefill:1 --models mixtral-8x7b \
      --schemes w4a16_g128,mxfp4,nvfp4a16 --tokens 1920,1984,2048,2176,2304,2432,2560 $O > /dev/null 2>&1
    echo "mixtral rc $? ($((SECONDS - start)) s)"; cat $o/mixtral/summary.txt ;;
  *) echo "calls.sh: wide or check"; exit 2 ;;
esac
tar czf $OUT/n_$part.tgz -C $OUT n && rm -rf $o
