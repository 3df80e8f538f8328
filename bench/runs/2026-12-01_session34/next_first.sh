#!/usr/bin/env bash
# For the next session (not run), carry [".gpu/k"]: main at the thirty-fourth session's end (rebuild
# and repack .gpu/k if .gpu/ did not survive). The 4-bit register kernel's 320-row tile is planned at
# 244-312 rows per expert; its kernel tests passed forced (huge/), but the planned path's layer test
# (PrefillKernels.RegisterKernel320RowTileWherePlanned, new) and the sanitizers have not run on it.
# Calls, in this order:
#   next_first.sh suite   the new test, memcheck of it, then the whole suite (~330 s)
#   next_first.sh fp4     racecheck of Fp4Mainloop.* (now with 320-row tiles, ~370 s)
#   next_first.sh int4    racecheck of Int4Mainloop.* (~450 s)
#   next_first.sh torch   the automatic path with torch's grouped GEMMs: DeepSeek-V3 and
#                         Qwen3-30B-A3B 4-bit at 4096 / 8192 tokens (uniform routing)
set -u
d=.gpu/k; tools/gpu_unpack.sh $d
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
    f='PrefillKernels.RegisterKernel320*'
    timeout 60 $d/qmoe_cuda_tests --gtest_filter="$f" > $o/new_test.log 2>&1
    echo "new test rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|^\[       OK|Failure" -A3 $o/new_test.log | head -20
    timeout 90 compute-sanitizer --tool memcheck $d/qmoe_cuda_tests --gtest_filter="$f" > $o/new_memcheck.log 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -2 $o/new_memcheck.log
    QMOE_GPU_TEST_PARTS=tests timeout $((570 - SECONDS)) tools/gpu_test.sh $d $o/t > $o/t_summary.txt 2>&1
    echo "gpu_test rc $? ($((SECONDS - start)) s)"
    grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/t/gpu_tests.log; grep -h "Failure" -A8 $o/t/gpu_tests.log | head -30 ;;
  fp4) racecheck fp4 'Fp4Mainloop.*' 560 ;;
  int4) racecheck int4 'Int4Mainloop.*' 560 ;;
  torch)
    mkdir -p $o/torch
    QMOE_COMMIT=session34-end timeout 560 tools/gpu_bench.sh $d $o/torch --rotations 2 --replays 5 \
      --models deepseek-v3,qwen3-30b-a3b --schemes w4a16_g128,mxfp4,nvfp4a16 --tokens 4096,8192 > /dev/null 2>&1
    echo "bench rc $? ($((SECONDS - start)) s)"; tail -14 $o/torch/torch.log ;;
  *) echo "next_first.sh: suite, fp4, int4 or torch"; exit 2 ;;
esac
tar czf $OUT/n_$part.tgz -C $OUT n && rm -rf $o
