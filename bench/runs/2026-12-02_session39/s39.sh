#!/usr/bin/env bash
# Device calls of the thirty-ninth session, carry [".gpu/y"] (branch wip/hybrid-chained `5421645`:
# main + wip/route-topk with the teams at the block's barrier + the chained hybrid).
#   s39.sh check   racecheck of the routing and grouping tests, memcheck of them and the hybrid
#                  test, then the GPU test set of next_first.sh tests
#   s39.sh route   ncu of route_and_group at 1/4/8 tokens (Qwen3-30B-A3B, DeepSeek-V3, Kimi-K2 TP8)
#                  and the uniform layer rounds of next_first.sh route
# From branch wip/narrow-regs (`.gpu/y` rebuilt; `.gpu/m`: main's qmoe as of `7f1de5c`, whose hybrid default
# was on: the ab part runs both with QMOE_HYBRID_ROWS=0, main's behaviour since `a665719`):
#   s39.sh narrow  the register kernel's tests (every tile, 32 and 64 input rows new), then its
#                  32 / 64 / 128-row tiles forced (prefill:4 / :5 / :2) against the automatic path
#                  at 8-64 rows per expert, layers loaded for 8192 tokens
#   s39.sh ab      main vs the branch, automatic path, 1-8 tokens (the routing teams), two rounds
set -u
d=.gpu/${BIN:-y}; tools/gpu_unpack.sh $d .gpu/m
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
o=$OUT/s; mkdir -p $o
start=$SECONDS
case ${1:-} in
  check)
    timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $d/qmoe_cuda_tests \
      --gtest_filter='CudaRouting.*:CudaGrouping.*' > $o/racecheck.log 2>&1
    echo "racecheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/racecheck.log
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $d/qmoe_cuda_tests \
      --gtest_filter='CudaRouting.*:CudaGrouping.*:RandomLayerEdges.HybridRunsBusyExpertsOnTheRegisterKernel' > $o/memcheck.log 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; grep -E "PASSED|FAILED" $o/memcheck.log; tail -1 $o/memcheck.log
    f='CudaRouting.*:CudaGrouping.*:RandomLayerEdges.*:Formats/RandomLayers.*:ChainedLaunches.*:CudaMoeLayerApi.*:CudaFixtures.*'
    timeout 240 $d/qmoe_cuda_tests --gtest_filter="$f" > $o/tests.log 2>&1
    echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/tests.log ;;
  route)
    for m in qwen3-30b-a3b deepseek-v3 kimi-k2-tp8; do
      for t in 1 4 8; do
        timeout 60 ncu --clock-control none --cache-control none --section SpeedOfLight --launch-skip 12 --launch-count 7 \
          -k regex:'route_and_group' $d/qmoe bench --models $m --schemes fp8_channel --tokens $t --rotations 1 \
          --replays 3 2>&1 | grep -E "Duration" > $o/ncu_${m}_$t.txt
        echo "$m $t: $(awk '{print $3}' $o/ncu_${m}_$t.txt | tr '\n' ' ')"
      done
    done
    for r in 1 2; do
      timeout 60 $d/qmoe bench --rotations 2 --replays 5 --schemes w4a16_g128,fp8_channel \
        --models qwen3-30b-a3b,mixtral-8x7b,deepseek-v3,kimi-k2-tp8 --tokens 1,8,64 > $o/uni_r$r.log 2>&1
      echo "uniform r$r rc $? ($((SECONDS - start)) s)"
    done ;;
  narrow)
    f='Fp4Mainloop.*:Int4Mainloop.*:PrefillKernels.EveryTileMatchesTheCpuBackend:W4Prefill.*'
    timeout 200 $d/qmoe_cuda_tests --gtest_filter="$f" > $o/narrow_tests.log 2>&1
    echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/narrow_tests.log
    grep -h "Failure" -A6 $o/narrow_tests.log | head -20
    nb() {  # models tokens
      (( SECONDS - start > 500 )) && { echo "skip $1"; return; }
      timeout 120 $d/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 --gemm-paths auto,prefill:4,prefill:5,prefill:2 \
        --models $1 --schemes w4a16_g128,mxfp4,nvfp4a16 --tokens $2 > $o/narrow_$1.log 2>&1
      echo "$1 rc $? ($((SECONDS - start)) s)"
    }
    nb mixtral-8x7b 1,8,32,64,128,192,256
    nb qwen3-30b-a3b 128,256,512,768,1024
    nb deepseek-v3 1,8,256,512,1024,1536,2048
    nb gpt-oss-120b 256,512,1024,1536,2048 ;;
  ab)
    for r in 1 2; do
      for b in m y; do
        QMOE_HYBRID_ROWS=0 LD_LIBRARY_PATH=$PWD/.gpu/$b timeout 60 .gpu/$b/qmoe bench --rotations 2 --replays 5 --schemes w4a16_g128,fp8_channel \
          --models qwen3-30b-a3b,mixtral-8x7b,deepseek-v3,kimi-k2-tp8 --tokens 1,2,4,8 > $o/ab_r$r.$b.log 2>&1
        echo "ab r$r $b rc $? ($((SECONDS - start)) s)"
      done
    done ;;
  verify)  # (.gpu/y at `7381558`: the planner's narrow tiles and switches)
    f='PrefillKernels.*:W4Prefill.*:RandomLayers*:RepackedCopy.*:CudaMoeLayerApi.*:RandomLayerEdges.*'
    timeout 400 $d/qmoe_cuda_tests --gtest_filter="$f" > $o/verify_tests.log 2>&1
    echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/verify_tests.log
    grep -h "Failure" -A6 $o/verify_tests.log | head -20 ;;
  ab2)  # carry [".gpu/yq", ".gpu/m"]: main vs the branch's automatic path, two rounds, then 1-8 tokens
    tools/gpu_unpack.sh .gpu/yq
    run() {  # label binary models schemes tokens
      (( SECONDS - start > 540 )) && { echo "skip $1 $2"; return; }
      QMOE_HYBRID_ROWS=0 LD_LIBRARY_PATH=$PWD/.gpu/$2 timeout 150 .gpu/$2/qmoe bench --rotations 2 --replays 5 \
        --models $3 --schemes $4 --tokens $5 > $o/$1.$2.log 2>&1
      echo "$1 $2 rc $? ($((SECONDS - start)) s)"
    }
    for b in m yq; do run dec $b qwen3-30b-a3b,mixtral-8x7b,deepseek-v3,kimi-k2-tp8 w4a16_g128,fp8_channel 1,2,4,8; done
    w=mxfp4,nvfp4a16,w4a16_g32
    for r in 1 2; do
      for b in m yq; do
        run mix_r$r $b mixtral-8x7b $w 8,48,64,96,128,192
        run q3_r$r $b qwen3-30b-a3b $w 192,256,384,512,768
        run oss_r$r $b gpt-oss-120b mxfp4,nvfp4a16 384,512,768,1024,1536
        run ds_r$r $b deepseek-v3 $w 384,512,768,1024,1536
      done
    done
 ;;
  route2)  # .gpu/y at the one-warp-per-token commit: routing tests, racecheck, memcheck
    timeout 200 $d/qmoe_cuda_tests --gtest_filter='CudaRouting.*:CudaGrouping.*:ChainedLaunches.*:RandomLayerEdges.*' > $o/route2_tests.log 2>&1
    echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/route2_tests.log
    timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 $d/qmoe_cuda_tests \
      --gtest_filter='CudaRouting.*:CudaGrouping.*' > $o/route2_racecheck.log 2>&1
    echo "racecheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/route2_racecheck.log
    timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $d/qmoe_cuda_tests \
      --gtest_filter='CudaRouting.*:CudaGrouping.*' > $o/route2_memcheck.log 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/route2_memcheck.log ;;
  ab3)  # carry [".gpu/yb", ".gpu/m"]: main vs one warp per token from 3 tokens, 1-8 tokens, two rounds
    tools/gpu_unpack.sh .gpu/yb
    for r in 1 2; do
      for b in m yb; do
        QMOE_HYBRID_ROWS=0 LD_LIBRARY_PATH=$PWD/.gpu/$b timeout 60 .gpu/$b/qmoe bench --rotations 2 --replays 5 \
          --models qwen3-30b-a3b,mixtral-8x7b,deepseek-v3,kimi-k2-tp8 --schemes w4a16_g128,fp8_channel \
          --tokens 1,2,4,8 > $o/dec_r$r.$b.log 2>&1
        echo "dec r$r $b rc $? ($((SECONDS - start)) s)"
      done
    done ;;
  twocta)  # branch wip/narrow-2cta: the 32- and 64-row tiles at two CTAs per SM
    f='Fp4Mainloop.*:Int4Mainloop.*:PrefillKernels.EveryTileMatchesTheCpuBackend:W4Prefill.*'
    timeout 200 $d/qmoe_cuda_tests --gtest_filter="$f" > $o/twocta_tests.log 2>&1
    echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/twocta_tests.log
    grep -h "Failure" -A6 $o/twocta_tests.log | head -20
    nb() {  # models tokens
      (( SECONDS - start > 250 )) && { echo "skip $1"; return; }
      timeout 100 $d/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 --gemm-paths auto,prefill:4,prefill:5 \
        --models $1 --schemes w4a16_g128,mxfp4,nvfp4a16 --tokens $2 > $o/twocta_$1.log 2>&1
      echo "$1 rc $? ($((SECONDS - start)) s)"
    }
    nb mixtral-8x7b 1,32,64,96,128
    nb qwen3-30b-a3b 256,384
    nb gpt-oss-120b 512,768
    nb deepseek-v3 512,768 ;;
  *) echo "s39.sh: check, route, narrow, ab, verify, ab2, route2, ab3 or twocta"; exit 2 ;;
esac
tar czf $OUT/s_$1.tgz -C $OUT s && rm -rf $o
