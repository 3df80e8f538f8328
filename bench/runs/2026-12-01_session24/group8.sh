#!/usr/bin/env bash
# The fused activation epilogue in groups of 8 outputs (MXFP4 4), build in .gpu/f: the register
# kernel's and layer tests, memcheck of the kernel tests, then Mixtral-8x7B's 4-bit rows at 4096 /
# 8192 tokens with torch's grouped baselines (issue 4's 650 TFLOP/s target is W4A16 g128 and FP4).
set -u
d=.gpu/f; xz -d $d/*.xz 2>/dev/null; chmod +x $d/qmoe $d/qmoe_cuda_tests
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
timeout 150 $d/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:W4Prefill.*:DivideRn.*:SiluQuick.*' > $OUT/f_tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/f_tests.log | head
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $d/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $OUT/f_memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -n 2 $OUT/f_memcheck.log
o=$OUT/torch; mkdir -p $o
QMOE_COMMIT=group8 timeout 150 tools/gpu_bench.sh $d $o --models mixtral-8x7b --schemes w4a16_g128,nvfp4a16,mxfp4 \
  --tokens 4096,8192 --rotations 2 --replays 5 > $o/tail.txt 2>&1
echo "torch rc $? ($((SECONDS - start)) s)"; grep -h "| auto |\|^| model" $o/results.md
cd $OUT && tar czf logs.tgz torch f_tests.log f_memcheck.log && rm -rf torch
