#!/usr/bin/env bash
# Thirty-eighth session, last device call; carry [".gpu/w", ".gpu/base"]:
#   .gpu/w     main at this session's end: the hybrid merged, on by default for large experts
#              (default_hybrid_busy_rows), the grouping's scan in parallel, the combine's loads
#              batched, the routing's weights scaled in registers
#   .gpu/base  qmoe of branch wip/hybrid 5cef9c5 (main before this session plus the hybrid, which
#              QMOE_HYBRID_ROWS=0 turns off): the baseline
# Tests of what changed (new: CudaGrouping.ManyExpertsOnBothPaths), memcheck of the grouping and
# routing tests, then layer / GEMM µs of base (label a, hybrid off) and w (b, defaults) alternately,
# two rounds as time allows (racecheck of the grouping test between them): uniform 1 / 8 / 64
# tokens on five shapes, skewed and mild routing at 32 / 128 tokens on the shapes the default
# hybrid takes (512 runs the prefill kernels there).
set -u
tools/gpu_unpack.sh .gpu/w .gpu/base
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/.gpu/w
o=$OUT/f; mkdir -p $o
start=$SECONDS
f='CudaGrouping.*:CudaRouting.*:RandomLayerEdges.*:Formats/RandomLayers.*:ChainedLaunches.*:CudaMoeLayerApi.*:CudaFixtures.*'
timeout 220 .gpu/w/qmoe_cuda_tests --gtest_filter="$f" > $o/tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/tests.log
grep -h "Failure" -A8 $o/tests.log | head -30
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/w/qmoe_cuda_tests \
  --gtest_filter='CudaGrouping.*:CudaRouting.*' > $o/memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/memcheck.log
# (what a device call's time left allows: the rounds until ~400 s, racecheck between them)
for r in 1 2; do
  if (( r == 2 )); then
    timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 .gpu/w/qmoe_cuda_tests \
      --gtest_filter='CudaGrouping.*' > $o/racecheck.log 2>&1
    echo "racecheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/racecheck.log
  fi
  for l in a b; do
    (( SECONDS - start > 360 )) && { echo "skip r$r $l"; continue; }
    bin=$([[ $l == a ]] && echo .gpu/base/qmoe || echo .gpu/w/qmoe)
    env=$([[ $l == a ]] && echo QMOE_HYBRID_ROWS=0 || echo QMOE_UNSET=1)
    env $env timeout 60 $bin bench --rotations 2 --replays 5 --schemes w4a16_g128,fp8_channel \
      --models qwen3-30b-a3b,mixtral-8x7b,deepseek-v3,kimi-k2-tp8 --tokens 1,8,64 > $o/uni_r$r.$l.log 2>&1
    echo "uniform r$r $l rc $? ($((SECONDS - start)) s)"
    env $env timeout 30 $bin bench --rotations 2 --replays 5 --schemes mxfp4 --models gpt-oss-120b \
      --tokens 1,8,64 > $o/uni_oss_r$r.$l.log 2>&1
    echo "uniform gpt-oss r$r $l rc $? ($((SECONDS - start)) s)"
    for routing in skewed mild; do
      env $env timeout 60 $bin bench --rotations 2 --replays 5 --routing $routing \
        --models mixtral-8x7b,deepseek-v3,gpt-oss-120b --schemes w4a16_g32,nvfp4a16 \
        --tokens 32,128 > $o/${routing}_r$r.$l.log 2>&1
      echo "$routing r$r $l rc $? ($((SECONDS - start)) s)"
    done
  done
done
tar czf $OUT/final.tgz -C $OUT f && rm -rf $o
