#!/usr/bin/env bash
# Call 3: wip/bf16-terms with the tile's routing weights loaded before the mainloop (b2) against
# main (A), three alternated rounds; then b2's kernel and layer tests, memcheck and racecheck on the
# direct terms test.
set -u
for d in .gpu/m .gpu/b2; do xz -d $d/*.xz; chmod +x $d/qmoe $d/qmoe_cuda_tests; done
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
timeout 300 tools/gpu_ab.sh .gpu/m .gpu/b2 $OUT/ab 3 --models deepseek-v3-tp8,qwen3-30b-a3b,gpt-oss-120b,mixtral-8x7b \
  --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 512,2048,4096 --rotations 2 --replays 5 > $OUT/ab_summary.txt 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_summary.txt
export LD_LIBRARY_PATH=$PWD/.gpu/b2
f='Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:CudaMoeLayerApi.*:RandomLayerEdges.*'
timeout 100 .gpu/b2/qmoe_cuda_tests --gtest_filter="$f" > $OUT/b2_tests.log 2>&1; echo "b2 tests rc $? ($((SECONDS - start)) s)"
grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/b2_tests.log
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/b2/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $OUT/b2_memcheck.log 2>&1; echo "b2 memcheck rc $? ($((SECONDS - start)) s)"
left=$((570 - (SECONDS - start)))
timeout $left compute-sanitizer --tool racecheck .gpu/b2/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $OUT/b2_racecheck.log 2>&1; echo "b2 racecheck rc $? ($((SECONDS - start)) s)"
grep -hE "^\[  (PASSED|FAILED)|^\[       OK|SUMMARY|Race" $OUT/b2_memcheck.log $OUT/b2_racecheck.log | head
tar czf $OUT/ab.tgz -C $OUT ab
