#!/usr/bin/env bash
# The forty-fourth session's device calls (run from the repository root on the H200). Builds come in
# ROOT/packs.tar.xz (tools/gpu_pack.sh): d4 = branch wip/narrow-depth4 (four k-tiles a stage on the
# narrow tiles), whose kernel code main's merge `e5181d8` holds, with the planner switches before
# this session; n = main with this session's switches (the same kernels).
# Parts, in the order given:
#   low      BIN's decode and 32-row tile (and automatic path) where the crossings after the four-deep
#            stages were not measured yet: NVFP4 on five shapes at 4-8 rows per expert, MXFP4 and INT4
#            g32 below 6 rows, W4A16 g128 and asymmetric g128 on the short reduction at 6-10 rows
#   g128     g's repacked-copy, W4 prefill and layer API tests (g = branch wip/g128-regs, W4A16's
#            mixed-input range with the copy removed), then m against g, two rounds: W4A16 g128's
#            and asymmetric g128's automatic path at 7-24 rows per expert on three shapes. Pack
#            `.gpu/s51` (next session): m = main `3a3bbb5` (this session's switches), g = `faf0772`.
#   deep     the kernel tests of n5 (branch wip/narrow-32-5: the 32-row tile's ring 5 stages of four,
#            20 k-tiles) and df (branch wip/deep-128-four: the 128-row tile four-deep, 2 stages),
#            then m against each, two rounds: the 32- and 64-row tiles and the automatic path at
#            12-32 rows per expert, the 128-row tile and the automatic path at 64-118 (pack
#            `.gpu/s52`, in /work/gpu_stash/s52.tar.xz: m = main `3a3bbb5`'s kernels)
#   verify   d4 against n, two rounds: the automatic path at rows where the switches moved (decode to
#            the 32-row tile, INT4's 32 to 64 at 26 rows, 64 to 128 at 56-57)
set -u
root=${ROOT:-.gpu/s48}
o=$OUT/s44; mkdir -p $o
start=$SECONDS
tools/gpu_unpack.sh $root
bench() {  # label build model tokens schemes paths
  (( SECONDS - start > ${LIMIT:-540} )) && { echo "skip $1 $2"; return; }
  LD_LIBRARY_PATH=$PWD/$root/$2 timeout 120 $root/$2/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 \
    --models $3 --tokens $4 --schemes $5 --gemm-paths $6 > $o/$1.$2.log 2>&1
  echo "$1 $2 rc $? ($((SECONDS - start)) s)"
}
b=${BIN:-d4}
for part in "$@"; do
  case $part in
    low)
      p=auto,decode,prefill:4
      bench lmix $b mixtral-8x7b 16,20,24,28,32 nvfp4a16 $p
      bench lds $b deepseek-v3 128,160,192,224,256 nvfp4a16,mxfp4,w4a16_g32 $p
      bench loss $b gpt-oss-120b 128,160,192,224 nvfp4a16,mxfp4,w4a16_g32 $p
      bench lq3 $b qwen3-30b-a3b 64,80,96,112,128 nvfp4a16 $p
      bench ldst $b deepseek-v3-tp8 160,192,224,256,288,320 nvfp4a16,mxfp4,w4a16_g128,w4a16_asym_g128 $p ;;
    verify)
      for r in 1 2; do
        for n in d4 n; do
          bench vmix_r$r $n mixtral-8x7b 24,28,32,104,224,228 mxfp4,nvfp4a16,w4a16_g32,w4a16_asym_g128,w4a16_g128 auto
          bench vds_r$r $n deepseek-v3 160,192,224,256,832,1792,1824 mxfp4,nvfp4a16,w4a16_g32,w4a16_asym_g128 auto
          bench voss_r$r $n gpt-oss-120b 160,192,224,256 mxfp4,nvfp4a16,w4a16_g32 auto
          bench vq3_r$r $n qwen3-30b-a3b 80,96,112,128 mxfp4,nvfp4a16,w4a16_g32,w4a16_asym_g128 auto
          bench vdst_r$r $n deepseek-v3-tp8 192,224,256,288,320,352 mxfp4,nvfp4a16,w4a16_g32,w4a16_g128 auto
        done
      done ;;
    deep)
      for n in n5 df; do
        QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$root/$n timeout 150 $root/$n/qmoe_cuda_tests \
          --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*:W4Prefill.*:RandomLayerEdges.*' > $o/tests_$n.log 2>&1
        echo "tests $n rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/tests_$n.log
      done
      for r in 1 2; do
        for n in m n5 df; do
          [[ $n != m ]] && ! grep -q "^\[  PASSED" $o/tests_$n.log 2>/dev/null && continue
          s=mxfp4,nvfp4a16,w4a16_g32
          bench dmix_r$r $n mixtral-8x7b 48,64,96,256,320,448 $s auto,prefill:4,prefill:2
          bench dds_r$r $n deepseek-v3 384,768,2048,3072 $s auto,prefill:4,prefill:2
          bench doss_r$r $n gpt-oss-120b 512,2048 mxfp4,nvfp4a16 auto
          bench dq3_r$r $n qwen3-30b-a3b 256,1024,1792 $s auto
        done
      done ;;
    g128)
      QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$root/g timeout ${TESTS_S:-150} $root/g/qmoe_cuda_tests \
        --gtest_filter='RepackedCopy.*:W4Prefill.*:CudaMoeLayerApi.*' > $o/tests_g.log 2>&1
      echo "tests g rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST|SKIPPED" $o/tests_g.log
      for r in 1 2; do
        for n in m g; do
          bench gmix_r$r $n mixtral-8x7b 28,32,40,48,64,80,96,104 w4a16_g128,w4a16_asym_g128 auto
          bench gds_r$r $n deepseek-v3 224,256,320,384,512,640,768 w4a16_g128 auto
          bench gq3_r$r $n qwen3-30b-a3b 112,128,160,192,224 w4a16_g128 auto
        done
      done ;;
  esac
done
tar czf $OUT/s44_$(IFS=_; echo "$*")_$b.tgz -C $OUT s44 && rm -rf $o
