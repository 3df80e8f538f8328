#!/usr/bin/env bash
# Session 28, device call 2: main `3d0a413` (.gpu/m, full: the int8 register kernel's integer sums
# over whole scale groups, the synthetic scheme w4a8_int8_channel) and branch wip/i2f-mix (.gpu/x,
# qmoe only: QMOE_I2F=4 or 2 promotes a quarter or half of the int8 sums by cvt instead of the
# integer-add trick, to unload the issue slots; ncu put them at 57% busy with 1.2 G instructions).
# 1. m's tests: the kernel's (groups 128, 256, per row), prefill layers, both W4A8-INT8 random
#    layer schemes; memcheck of the kernel's test.
# 2. m's bench: W4A8-INT8 g128 and per row, FP8 channel and INT8 W8A8 (the int8 tensor-core
#    control) on three shapes at 2048-8192 tokens, two rounds; the per-row scheme's switch at
#    8-128 tokens (auto, decode, prefill).
# 3. A/B m vs x with QMOE_I2F=4, then =2, W4A8-INT8 g128 at 2048-8192, two rounds each.
set -u
tools/gpu_unpack.sh .gpu/m .gpu/x
cp .gpu/m/libfmt.so.9 .gpu/x/ 2>/dev/null
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/m timeout 200 .gpu/m/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*:PrefillKernels.MatchTheCpuBackend:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8*' \
  > $OUT/m_tests.log 2>&1
echo "m tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/m_tests.log | head
LD_LIBRARY_PATH=$PWD/.gpu/m timeout 100 compute-sanitizer --tool memcheck .gpu/m/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*' > $OUT/m_memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/m_memcheck.log | tail -2
timeout 150 tools/gpu_ab.sh .gpu/m .gpu/m $OUT/schemes 1 --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 \
  --schemes w4a8_int8,w4a8_int8_channel,fp8_channel,int8 --tokens 2048,4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1
echo "schemes rc $? ($((SECONDS - start)) s)"; cat $OUT/schemes/summary.txt
LD_LIBRARY_PATH=$PWD/.gpu/m timeout 60 .gpu/m/qmoe bench --models mixtral-8x7b,deepseek-v3 --schemes w4a8_int8_channel \
  --tokens 8,16,24,32,64,128 --gemm-paths auto,decode,prefill --rotations 2 --replays 5 > $OUT/switch.txt 2>&1
echo "switch rc $? ($((SECONDS - start)) s)"; grep -E "w4a8" $OUT/switch.txt | cut -c1-140 | head -40
for mix in 4 2; do
  AB_ENV_B="QMOE_I2F=$mix" timeout 120 tools/gpu_ab.sh .gpu/m .gpu/x $OUT/ab_i2f$mix 2 \
    --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --schemes w4a8_int8 --tokens 2048,4096,8192 \
    --rotations 2 --replays 5 > /dev/null 2>&1
  echo "ab i2f=$mix rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_i2f$mix/summary.txt
done
cd $OUT && tar czf logs.tgz schemes ab_i2f4 ab_i2f2 && rm -rf schemes ab_i2f4 ab_i2f2
