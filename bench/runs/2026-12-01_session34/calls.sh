#!/usr/bin/env bash
# The thirty-fourth session's device calls (carry [".gpu/h"]: main with the bench's --routing,
# built in this session; its kernels are those of `b563901`). One part per call:
#   suite    the whole suite, no sanitizers (the CPU backend's new summation order as the reference)
#   fp4      racecheck of Fp4Mainloop.* (the 192-row instances, planned since `e513789`), then
#            uniform against balanced routing (every expert the same rows) at 2048-8192 tokens
#   int4     racecheck of Int4Mainloop.* and Int4Int8Mainloop.*, then memcheck's list
#   sweep    the plan against 256-row tiles (prefill:1) on gpt-oss-120b MXFP4 and Kimi-K2 TP8
#            W4A16 g32 at 112-184 rows per expert (shapes the 192-row ranges were not set on)
#   extra    racecheck of Int4Int8Mainloop.* (cut by int4's limit), then balanced and uniform
#            routing with torch's grouped GEMMs on the same routed problems (tools/gpu_bench.sh)
#   huge     (carry [".gpu/i"]: the register kernel's 320-row tile, kHuge, built but not planned)
#            its kernel and layer tests, then prefill:3 against the plan at 224-304 rows per expert
#            (DeepSeek-V3, Qwen3-30B-A3B, which also runs 384 and 512; W4A16 g128, MXFP4, NVFP4
#            A16) and Mixtral-8x7B at 8192 tokens (2048 rows: 7 tiles of 320 instead of 8), two rounds
#   planned  (carry [".gpu/j"]: the 320-row tile planned) its new layer test on the automatic path,
#            memcheck of it, and the plan against 256-row tiles on Qwen3-30B-A3B at 272 rows
set -u
d=.gpu/${BIN:-h}; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
o=$OUT/n; mkdir -p $o
start=$SECONDS
part=${1:-}
racecheck() {  # racecheck NAME FILTER LIMIT_S
  timeout $3 compute-sanitizer --tool racecheck $d/qmoe_cuda_tests --gtest_filter="$2" > $o/racecheck_$1.log 2>&1
  echo "racecheck $1 rc $? ($((SECONDS - start)) s)"
  grep -hE "^\[  (PASSED|FAILED)|RACECHECK SUMMARY|^\[       OK" $o/racecheck_$1.log
  # (as tools/gpu_test.sh: hazards outside CuTe's TMA descriptor updates fail)
  echo "hazards outside tma_descriptor: $(grep "Race reported" $o/racecheck_$1.log | grep -v -c " at cute::tma_descriptor_")"
}
case $part in
  suite)
    QMOE_GPU_TEST_PARTS=tests timeout 560 tools/gpu_test.sh $d $o/t > $o/t_summary.txt 2>&1
    echo "gpu_test rc $? ($((SECONDS - start)) s)"
    grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/t/gpu_tests.log; grep -h "Failure" -A8 $o/t/gpu_tests.log | head -30 ;;
  fp4)
    racecheck fp4 'Fp4Mainloop.*' 360
    # Uniform against balanced routing, GEMMs apart, two rounds in both orders.
    for r in 1 2; do
      order="uniform balanced"; ((r == 2)) && order="balanced uniform"
      for rt in $order; do
        timeout $((580 - SECONDS)) $d/qmoe bench --routing $rt --split-gemms --rotations 2 --replays 5 \
          --models deepseek-v3,qwen3-30b-a3b --schemes fp8_channel,w4a16_g128 --tokens 2048,4096,8192 \
          --json $o/routing_${rt}_r$r.json > $o/routing_${rt}_r$r.log 2>&1
        echo "bench $rt round $r rc $? ($((SECONDS - start)) s)"
      done
    done
    grep -h "" $o/routing_*_r1.log | grep -v "^device" ;;
  int4)
    racecheck int4 'Int4Mainloop.*:Int4Int8Mainloop.*' 400
    QMOE_GPU_TEST_PARTS=memcheck timeout $((570 - SECONDS)) tools/gpu_test.sh $d $o/m > /dev/null 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -2 $o/m/memcheck.log ;;
  sweep)
    O="--rotations 2 --replays 5"
    timeout 170 tools/gpu_sweep.sh $d $o/gpt_oss 2 auto prefill:1 --models gpt-oss-120b --schemes mxfp4 \
      --tokens 3584,3840,4096,4608,5120,5376,5632,5888 $O > /dev/null 2>&1
    echo "gpt-oss rc $? ($((SECONDS - start)) s)"; cat $o/gpt_oss/summary.txt
    timeout $((570 - SECONDS)) tools/gpu_sweep.sh $d $o/kimi 2 auto prefill:1 --models kimi-k2-tp8 --schemes w4a16_g32 \
      --tokens 5376,5760,6144,6912,7680,8064,8448,8832 $O > /dev/null 2>&1
    echo "kimi rc $? ($((SECONDS - start)) s)"; cat $o/kimi/summary.txt ;;
  extra)
    racecheck int4int8 'Int4Int8Mainloop.*' 240
    for rt in balanced uniform; do
      mkdir -p $o/torch_$rt
      QMOE_COMMIT=session34 timeout $((575 - SECONDS)) tools/gpu_bench.sh $d $o/torch_$rt --routing $rt --rotations 2 \
        --replays 5 --models deepseek-v3,qwen3-30b-a3b --schemes fp8_channel,fp8_block,w4a16_g128,mxfp4,bf16 \
        --tokens 4096,8192 > /dev/null 2>&1
      echo "bench $rt rc $? ($((SECONDS - start)) s)"; tail -22 $o/torch_$rt/torch.log
    done ;;
  huge)
    timeout 200 $d/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*:PrefillKernels.EveryTileMatchesTheCpuBackend' \
      > $o/tests.log 2>&1
    echo "tests rc $? ($((SECONDS - start)) s)"
    grep -hE "^\[  (PASSED|FAILED)|^\[       OK|FAILED TEST" $o/tests.log; grep -h "Failure" -A8 $o/tests.log | head -30
    grep -h "tile 320" $o/tests.log | head -8
    O="--rotations 2 --replays 5"
    timeout $((330 - SECONDS)) tools/gpu_sweep.sh $d $o/qwen3 2 auto prefill:3 --models qwen3-30b-a3b \
      --schemes w4a16_g128,mxfp4,nvfp4a16 --tokens 3584,3840,4096,4352,4608,4864,6144,8192 $O > /dev/null 2>&1
    echo "qwen3 rc $? ($((SECONDS - start)) s)"; cat $o/qwen3/summary.txt
    timeout $((380 - SECONDS)) tools/gpu_sweep.sh $d $o/mixtral 2 auto prefill:3 --models mixtral-8x7b \
      --schemes w4a16_g128,mxfp4,nvfp4a16 --tokens 8192 $O > /dev/null 2>&1
    echo "mixtral rc $? ($((SECONDS - start)) s)"; cat $o/mixtral/summary.txt
    timeout $((560 - SECONDS)) tools/gpu_sweep.sh $d $o/dsv3 2 auto prefill:3 --models deepseek-v3 \
      --schemes w4a16_g128,mxfp4,nvfp4a16 --tokens 7168,7680,8192,8704,9216,9728 $O > /dev/null 2>&1
    echo "dsv3 rc $? ($((SECONDS - start)) s)"; cat $o/dsv3/summary.txt ;;
  planned)  # (carry [".gpu/j"]: the 320-row tile planned at 244-312 rows per expert)
    f='PrefillKernels.RegisterKernel320*'
    timeout 60 $d/qmoe_cuda_tests --gtest_filter="$f" > $o/tests.log 2>&1
    echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|^\[       OK|Failure" -A3 $o/tests.log | head -20
    timeout 60 compute-sanitizer --tool memcheck $d/qmoe_cuda_tests --gtest_filter="$f" > $o/memcheck.log 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -2 $o/memcheck.log
    timeout 40 $d/qmoe bench --gemm-paths auto,prefill:1 --split-gemms --models qwen3-30b-a3b \
      --schemes w4a16_g128,mxfp4,nvfp4a16 --tokens 4352 --rotations 2 --replays 5 > $o/bench.log 2>&1
    echo "bench rc $? ($((SECONDS - start)) s)"; cat $o/bench.log ;;
  *) echo "calls.sh: suite, fp4, int4, sweep, extra, huge or planned"; exit 2 ;;
esac
tar czf $OUT/n_$part.tgz -C $OUT n && rm -rf $o
