#!/usr/bin/env bash
# For the next session (not run), carry [".gpu/y"]: branch wip/hybrid-chained (`4fe6304`; .gpu/y
# was built at `89b69d8`, which differs by the README only), which is main plus branch
# wip/route-topk (the routing of decode batches by teams of warps, picks on order keys with warp
# reductions) plus the hybrid's forward chained, its gather of the busy rows only and
# `qmoe bench --max-tokens`. Rebuild and repack .gpu/y from that branch if .gpu/ did not survive:
#   d=.gpu/y; mkdir -p $d; cp build-cuda/qmoe build-cuda/tests/qmoe_cuda_tests \
#     $(ldd build-cuda/qmoe | awk '/libfmt/{print $3}') $d; strip $d/qmoe $d/qmoe_cuda_tests; xz -9 -T2 $d/*
#   next_first.sh tests   the routing test (new cases: 1-3 tokens, 512 experts, top-k of all 32,
#                         Llama-4 top-3, -0 / +0 ties), the grouping test, the hybrid test (now also
#                         chained against plain, bit for bit), the random-layer, chained-launch, API
#                         and fixture tests; memcheck and racecheck of the routing and grouping tests
#                         and memcheck of the hybrid test
#   next_first.sh route   ncu (warm caches) of route_and_group and the forward's other kernels at 1,
#                         2, 4 and 8 tokens on Qwen3-30B-A3B, DeepSeek-V3 and Kimi-K2 TP8 (FP8
#                         channel), against this session's 10.2 / 12.3 / 14.7 µs at 1 token
#                         (route_profile/); then layer µs at 1-8 tokens (against final/'s a rounds,
#                         not the same call)
#   next_first.sh hybrid  layers loaded for 8192 tokens (--max-tokens): QMOE_HYBRID_ROWS 0 / 32 under
#                         skewed and mild routing at 32 / 128 tokens (five shapes) and under uniform
#                         routing at 4-64 tokens (the hybrid's cost where no expert is busy), two
#                         rounds as time allows, then 64 skewed; pick a default (or a shape rule)
# Merge wip/route-topk (then wip/hybrid-chained) if the tests pass and the routing is faster.
set -u
d=.gpu/${BIN:-y}; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
o=$OUT/n; mkdir -p $o
start=$SECONDS
part=${1:-}
case $part in
  tests)
    f='CudaRouting.*:CudaGrouping.*:RandomLayerEdges.*:Formats/RandomLayers.*:ChainedLaunches.*:CudaMoeLayerApi.*:CudaFixtures.*'
    timeout 240 $d/qmoe_cuda_tests --gtest_filter="$f" > $o/tests.log 2>&1
    echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/tests.log
    grep -h "Failure" -A8 $o/tests.log | head -30; grep -h "hybrid" $o/tests.log | head -6
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $d/qmoe_cuda_tests \
      --gtest_filter='CudaRouting.*:CudaGrouping.*:RandomLayerEdges.HybridRunsBusyExpertsOnTheRegisterKernel' > $o/memcheck.log 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/memcheck.log
    timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $d/qmoe_cuda_tests \
      --gtest_filter='CudaRouting.*:CudaGrouping.*' > $o/racecheck.log 2>&1
    echo "racecheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/racecheck.log ;;
  route)
    for m in qwen3-30b-a3b deepseek-v3 kimi-k2-tp8; do
      for t in 1 2 4 8; do
        (( SECONDS - start > 300 )) && { echo "skip $m $t"; continue; }
        echo "== $m fp8_channel $t tokens"
        timeout 60 ncu --clock-control none --cache-control none --section SpeedOfLight --launch-skip 12 --launch-count 7 \
          -k regex:'route_and_group|convert|activation|quant|grouped_mma|combine' $d/qmoe bench --models $m \
          --schemes fp8_channel --tokens $t --rotations 1 --replays 3 2>&1 | grep -E "^  [a-z_ ]+.*\(|Duration" |
          sed -E 's/\(GroupedGemmParams.*\) \(/ (/; s/, Context.*//' | tee $o/ncu_${m}_$t.txt | paste - - | cut -c1-160
      done
    done
    for r in 1 2; do
      timeout 60 $d/qmoe bench --rotations 2 --replays 5 --schemes w4a16_g128,fp8_channel \
        --models qwen3-30b-a3b,mixtral-8x7b,deepseek-v3,kimi-k2-tp8 --tokens 1,8,64 > $o/uni_r$r.log 2>&1
      echo "uniform r$r rc $? ($((SECONDS - start)) s)"
    done ;;
  hybrid)
    # (in order of value, each bench call ~20-60 s with the layers' load: skewed, mild, uniform at
    # 0 / 32, a second round, then 64)
    bench() {  # label threshold routing tokens models
      (( SECONDS - start > 480 )) && { echo "skip $1"; return; }
      QMOE_HYBRID_ROWS=$2 timeout 90 $d/qmoe bench --rotations 2 --replays 5 --routing $3 --max-tokens 8192 \
        --models $5 --schemes w4a16_g32,nvfp4a16 --tokens $4 > $o/$1.log 2>&1
      echo "$1 rc $? ($((SECONDS - start)) s)"
    }
    big=deepseek-v3,gpt-oss-120b,mixtral-8x7b; small=qwen3-30b-a3b,deepseek-v3-tp8
    for r in 1 2; do
      for h in 0 32; do bench skewed_r$r.h$h $h skewed 32,128 $big,$small; done
      for h in 0 32; do bench mild_r$r.h$h $h mild 32,128 $big,$small; done
      for h in 0 32; do bench uniform_r$r.h$h $h uniform 4,16,64 $big; done
    done
    bench skewed_r1.h64 64 skewed 32,128 $big,$small ;;
  *) echo "next_first.sh: tests, route or hybrid"; exit 2 ;;
esac
tar czf $OUT/n_$part.tgz -C $OUT n && rm -rf $o
