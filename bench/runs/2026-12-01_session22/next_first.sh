#!/usr/bin/env bash
# For the next session (not run yet), call 1 of 2, on main's build in .gpu/n (qmoe, qmoe_cuda_tests,
# libfmt.so.9; xz): the whole GPU suite with the sanitizers (~310 s), then the fixed bench (9688ba7)
# against torch on the shapes whose GEMM µs this session measured too low (~200 s).
set -u
d=.gpu/n; xz -d $d/*.xz; chmod +x $d/qmoe $d/qmoe_cuda_tests
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
tools/gpu_test.sh $d $OUT/suite > $OUT/suite_tail.txt 2>&1; echo "suite rc $? ($((SECONDS - start)) s)"
grep -hE "^\[  (PASSED|FAILED)|SUMMARY|FAILED" $OUT/suite/*.log | head
o=$OUT/torch; mkdir -p $o
QMOE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo main) timeout 250 tools/gpu_bench.sh $d $o \
  --models deepseek-v3-tp8,kimi-k2-tp8,qwen3-30b-a3b,gpt-oss-120b --schemes nvfp4a16,mxfp4,w4a16_g32 \
  --tokens 512,2048,4096 --rotations 2 --replays 5 > $o/tail.txt 2>&1
echo "torch rc $? ($((SECONDS - start)) s)"; grep -h "| auto |\|^| model" $o/results.md
tar czf $OUT/logs.tgz -C $OUT suite torch
