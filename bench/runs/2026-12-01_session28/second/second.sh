#!/usr/bin/env bash
# Session 28, device call 3: branch wip/i2f-mix (.gpu/b, full): main `ff94b11` (a group's first MMA
# overwrites the int8 sums at compile time: call 2 found main `3d0a413` 19% slower on W4A8-INT8 g128
# than `dbf6646`, its runtime flag kept the sums live across the promotion) plus QMOE_I2F (0: main's
# code path; 4 / 2: a quarter / half of the promotions by cvt). Against .gpu/n (main `dbf6646`,
# qmoe only).
# 1. b's tests with QMOE_I2F unset, 2 and 4; memcheck of the kernel's test.
# 2. A/B n vs b (unset), b vs b (QMOE_I2F=2), b vs b (QMOE_I2F=4): W4A8-INT8 g128 at 2048-8192.
# 3. b: W4A8-INT8 per row and FP8 channel, the same shapes and tokens (TOP/s).
set -u
tools/gpu_unpack.sh .gpu/b .gpu/n
cp .gpu/b/libfmt.so.9 .gpu/n/ 2>/dev/null
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
run_tests() {  # LOG FILTER [env...]
  local log=$1 filter=$2; shift 2
  env "$@" LD_LIBRARY_PATH=$PWD/.gpu/b timeout 150 .gpu/b/qmoe_cuda_tests --gtest_filter="$filter" > $OUT/$log 2>&1
  echo "$log rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/$log | head -5
}
run_tests b_tests.log 'Int4Int8Mainloop.*:PrefillKernels.MatchTheCpuBackend:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8*'
run_tests b_tests_i2f2.log 'Int4Int8Mainloop.*:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8*' QMOE_I2F=2
run_tests b_tests_i2f4.log 'Int4Int8Mainloop.*' QMOE_I2F=4
LD_LIBRARY_PATH=$PWD/.gpu/b timeout 100 compute-sanitizer --tool memcheck .gpu/b/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*' > $OUT/b_memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/b_memcheck.log | tail -2
opts="--models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --tokens 2048,4096,8192 --rotations 2 --replays 5"
timeout 100 tools/gpu_ab.sh .gpu/n .gpu/b $OUT/ab_fix 2 $opts --schemes w4a8_int8 > /dev/null 2>&1
echo "ab fix rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_fix/summary.txt
for mix in 2 4; do
  AB_ENV_B="QMOE_I2F=$mix" timeout 100 tools/gpu_ab.sh .gpu/b .gpu/b $OUT/ab_i2f$mix 2 $opts --schemes w4a8_int8 > /dev/null 2>&1
  echo "ab i2f=$mix rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_i2f$mix/summary.txt
done
timeout 100 tools/gpu_ab.sh .gpu/b .gpu/b $OUT/channel 1 $opts --schemes w4a8_int8_channel,fp8_channel > /dev/null 2>&1
echo "channel rc $? ($((SECONDS - start)) s)"; cat $OUT/channel/summary.txt
cd $OUT && tar czf logs.tgz ab_fix ab_i2f2 ab_i2f4 channel && rm -rf ab_fix ab_i2f2 ab_i2f4 channel
