#!/usr/bin/env bash
# The terms epilogues' routing weights read with shared loads (they went through a generic pointer;
# TileInfo's row_weights now first and 16-byte aligned), build in .gpu/g, against main `b2d53bc`
# (.gpu/f): the register kernel's and layer tests and memcheck of the kernel tests on g, then the
# A/B, three alternated rounds.
set -u
for d in .gpu/f .gpu/g; do xz -d $d/*.xz 2>/dev/null; chmod +x $d/qmoe $d/qmoe_cuda_tests; done
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/g timeout 150 .gpu/g/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:W4Prefill.*' > $OUT/g_tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/g_tests.log | head
LD_LIBRARY_PATH=$PWD/.gpu/g timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/g/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $OUT/g_memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -n 2 $OUT/g_memcheck.log
timeout 120 tools/gpu_ab.sh .gpu/f .gpu/g $OUT/ab 3 --models qwen3-30b-a3b,deepseek-v3-tp8 --schemes nvfp4a16,w4a16_g32 \
  --tokens 2048,4096 --rotations 2 --replays 5 > /dev/null 2>&1; echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab/summary.txt
cd $OUT && tar czf logs.tgz ab g_tests.log g_memcheck.log && rm -rf ab
