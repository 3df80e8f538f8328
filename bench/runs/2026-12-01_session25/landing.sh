#!/usr/bin/env bash
# main with wip/ring-position and wip/swiglu-quick cherry-picked (.gpu/m: qmoe, qmoe_cuda_tests)
# against main 995e4dc (.gpu/n: qmoe, libfmt.so.9):
# 1. clocks and power (nvidia-smi every 50 ms) while `qmoe bench` runs Mixtral MXFP4 at 4096 and at
#    8192 tokens on n: is 8192's lower TFLOP/s a lower SM clock? (ncu, one launch at a time, gave
#    8192 1.91x 4096's cycles for 2x the work, but the bench's GEMM time is 2.17x.)
# 2. m's fast-path and kernel tests, racecheck of its Fp4Mainloop / Int4Mainloop tests (the ring's
#    phases are computed differently now).
# 3. A/B m vs n: gpt-oss-120b (swigluoai's batches) at 4096 / 8192 and Mixtral at 8192, 3 rounds.
set -u
tools/gpu_unpack.sh .gpu/n .gpu/m
cp .gpu/n/libfmt.so.9 .gpu/m/
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
for tokens in 4096 8192; do
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader -lms 50 > $OUT/clocks_$tokens.csv 2>&1 &
  mon=$!
  LD_LIBRARY_PATH=$PWD/.gpu/n timeout 60 .gpu/n/qmoe bench --models mixtral-8x7b --schemes mxfp4 --tokens $tokens \
    --rotations 2 --replays 5 > $OUT/bench_$tokens.txt 2>&1
  kill $mon; wait $mon 2>/dev/null
  echo "clocks $tokens ($((SECONDS - start)) s)"; grep -h "mixtral" $OUT/bench_$tokens.txt | head -3
  awk -F', ' '{c[$2]++} END {for (k in c) print k, c[k]}' $OUT/clocks_$tokens.csv | sort -n | tail -8
  awk -F', ' '{p[$4]++} END {for (k in p) print k, p[k]}' $OUT/clocks_$tokens.csv | sort -t' ' -k1 -n | tail -5
  awk -F', ' '{r[$6]++} END {for (k in r) print "reasons", k, r[k]}' $OUT/clocks_$tokens.csv
done
kernel_tests='Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:W4Prefill.*'
LD_LIBRARY_PATH=$PWD/.gpu/m timeout 150 .gpu/m/qmoe_cuda_tests \
  --gtest_filter="DivideQuick.*:SwigluOaiQuick.*:SiluQuick.*:DivideRn.*:$kernel_tests" > $OUT/m_tests.log 2>&1
echo "m tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/m_tests.log | head
timeout 100 tools/gpu_ab.sh .gpu/n .gpu/m $OUT/ab_m 3 --models gpt-oss-120b,mixtral-8x7b --schemes nvfp4a16,mxfp4,w4a16_g32 \
  --tokens 4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1; echo "ab m rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_m/summary.txt
(cd $OUT && tar czf logs.tgz ab_m m_tests.log clocks_*.csv bench_*.txt && rm -rf ab_m clocks_*.csv)
LD_LIBRARY_PATH=$PWD/.gpu/m timeout 380 compute-sanitizer --tool racecheck .gpu/m/qmoe_cuda_tests \
  --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $OUT/m_racecheck.log 2>&1
echo "m racecheck rc $? ($((SECONDS - start)) s)"; tail -n 3 $OUT/m_racecheck.log
