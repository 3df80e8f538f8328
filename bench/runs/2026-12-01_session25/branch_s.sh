#!/usr/bin/env bash
# The wip/swiglu-quick half of 2026-12-01_session24/next_branches.sh: .gpu/s's fast-path and kernel
# tests, the A/Bs against main (.gpu/n, qmoe only) on gpt-oss-120b and Qwen3-30B-A3B NVFP4; then
# 2026-12-01_session24/next_profile.sh (ncu of Mixtral MXFP4 at 4096 / 8192 tokens on .gpu/n).
set -u
tools/gpu_unpack.sh .gpu/n .gpu/s
cp .gpu/n/libfmt.so.9 .gpu/s/
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
kernel_tests='Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:W4Prefill.*'
LD_LIBRARY_PATH=$PWD/.gpu/s timeout 150 .gpu/s/qmoe_cuda_tests \
  --gtest_filter="DivideQuick.*:SwigluOaiQuick.*:SiluQuick.*:DivideRn.*:$kernel_tests" > $OUT/s_tests.log 2>&1
echo "s tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/s_tests.log | head
timeout 100 tools/gpu_ab.sh .gpu/n .gpu/s $OUT/ab_s 3 --models gpt-oss-120b --schemes nvfp4a16,mxfp4,w4a16_g32 \
  --tokens 2048,4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1; echo "ab s rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_s/summary.txt
timeout 60 tools/gpu_ab.sh .gpu/n .gpu/s $OUT/ab_s_silu 3 --models qwen3-30b-a3b --schemes nvfp4a16 \
  --tokens 4096 --rotations 2 --replays 5 > /dev/null 2>&1; echo "ab s silu rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_s_silu/summary.txt
(cd $OUT && tar czf logs_s.tgz ab_s ab_s_silu s_tests.log && rm -rf ab_s ab_s_silu)
bash bench/runs/2026-12-01_session24/next_profile.sh
