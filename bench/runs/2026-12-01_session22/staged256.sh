#!/usr/bin/env bash
# Call 5: the staged terms epilogue on 256-row tiles too, 64 rows at a time (b3), against the
# landed code (b2, 58e5c3d): kernel and layer tests, A/B in three alternated rounds, memcheck and
# racecheck on the direct kernel tests (as far as the time allows).
set -u
for d in .gpu/b2 .gpu/b3; do xz -d $d/*.xz; chmod +x $d/qmoe*; done
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
f='Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:CudaMoeLayerApi.*:RandomLayerEdges.*'
LD_LIBRARY_PATH=$PWD/.gpu/b3 timeout 100 .gpu/b3/qmoe_cuda_tests --gtest_filter="$f" > $OUT/b3_tests.log 2>&1
echo "b3 tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/b3_tests.log
timeout 120 tools/gpu_ab.sh .gpu/b2 .gpu/b3 $OUT/ab 3 --models qwen3-30b-a3b,deepseek-v3-tp8,gpt-oss-120b,mixtral-8x7b \
  --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 2048,4096 --rotations 2 --replays 5 > $OUT/ab_summary.txt 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_summary.txt
export LD_LIBRARY_PATH=$PWD/.gpu/b3
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/b3/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $OUT/b3_memcheck.log 2>&1; echo "b3 memcheck rc $? ($((SECONDS - start)) s)"
left=$((380 - (SECONDS - start)))
timeout $left compute-sanitizer --tool racecheck .gpu/b3/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $OUT/b3_racecheck.log 2>&1; echo "b3 racecheck rc $? ($((SECONDS - start)) s)"
grep -hE "^\[  (PASSED|FAILED)|^\[       OK|SUMMARY|Race" $OUT/b3_memcheck.log $OUT/b3_racecheck.log | head
tar czf $OUT/ab.tgz -C $OUT ab
