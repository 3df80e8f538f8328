#!/usr/bin/env bash
# For the next session (not run yet): branch wip/swiglu-quick (swigluoai in the fused epilogue's
# branch-free batches; divide_quick shared with silu_quick) built into .gpu/s (qmoe,
# qmoe_cuda_tests, libfmt.so.9; xz) against main's build in .gpu/n: the new fast-path tests
# (DivideQuick: 2^32 random pairs; SwigluOaiQuick: 2^30 random inputs) and the register kernel's
# tests on s, memcheck of the kernel tests, then the A/B (three alternated rounds): gpt-oss-120b
# (swigluoai) at 2048-8192 tokens, and Qwen3-30B-A3B NVFP4 at 4096 (silu: one more compare per
# output in divide_quick).
set -u
tools/gpu_unpack.sh .gpu/n .gpu/s
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/s timeout 200 .gpu/s/qmoe_cuda_tests \
  --gtest_filter='DivideQuick.*:SwigluOaiQuick.*:SiluQuick.*:DivideRn.*:Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:W4Prefill.*' > $OUT/s_tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/s_tests.log | head
LD_LIBRARY_PATH=$PWD/.gpu/s timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/s/qmoe_cuda_tests \
  --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $OUT/s_memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -n 2 $OUT/s_memcheck.log
timeout 200 tools/gpu_ab.sh .gpu/n .gpu/s $OUT/ab 3 --models gpt-oss-120b --schemes nvfp4a16,mxfp4,w4a16_g32 \
  --tokens 2048,4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1; echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab/summary.txt
timeout 100 tools/gpu_ab.sh .gpu/n .gpu/s $OUT/ab_silu 3 --models qwen3-30b-a3b --schemes nvfp4a16 \
  --tokens 4096 --rotations 2 --replays 5 > /dev/null 2>&1; echo "ab silu rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_silu/summary.txt
cd $OUT && tar czf ab.tgz ab ab_silu s_tests.log s_memcheck.log && rm -rf ab ab_silu
