#!/usr/bin/env bash
# For the next session (not run), carry [".gpu/g"]: main at the thirty-third session's end
# (rebuild and repack .gpu/g if .gpu/ did not survive). Its kernels are those of `b563901`
# (.gpu/f, which ran check.sh and last.sh); since then the CPU backend, the GPU tests' reference,
# sums in another order and the bench checks its arguments first: neither has run on the GPU.
# Then racecheck of the 4-bit register kernel's tests, whose 192-row instances (now planned) hand
# the producer's registers to the consumers: the thirty-third session's racecheck (last.sh) was
# cut inside Fp4Mainloop.* by the call's limit, no hazard up to there. Calls, in this order:
#   next_first.sh suite  the whole suite (no sanitizers, ~300 s)
#   next_first.sh fp4    racecheck of Fp4Mainloop.* (~300-500 s)
#   next_first.sh int4   racecheck of Int4Mainloop.* and Int4Int8Mainloop.*, then memcheck's list
#   next_first.sh sweep  the plan (192 rows at ~120-170 rows per expert) against 256-row tiles
#                        (prefill:1) on two shapes the bounds were not measured on: gpt-oss-120b
#                        MXFP4, Kimi-K2 TP8 W4A16 g32, 112-184 rows per expert (~200 s)
set -u
d=.gpu/g; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
o=$OUT/n; mkdir -p $o
start=$SECONDS
part=${1:-fp4}
case $part in
  suite)
    QMOE_GPU_TEST_PARTS=tests timeout 560 tools/gpu_test.sh $d $o/t > $o/t_summary.txt 2>&1
    echo "gpu_test rc $? ($((SECONDS - start)) s)"
    grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/t/gpu_tests.log; grep -h "Failure" -A8 $o/t/gpu_tests.log | head -30
    tar czf $OUT/n.tgz -C $OUT n && rm -rf $o
    exit 0 ;;
  fp4) filter='Fp4Mainloop.*' ;;
  int4) filter='Int4Mainloop.*:Int4Int8Mainloop.*' ;;
  sweep)
    O="--rotations 2 --replays 5"
    timeout 150 tools/gpu_sweep.sh $d $o/gpt_oss 2 auto prefill:1 --models gpt-oss-120b --schemes mxfp4 \
      --tokens 3584,3840,4096,4608,5120,5376,5632,5888 $O > /dev/null 2>&1
    echo "gpt-oss rc $? ($((SECONDS - start)) s)"; cat $o/gpt_oss/summary.txt
    timeout 200 tools/gpu_sweep.sh $d $o/kimi 2 auto prefill:1 --models kimi-k2-tp8 --schemes w4a16_g32 \
      --tokens 5376,5760,6144,6912,7680,8064,8448,8832 $O > /dev/null 2>&1
    echo "kimi rc $? ($((SECONDS - start)) s)"; cat $o/kimi/summary.txt
    tar czf $OUT/n.tgz -C $OUT n && rm -rf $o
    exit 0 ;;
  *) echo "next_first.sh: suite, fp4, int4 or sweep"; exit 2 ;;
esac
timeout 540 compute-sanitizer --tool racecheck $d/qmoe_cuda_tests --gtest_filter="$filter" > $o/racecheck_$part.log 2>&1
echo "racecheck $part rc $? ($((SECONDS - start)) s)"
grep -hE "^\[  (PASSED|FAILED)|RACECHECK SUMMARY" $o/racecheck_$part.log
# (as tools/gpu_test.sh: hazards outside CuTe's TMA descriptor updates fail)
grep "Race reported" $o/racecheck_$part.log | grep -v -c " at cute::tma_descriptor_"
if [[ $part == int4 ]]; then
  QMOE_GPU_TEST_PARTS=memcheck timeout $((570 - SECONDS)) tools/gpu_test.sh $d $o/m > /dev/null 2>&1
  echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -2 $o/m/memcheck.log
fi
tar czf $OUT/n.tgz -C $OUT n && rm -rf $o
