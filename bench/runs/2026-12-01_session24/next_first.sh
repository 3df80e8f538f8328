#!/usr/bin/env bash
# For the next session (not run yet), one device call on main's build in .gpu/n (qmoe,
# qmoe_cuda_tests, libfmt.so.9; xz): racecheck of the register kernel's own tests (`d73035e` moved
# TileInfo::row_weights and reads it with shared loads; `1c0db3e` renamed a flag and changed a test
# helper; racecheck of Fp4Mainloop / Int4Mainloop has not run on the twenty-fourth session's
# commits), the fast-path tests, then the bench against torch at 2048 / 4096 / 8192 tokens (the
# three 4-bit rows at 0.98-0.99x torch on 1a4e208 were measured before b2d53bc and d73035e).
set -u
d=.gpu/n; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/$d timeout 80 $d/qmoe_cuda_tests --gtest_filter='DivideRn.*:SiluQuick.*' > $OUT/fast_paths.log 2>&1
echo "fast paths rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/fast_paths.log
LD_LIBRARY_PATH=$PWD/$d timeout 400 compute-sanitizer --tool racecheck $d/qmoe_cuda_tests \
  --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $OUT/racecheck_kernels.log 2>&1
echo "racecheck rc $? ($((SECONDS - start)) s)"; tail -n 3 $OUT/racecheck_kernels.log
o=$OUT/torch; mkdir -p $o
QMOE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo main) timeout 100 tools/gpu_bench.sh $d $o \
  --models deepseek-v3-tp8,qwen3-30b-a3b,mixtral-8x7b,gpt-oss-120b --schemes nvfp4a16,mxfp4,w4a16_g32 \
  --tokens 4096,8192 --rotations 2 --replays 5 > $o/tail.txt 2>&1
echo "torch rc $? ($((SECONDS - start)) s)"; grep -h "| auto |\|^| model" $o/results.md
tar czf $OUT/logs.tgz -C $OUT torch fast_paths.log racecheck_kernels.log && rm -rf $OUT/torch
