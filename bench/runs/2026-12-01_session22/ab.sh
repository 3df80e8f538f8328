#!/usr/bin/env bash
# Call 2: main (A) vs wip/bf16-terms (B), two alternated rounds on the many-expert shapes whose
# GEMM2 output the terms halve; then racecheck on the int4 half of the direct terms test (call 1's
# racecheck ran out of time there, after the fp4 half passed with no hazard).
set -u
for d in .gpu/m .gpu/b; do xz -d $d/*.xz; chmod +x $d/qmoe $d/qmoe_cuda_tests; done
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
timeout 450 tools/gpu_ab.sh .gpu/m .gpu/b $OUT/ab 2 --models deepseek-v3-tp8,qwen3-30b-a3b,gpt-oss-120b \
  --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 512,2048,4096 --rotations 2 --replays 5
echo "ab rc $? ($((SECONDS - start)) s)"
left=$((560 - (SECONDS - start)))
LD_LIBRARY_PATH=$PWD/.gpu/b timeout $left compute-sanitizer --tool racecheck .gpu/b/qmoe_cuda_tests \
  --gtest_filter='Int4Mainloop.*' > $OUT/b_racecheck_int4.log 2>&1
echo "int4 racecheck rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|SUMMARY" $OUT/b_racecheck_int4.log
tar czf $OUT/ab.tgz -C $OUT ab
