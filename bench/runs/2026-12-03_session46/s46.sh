#!/usr/bin/env bash
# The forty-sixth session's device calls (run from the repository root on the H200). Builds come in
# ROOT/packs.tar.xz (tools/gpu_pack.sh): m = main `a9f8d73`, w = branch wip/int4-tile-scales (INT4
# with groups of a multiple of 64 and per-row scales in the wide layouts: one scale word per thread
# quad and k-tile; MXFP4's ring depths on the narrow tiles), qmoe and tests each.
# Parts, in the order given:
#   wide    w's INT4 register-kernel, W4 prefill, edge and repacked-copy tests, then m against w, two
#           rounds: W4A16 g128 and asymmetric g128, automatic path, 28-8192 tokens on Mixtral-8x7B,
#           DeepSeek-V3, Qwen3-30B-A3B and DeepSeek-V3 TP8; then Mixtral-8x7B W4A16 g128 at 4096 /
#           8192 sustained (400 replays, issue 4's 650 TFLOP/s), both builds
#   v43     (pack .gpu/s57: m = main, v = branch wip/int4-wide-43: w's wide layouts with INT4's own
#           ring depths, 4 / 3 stages on the 32 / 64-row tiles) as wide, on fewer token counts
#   zero    (pack .gpu/s58: m = main, x = branch wip/int4-wide-zero: the wide layout for zero points
#           only, 4 / 3 stages) x's tests, then m against x, two rounds: W4A16 asymmetric g128 on
#           three shapes at 28-8192 tokens, symmetric g128 controls (the same kernels in both)
#   layer   (pack .gpu/s59: y = main after the merge, with W4Prefill's asymmetric g128 / per-row layer
#           cases) BIN's W4 prefill and INT4 register-kernel tests
#   race    racecheck, then synccheck, of BIN's register-kernel tests (sanitizer subset; RACE_FILTER,
#           default Int4Mainloop.*)
#   suite   the GPU suite on BIN (tools/gpu_test.sh, tests part), then BIN's automatic path at 1 and
#           64 tokens on three shapes, three 4-bit formats
#   sanit   racecheck (API, routing, grouping), then memcheck (the small tests) on BIN (tools/gpu_test.sh)
set -u
root=${ROOT:-.gpu/s56}
b=${BIN:-w}
o=$OUT/s46; mkdir -p $o
start=$SECONDS
tools/gpu_unpack.sh $root
bench() {  # label build model tokens schemes paths
  (( SECONDS - start > ${LIMIT:-500} )) && { echo "skip $1 $2"; return; }
  LD_LIBRARY_PATH=$PWD/$root/$2 timeout 120 $root/$2/qmoe bench --rotations 2 --replays ${REPLAYS:-5} --max-tokens 8192 \
    --models $3 --tokens $4 --schemes $5 --gemm-paths $6 > $o/$1.$2.log 2>&1
  echo "$1 $2 rc $? ($((SECONDS - start)) s)"
}
tests() {  # build filter [env...]
  local b=$1 f=$2; shift 2
  env "$@" QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$root/$b timeout 150 $root/$b/qmoe_cuda_tests \
    --gtest_filter="$f" > $o/tests_$b.log 2>&1
  echo "tests $b rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/tests_$b.log
}
for part in "$@"; do
  case $part in
    wide)
      tests w 'Int4Mainloop.*:W4Prefill.*:RandomLayerEdges.*:RepackedCopy.*'
      grep -q "^\[  PASSED" $o/tests_w.log || { echo "w's tests did not pass: no A/B"; continue; }
      for r in 1 2; do
        for n in m w; do
          s=w4a16_g128,w4a16_asym_g128
          bench wmix_r$r $n mixtral-8x7b 28,64,128,256,448,1024,4096,8192 $s auto
          bench wds_r$r $n deepseek-v3 256,512,1024,2048,4096,8192 $s auto
          bench wq3_r$r $n qwen3-30b-a3b 128,512,2048,8192 $s auto
          bench wdst_r$r $n deepseek-v3-tp8 320,1024,4096 w4a16_g128 auto
        done
      done
      for n in m w; do LIMIT=560 REPLAYS=400 bench wsus $n mixtral-8x7b 4096,8192 w4a16_g128 auto; done ;;
    v43)
      tests v 'Int4Mainloop.*:W4Prefill.*:RandomLayerEdges.*:RepackedCopy.*'
      grep -q "^\[  PASSED" $o/tests_v.log || { echo "v's tests did not pass: no A/B"; continue; }
      for r in 1 2; do
        for n in m v; do
          s=w4a16_g128,w4a16_asym_g128
          bench vmix_r$r $n mixtral-8x7b 28,64,128,256,448,4096,8192 $s auto
          bench vds_r$r $n deepseek-v3 256,512,1024,2048,8192 $s auto
          bench vq3_r$r $n qwen3-30b-a3b 128,512,8192 $s auto
          bench vdst_r$r $n deepseek-v3-tp8 320,1024 w4a16_g128 auto
        done
      done
      for n in m v; do LIMIT=560 REPLAYS=400 bench vsus $n mixtral-8x7b 4096,8192 w4a16_g128 auto; done ;;
    zero)
      tests x 'Int4Mainloop.*:W4Prefill.*:RandomLayerEdges.*:RepackedCopy.*'
      grep -q "^\[  PASSED" $o/tests_x.log || { echo "x's tests did not pass: no A/B"; continue; }
      for r in 1 2; do
        for n in m x; do
          bench zmix_r$r $n mixtral-8x7b 28,64,128,256,448,1024,4096,8192 w4a16_asym_g128 auto
          bench zds_r$r $n deepseek-v3 512,1024,2048,4096,8192 w4a16_asym_g128 auto
          bench zq3_r$r $n qwen3-30b-a3b 128,512,2048,8192 w4a16_asym_g128 auto
          bench zctl_r$r $n mixtral-8x7b 64,4096 w4a16_g128 auto
        done
      done ;;
    layer)
      tests $b 'W4Prefill.*:Int4Mainloop.*' ;;
    race)
      QMOE_TEST_SANITIZER_SUBSET=1 QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$root/$b \
        timeout ${RACE_S:-200} compute-sanitizer --tool racecheck $root/$b/qmoe_cuda_tests \
        --gtest_filter="${RACE_FILTER:-Int4Mainloop.*}" > $o/kernel_race.log 2>&1
      echo "racecheck rc $? ($((SECONDS - start)) s)"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" $o/kernel_race.log
      QMOE_TEST_SANITIZER_SUBSET=1 QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$root/$b \
        timeout ${SYNC_S:-100} compute-sanitizer --tool synccheck --error-exitcode 9 $root/$b/qmoe_cuda_tests \
        --gtest_filter="${RACE_FILTER:-Int4Mainloop.*}" > $o/synccheck.log 2>&1
      echo "synccheck rc $? ($((SECONDS - start)) s)"; grep -E "ERROR SUMMARY|PASSED|FAILED" $o/synccheck.log ;;
    suite)
      QMOE_GPU_TEST_PARTS=tests timeout $((590 - SECONDS)) tools/gpu_test.sh $root/$b $o/suite > $o/suite.log 2>&1
      echo "suite rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST|^\[==" $o/suite/gpu_tests.log | tail -8
      bench status $b mixtral-8x7b,deepseek-v3,qwen3-30b-a3b 1,64 w4a16_g128,mxfp4,nvfp4a16 auto ;;
    sanit)
      QMOE_GPU_TEST_PARTS=racecheck timeout 200 tools/gpu_test.sh $root/$b $o/sanit_race > $o/sanit_race.log 2>&1
      echo "racecheck rc $? ($((SECONDS - start)) s)"; tail -4 $o/sanit_race.log
      QMOE_GPU_TEST_PARTS=memcheck timeout $((${END:-580} - SECONDS)) tools/gpu_test.sh $root/$b $o/sanit_mem > $o/sanit_mem.log 2>&1
      echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -4 $o/sanit_mem.log
      grep -hE "^\[  (PASSED|FAILED)|FAILED TEST|^\[==" $o/sanit_race/racecheck.log $o/sanit_mem/memcheck.log | tail -8 ;;
  esac
done
tar czf $OUT/s46_$(IFS=_; echo "$*").tgz -C $OUT s46 && rm -rf $o
