#!/usr/bin/env bash
# Session 28, device call 4: branch wip/i2f-mix (.gpu/c, full): main `e984978` (groups of one
# k-tile in a straight k-loop of their own: call 3 found the fixed shared loop still 4-12% slower on
# W4A8-INT8 g128 than `dbf6646`) plus QMOE_I2F=4 (a quarter of the promotions by cvt, chosen once
# per tile). Against .gpu/n (main `dbf6646`, qmoe only).
# 1. c's tests with QMOE_I2F unset and 4; memcheck of the kernel's test.
# 2. A/B n vs c (unset), c vs c (QMOE_I2F=4): W4A8-INT8 g128 at 2048-8192, two rounds.
# 3. c: W4A8-INT8 g128 and per row, FP8 channel, the same shapes and tokens (TOP/s), one round.
set -u
tools/gpu_unpack.sh .gpu/c .gpu/n
cp .gpu/c/libfmt.so.9 .gpu/n/ 2>/dev/null
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
run_tests() {  # LOG FILTER [env...]
  local log=$1 filter=$2; shift 2
  env "$@" LD_LIBRARY_PATH=$PWD/.gpu/c timeout 150 .gpu/c/qmoe_cuda_tests --gtest_filter="$filter" > $OUT/$log 2>&1
  echo "$log rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/$log | head -5
}
run_tests c_tests.log 'Int4Int8Mainloop.*:PrefillKernels.MatchTheCpuBackend:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8*'
run_tests c_tests_i2f4.log 'Int4Int8Mainloop.*:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8*' QMOE_I2F=4
LD_LIBRARY_PATH=$PWD/.gpu/c timeout 100 compute-sanitizer --tool memcheck .gpu/c/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*' > $OUT/c_memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/c_memcheck.log | tail -2
opts="--models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --tokens 2048,4096,8192 --rotations 2 --replays 5"
timeout 100 tools/gpu_ab.sh .gpu/n .gpu/c $OUT/ab_fix 2 $opts --schemes w4a8_int8 > /dev/null 2>&1
echo "ab fix rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_fix/summary.txt
for mix in 4; do
  AB_ENV_B="QMOE_I2F=$mix" timeout 100 tools/gpu_ab.sh .gpu/c .gpu/c $OUT/ab_i2f$mix 2 $opts --schemes w4a8_int8 > /dev/null 2>&1
  echo "ab i2f=$mix rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_i2f$mix/summary.txt
done
timeout 100 tools/gpu_ab.sh .gpu/c .gpu/c $OUT/channel 1 $opts --schemes w4a8_int8,w4a8_int8_channel,fp8_channel > /dev/null 2>&1
echo "channel rc $? ($((SECONDS - start)) s)"; cat $OUT/channel/summary.txt
cd $OUT && tar czf logs.tgz ab_fix ab_i2f4 channel && rm -rf ab_fix ab_i2f4 channel
