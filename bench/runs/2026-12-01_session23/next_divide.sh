#!/usr/bin/env bash
# For the next session (not run yet): branch wip/divide-rn-256 (one line: NVFP4's division by the
# global scale with DivideRn on 256-row tiles too) built into .gpu/d (qmoe, qmoe_cuda_tests,
# libfmt.so.9; xz) against main's build in .gpu/n: the register kernel's tests on d (DivideRn
# must give __fdiv_rn's bits: DivideRn.* and the kernel tests compare bit for bit), then the A/B,
# NVFP4 where 256-row tiles run (from 129 rows per expert: Qwen3-30B-A3B from 2064 tokens,
# Mixtral from 516, gpt-oss-120b and the TP8 shapes from 4128), layer µs.
set -u
for d in .gpu/n .gpu/d; do xz -d $d/*.xz 2>/dev/null; chmod +x $d/qmoe $d/qmoe_cuda_tests; done
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/d timeout 150 .gpu/d/qmoe_cuda_tests \
  --gtest_filter='Fp4Mainloop.*:Formats/RandomLayers.*:W4Prefill.*:DivideRn.*' > $OUT/d_tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/d_tests.log | head
timeout 300 tools/gpu_ab.sh .gpu/n .gpu/d $OUT/ab 3 --models qwen3-30b-a3b,mixtral-8x7b,gpt-oss-120b,deepseek-v3-tp8 \
  --schemes nvfp4a16 --tokens 4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab/summary.txt
cd $OUT && tar czf ab.tgz ab && rm -rf ab
