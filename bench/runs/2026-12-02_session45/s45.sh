#!/usr/bin/env bash
# The forty-fifth session's device calls (run from the repository root on the H200). Builds come in
# ROOT/packs.tar.xz (tools/gpu_pack.sh): m = main `633d4f9` (the merge of wip/g128-regs; the build
# of its branch, the same binaries), r = branch wip/mxfp4-ring5 (MXFP4's 32-row tile with 5 stages of four,
# the other formats' as main's).
# Parts, in the order given:
#   r5      r's register-kernel, W4 prefill and random-layer edge tests, then m against r, two
#           rounds: MXFP4 on the 32-row tile (forced and automatic) at 8-24 rows per expert on four
#           shapes, NVFP4 / W4A16 g128 controls (the same kernels in both builds)
#   sw      r's MXFP4 decode, 32- and 64-row tiles and automatic path where its switches lie (5-8 and
#           24-32 rows per expert), one round
#   suite   (pack .gpu/s55: f = main `72d3cc7`) the GPU suite on BIN (tools/gpu_test.sh, tests part),
#           then f's automatic path at 1 and 64 tokens on three shapes, three 4-bit formats
#   wide    (next session; pack .gpu/s56: m = main, w = branch wip/int4-tile-scales: INT4 with groups
#           of a multiple of 64 in the wide layouts, one scale word per k-tile, and MXFP4's ring
#           depths) w's INT4 register-kernel, W4 prefill, edge and repacked-copy tests, then m
#           against w, two rounds: W4A16 g128 and asymmetric g128, automatic path, 28-8192 tokens on
#           Mixtral-8x7B, DeepSeek-V3, Qwen3-30B-A3B and DeepSeek-V3 TP8; then Mixtral-8x7B W4A16
#           g128 at 4096 / 8192 sustained (400 replays, issue 4's 650 TFLOP/s); then BIN=w race
#   race    racecheck, then synccheck, of r's register-kernel tests (sanitizer subset); BIN=x: x's;
#           RACE_FILTER: other tests (default Fp4Mainloop.*)
#   r64     (pack .gpu/s54: m = main `ef404b2`, r's kernels; x = branch wip/mxfp4-64-four, MXFP4's
#           64-row tile with 4 stages of four) x's tests as r5's, then m against x, two rounds:
#           MXFP4 on the 64-row tile (forced and automatic) at 28-56 rows per expert on four shapes,
#           NVFP4 controls; then x's 32-, 64- and 128-row tiles at the switches (26-28, 56-64 rows),
#           one round
set -u
root=${ROOT:-.gpu/s53}
b=${BIN:-r}
o=$OUT/s45; mkdir -p $o
start=$SECONDS
tools/gpu_unpack.sh $root
bench() {  # label build model tokens schemes paths
  (( SECONDS - start > ${LIMIT:-540} )) && { echo "skip $1 $2"; return; }
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
    r5)
      tests r 'Fp4Mainloop.*:W4Prefill.*:RandomLayerEdges.*:RepackedCopy.*'
      for r in 1 2; do
        for n in m r; do
          bench amix_r$r $n mixtral-8x7b 40,48,64,96 mxfp4 auto,prefill:4
          bench ads_r$r $n deepseek-v3 320,384,512,768 mxfp4 auto,prefill:4
          bench aoss_r$r $n gpt-oss-120b 256,384,512,768 mxfp4 auto,prefill:4
          bench aq3_r$r $n qwen3-30b-a3b 128,256,384 mxfp4 auto,prefill:4
          bench cmix_r$r $n mixtral-8x7b 48,64 nvfp4a16,w4a16_g128 auto
        done
      done ;;
    sw)
      bench smix r mixtral-8x7b 20,24,28,32,96,104,112,120,128 mxfp4 auto,decode,prefill:4,prefill:5
      bench sds r deepseek-v3 160,192,224,256,832,896,960,1024 mxfp4 auto,decode,prefill:4,prefill:5
      bench soss r gpt-oss-120b 160,192,224,256,832,896,960,1024 mxfp4 auto,decode,prefill:4,prefill:5
      bench sq3 r qwen3-30b-a3b 80,96,112,128,416,448,480,512 mxfp4 auto,decode,prefill:4,prefill:5 ;;
    r64)
      tests x 'Fp4Mainloop.*:W4Prefill.*:RandomLayerEdges.*:RepackedCopy.*'
      for r in 1 2; do
        for n in m x; do
          bench bmix_r$r $n mixtral-8x7b 112,128,160,192,224 mxfp4 auto,prefill:5
          bench bds_r$r $n deepseek-v3 896,1024,1280,1536,1792 mxfp4 auto,prefill:5
          bench boss_r$r $n gpt-oss-120b 896,1280,1792 mxfp4 auto,prefill:5
          bench bq3_r$r $n qwen3-30b-a3b 448,640,896 mxfp4 auto,prefill:5
          bench dmix_r$r $n mixtral-8x7b 128,192 nvfp4a16 auto
        done
      done
      bench tmix x mixtral-8x7b 104,112,224,232,240,256 mxfp4 auto,prefill:4,prefill:5,prefill:2
      bench tds x deepseek-v3 832,896,1792,1856,1920,2048 mxfp4 auto,prefill:4,prefill:5,prefill:2
      bench toss x gpt-oss-120b 832,896,1792,1920,2048 mxfp4 auto,prefill:4,prefill:5,prefill:2 ;;
    suite)
      QMOE_GPU_TEST_PARTS=tests timeout $((590 - SECONDS)) tools/gpu_test.sh $root/$b $o/suite > $o/suite.log 2>&1
      echo "suite rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST|^\[==" $o/suite/gpu_tests.log | tail -8
      bench status $b mixtral-8x7b,deepseek-v3,qwen3-30b-a3b 1,64 w4a16_g128,mxfp4,nvfp4a16 auto ;;
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
      for n in m w; do REPLAYS=400 bench wsus $n mixtral-8x7b 4096,8192 w4a16_g128 auto; done ;;
    race)
      QMOE_TEST_SANITIZER_SUBSET=1 QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$root/$b \
        timeout ${RACE_S:-250} compute-sanitizer --tool racecheck $root/$b/qmoe_cuda_tests \
        --gtest_filter="${RACE_FILTER:-Fp4Mainloop.*}" > $o/kernel_race.log 2>&1
      echo "racecheck rc $? ($((SECONDS - start)) s)"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" $o/kernel_race.log
      QMOE_TEST_SANITIZER_SUBSET=1 QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$root/$b \
        timeout ${SYNC_S:-100} compute-sanitizer --tool synccheck --error-exitcode 9 $root/$b/qmoe_cuda_tests \
        --gtest_filter="${RACE_FILTER:-Fp4Mainloop.*}" > $o/synccheck.log 2>&1
      echo "synccheck rc $? ($((SECONDS - start)) s)"; grep -E "ERROR SUMMARY|PASSED|FAILED" $o/synccheck.log ;;
  esac
done
tar czf $OUT/s45_$(IFS=_; echo "$*").tgz -C $OUT s45 && rm -rf $o
