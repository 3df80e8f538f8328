#!/usr/bin/env bash
# For the next session (not run yet), one call, two branches against main's build in .gpu/n (each
# build: qmoe, qmoe_cuda_tests, libfmt.so.9; xz):
# - .gpu/r: wip/ring-position (the stage ring walked by position instead of it % kStages): the
#   register kernel's tests (the 2-CTA cases wrap the ring many times), memcheck of the kernel
#   tests, the A/B on Qwen3-30B-A3B, DeepSeek-V3 TP8 and Mixtral at 4096 tokens.
# - .gpu/s: wip/swiglu-quick (swigluoai in the fused epilogue's batches): the new fast-path tests
#   (DivideQuick: 2^32 random pairs; SwigluOaiQuick: 2^30 random inputs) and the kernel tests, the
#   A/B on gpt-oss-120b at 2048-8192 and Qwen3-30B-A3B NVFP4 at 4096 (silu's one more compare).
# Racecheck of the kernel tests on r (it changes how the barriers' phases are computed) is left
# for the call that lands it (~300 s).
set -u
tools/gpu_unpack.sh .gpu/n .gpu/r .gpu/s
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
kernel_tests='Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:W4Prefill.*'
LD_LIBRARY_PATH=$PWD/.gpu/r timeout 120 .gpu/r/qmoe_cuda_tests --gtest_filter="$kernel_tests" > $OUT/r_tests.log 2>&1
echo "r tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/r_tests.log | head
LD_LIBRARY_PATH=$PWD/.gpu/r timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/r/qmoe_cuda_tests \
  --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $OUT/r_memcheck.log 2>&1
echo "r memcheck rc $? ($((SECONDS - start)) s)"; tail -n 2 $OUT/r_memcheck.log
timeout 100 tools/gpu_ab.sh .gpu/n .gpu/r $OUT/ab_r 3 --models qwen3-30b-a3b,deepseek-v3-tp8,mixtral-8x7b \
  --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 4096 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab r rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_r/summary.txt
LD_LIBRARY_PATH=$PWD/.gpu/s timeout 150 .gpu/s/qmoe_cuda_tests \
  --gtest_filter="DivideQuick.*:SwigluOaiQuick.*:SiluQuick.*:DivideRn.*:$kernel_tests" > $OUT/s_tests.log 2>&1
echo "s tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/s_tests.log | head
timeout 100 tools/gpu_ab.sh .gpu/n .gpu/s $OUT/ab_s 3 --models gpt-oss-120b --schemes nvfp4a16,mxfp4,w4a16_g32 \
  --tokens 2048,4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1; echo "ab s rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_s/summary.txt
timeout 60 tools/gpu_ab.sh .gpu/n .gpu/s $OUT/ab_s_silu 3 --models qwen3-30b-a3b --schemes nvfp4a16 \
  --tokens 4096 --rotations 2 --replays 5 > /dev/null 2>&1; echo "ab s silu rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_s_silu/summary.txt
cd $OUT && tar czf logs.tgz ab_r ab_s ab_s_silu r_tests.log r_memcheck.log s_tests.log && rm -rf ab_r ab_s ab_s_silu
