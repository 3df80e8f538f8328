#!/usr/bin/env bash
# The forty-third session's device calls (run from the repository root on the H200). Builds come in
# ROOT/packs.tar.xz (tools/gpu_pack.sh); the suite and racecheck parts are s42.sh's (same ROOT, BIN).
# Builds: d2 (.gpu/s45) = branch wip/narrow-deep-stages `df4a1a2`, whose code main's merge `b0815fa`
# holds; in .gpu/s46, m = the same build and w = branch wip/deep-128 (the 128-row tile's bf16 formats
# stage two k-tiles a stage; qmoe and tests) and w4 = branch wip/deep-128-4 (the same, 4 two-deep stages
# where w has 3), ni = branch wip/probe-no-inputs (qmoe only; the narrow tiles load no inputs: wrong
# results, timing only: what the inputs' L2 traffic costs them), mc = branch wip/narrow-multicast
# (the narrow tiles in CTA pairs multicasting the input rows; qmoe and tests). Planned for the next
# session (ROOT=.gpu/s47): m = main `d65df7d`, o = the same kernel with the switches before `a157ab6`
# (the `w4` build), d4 = branch wip/narrow-depth4 (four k-tiles a stage on the narrow tiles; qmoe
# and tests).
# Parts, in the order given:
#   synccheck   compute-sanitizer synccheck of the register kernel's tests (sanitizer subset) on BIN
#   paths       BIN's decode, 32-row tile and automatic path for MXFP4 and INT4 (g32, asymmetric g128)
#               at 6-13 rows per expert on five shapes (the decode switches after the deep stages)
#   tiles       BIN's 32-, 64- and 128-row tiles and automatic path at 20-32 and 48-64 rows per expert
#               (their switches, 26 and 56)
#   ktests      the register kernel's tests (Fp4Mainloop, Int4Mainloop) of each build in NEW (default "w w4 mc")
#   ab128       m against each build in NEW (default "w w4"), rounds in ROUNDS (default 2): the automatic
#               path and the forced 128-row tile at 56-118 rows per expert (the 128-row tile's range)
#   verify      o against m, two rounds: the automatic path where `a157ab6`'s switches moved (MXFP4
#               at 8 and 10 rows per expert, INT4 at 9, MXFP4 / NVFP4 at 26) and a row either side
#   abn         the kernel tests of each build in NEW (default d4), then m against them, two rounds:
#               the 32- and 64-row tiles forced and the automatic path, three 4-bit formats
#   probe       m against ni and mc (mc only where its tests passed), two rounds: the 32- and 64-row
#               tiles forced, three 4-bit formats
set -u
root=${ROOT:-.gpu/s46}
o=$OUT/s43; mkdir -p $o
start=$SECONDS
tools/gpu_unpack.sh $root
bench() {  # label build model tokens schemes paths
  (( SECONDS - start > ${LIMIT:-540} )) && { echo "skip $1 $2"; return; }
  LD_LIBRARY_PATH=$PWD/$root/$2 timeout 120 $root/$2/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 \
    --models $3 --tokens $4 --schemes $5 --gemm-paths $6 > $o/$1.$2.log 2>&1
  echo "$1 $2 rc $? ($((SECONDS - start)) s)"
}
b=${BIN:-m}
for part in "$@"; do
  case $part in
    synccheck)
      QMOE_TEST_SANITIZER_SUBSET=1 QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$root/$b \
        timeout ${SYNC_S:-300} compute-sanitizer --tool synccheck --error-exitcode 9 $root/$b/qmoe_cuda_tests \
        --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*:Int4Int8Mainloop.*' > $o/synccheck.log 2>&1
      echo "synccheck rc $? ($((SECONDS - start)) s)"; grep -E "ERROR SUMMARY|PASSED|FAILED" $o/synccheck.log ;;
    paths)
      s=mxfp4,w4a16_g32,w4a16_asym_g128
      bench pmix $b mixtral-8x7b 24,28,32,36,40,44,48,52 $s auto,decode,prefill:4
      bench pds $b deepseek-v3 192,224,256,288,320,352,384 $s auto,decode,prefill:4
      bench pq3 $b qwen3-30b-a3b 96,112,128,144,160,176,192 $s auto,decode,prefill:4
      bench poss $b gpt-oss-120b 192,224,256,288,320,352,384 mxfp4,w4a16_g32 auto,decode,prefill:4
      bench pdst $b deepseek-v3-tp8 224,256,288,320,352,384,416 $s auto,decode,prefill:4 ;;
    tiles)
      s=mxfp4,nvfp4a16,w4a16_g32
      bench tmix $b mixtral-8x7b 80,96,104,112,128,192,208,224,240,256 $s auto,prefill:4,prefill:5,prefill:2
      bench tds $b deepseek-v3 640,768,832,896,1024,1536,1664,1792,1920,2048 $s auto,prefill:4,prefill:5,prefill:2 ;;
    ktests)
      for n in ${NEW:-w w4 mc}; do
        QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$root/$n timeout 150 $root/$n/qmoe_cuda_tests \
          --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*:W4Prefill.*:RandomLayerEdges.*' > $o/tests_$n.log 2>&1
        echo "tests $n rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/tests_$n.log
      done ;;
    ab128)
      for r in $(seq ${ROUNDS:-2}); do
        for n in m ${NEW:-w w4}; do
          s=mxfp4,nvfp4a16,w4a16_g32,w4a16_g128
          bench amix_r$r $n mixtral-8x7b 256,320,384,448 $s auto,prefill:2
          bench ads_r$r $n deepseek-v3 2048,2560,3072,3584 $s auto
          bench aq3_r$r $n qwen3-30b-a3b 1024,1536,1792 $s auto
          bench aoss_r$r $n gpt-oss-120b 2048,3072 mxfp4,nvfp4a16 auto
        done
      done ;;
    verify)
      for r in 1 2; do
        for n in o m; do
          bench vmix_r$r $n mixtral-8x7b 28,32,36,40,100,104,108 mxfp4,nvfp4a16,w4a16_g32,w4a16_asym_g128 auto
          bench vds_r$r $n deepseek-v3 224,256,288,800,832,864 mxfp4,nvfp4a16 auto
          bench voss_r$r $n gpt-oss-120b 224,256,288 mxfp4 auto
          bench vq3_r$r $n qwen3-30b-a3b 112,128,144,160 mxfp4,w4a16_g32,w4a16_asym_g128 auto
          bench vdst_r$r $n deepseek-v3-tp8 288,320,352 mxfp4 auto
        done
      done ;;
    abn)
      for n in ${NEW:-d4}; do
        QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$root/$n timeout 150 $root/$n/qmoe_cuda_tests \
          --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*:W4Prefill.*:RandomLayerEdges.*' > $o/tests_$n.log 2>&1
        echo "tests $n rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/tests_$n.log
      done
      for r in 1 2; do
        for n in m ${NEW:-d4}; do
          [[ $n != m ]] && ! grep -q "^\[  PASSED" $o/tests_$n.log 2>/dev/null && continue
          bench nmix_r$r $n mixtral-8x7b 48,64,128 mxfp4,nvfp4a16,w4a16_g32 auto,prefill:4,prefill:5
          bench nds_r$r $n deepseek-v3 384,512 mxfp4,nvfp4a16,w4a16_g32 auto,prefill:4
          bench noss_r$r $n gpt-oss-120b 384,512 mxfp4,nvfp4a16 auto,prefill:4
          bench ndst_r$r $n deepseek-v3-tp8 384,512 mxfp4,w4a16_g32 auto,prefill:4
        done
      done ;;
    probe)
      for r in 1 2; do
        for n in m ni mc; do
          [[ $n == mc ]] && ! grep -q "^\[  PASSED" $o/tests_mc.log 2>/dev/null && continue
          bench pbmix_r$r $n mixtral-8x7b 64,128 mxfp4,nvfp4a16,w4a16_g32 prefill:4,prefill:5
          bench pbds_r$r $n deepseek-v3 512,1024 mxfp4,nvfp4a16,w4a16_g32 prefill:4,prefill:5
        done
      done ;;
  esac
done
tar czf $OUT/s43_$(IFS=_; echo "$*")_$b.tgz -C $OUT s43 && rm -rf $o
