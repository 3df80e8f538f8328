#!/usr/bin/env bash
# The forty-seventh session's device calls (run from the repository root on the H200). Builds, in
# .gpu/s60/packs.tar.xz (tools/gpu_pack.sh): y = main (`d72e093`, whose kernels main still has), l2
# and l3 = branch wip/narrow-lag built with QMOE_NARROW_LAG 2 / 3 (the 32- and 64-row tiles'
# consumers leave 2 / 3 k-tiles' MMAs running while they convert the next; main: 1). Later calls:
# .gpu/s61 with y and k = branch wip/int4-lop3 (the INT4 register kernel's nibble pairs by one lop3
# each instead of an and and an or: 16 of a consumer's ~112 instructions per k-tile).
# Parts, in the order given:
#   lag    l3's and l2's register-kernel, W4 prefill and random-layer edge tests, then y, l3, l2
#          alternated over two rounds on the narrow tiles' token counts (automatic path; Mixtral-8x7B,
#          DeepSeek-V3, Qwen3-30B-A3B; W4A16 g128, NVFP4 A16, MXFP4)
#   lop3   (ROOT=.gpu/s61) k's register-kernel, W4 prefill, edge and repacked-copy tests, then y
#          against k, two rounds: W4A16 g128 and asymmetric g128, automatic path, three shapes
#   uniform  (prepared for the next session; ROOT=.gpu/s62: k = main's kernels, `e3c795c`; u = branch
#          wip/uniform-ring `e90cfcd`, the wgmma descriptors on the uniform datapath) u's register-kernel,
#          W4 prefill, edge and repacked-copy tests, then k against u, two rounds: W4A16 g128,
#          NVFP4 A16, MXFP4, automatic path, three shapes from the narrow tiles to 4096 tokens
#   sanit  racecheck (API, routing, grouping), then memcheck (the small tests) on y (tools/gpu_test.sh)
set -u
o=$OUT/s47; mkdir -p $o
start=$SECONDS
root=${ROOT:-.gpu/s60}
tools/gpu_unpack.sh $root
dir() { echo $root/$1; }
bench() {  # label build model tokens schemes
  (( SECONDS - start > ${LIMIT:-500} )) && { echo "skip $1 $2"; return; }
  local d; d=$(dir $2)
  LD_LIBRARY_PATH=$PWD/$d timeout 120 $d/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 \
    --models $3 --tokens $4 --schemes $5 --gemm-paths auto > $o/$1.$2.log 2>&1
  echo "$1 $2 rc $? ($((SECONDS - start)) s)"
}
tests() {  # build filter
  local d; d=$(dir $1)
  QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d timeout 150 $d/qmoe_cuda_tests \
    --gtest_filter="$2" > $o/tests_$1.log 2>&1
  echo "tests $1 rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/tests_$1.log
}
ab() {  # main change test_filter schemes: the change's tests, then two rounds of main against it
  tests $2 "$3"
  grep -q "^\[  PASSED" $o/tests_$2.log || { echo "$2's tests did not pass: no A/B"; return; }
  for r in 1 2; do
    for b in $1 $2; do
      bench ${2}mix_r$r $b mixtral-8x7b 28,64,128,256,1024,4096 $4
      bench ${2}ds_r$r $b deepseek-v3 512,1024,4096 $4
      bench ${2}q3_r$r $b qwen3-30b-a3b 256,512,2048 $4
    done
  done
}
for part in "$@"; do
  case $part in
    lag)
      builds=(y)
      for b in l3 l2; do
        tests $b 'Int4Mainloop.*:Fp4Mainloop.*:W4Prefill.*:RandomLayerEdges.*'
        grep -q "^\[  PASSED" $o/tests_$b.log && builds+=($b) || echo "$b's tests did not pass: not measured"
      done
      s=w4a16_g128,nvfp4a16,mxfp4
      for r in 1 2; do
        for b in "${builds[@]}"; do
          bench nmix_r$r $b mixtral-8x7b 28,64,96,128,192 $s
          bench nds_r$r $b deepseek-v3 512,1024,1536 $s
          bench nq3_r$r $b qwen3-30b-a3b 256,512,768 $s
        done
      done ;;
    lop3) ab y k 'Int4Mainloop.*:W4Prefill.*:RandomLayerEdges.*:RepackedCopy.*' w4a16_g128,w4a16_asym_g128 ;;
    uniform) ab k u 'Int4Mainloop.*:Fp4Mainloop.*:W4Prefill.*:RandomLayerEdges.*:RepackedCopy.*' w4a16_g128,nvfp4a16,mxfp4 ;;
    sanit)
      QMOE_GPU_TEST_PARTS=racecheck timeout 200 tools/gpu_test.sh $root/y $o/sanit_race > $o/sanit_race.log 2>&1
      echo "racecheck rc $? ($((SECONDS - start)) s)"; tail -4 $o/sanit_race.log
      QMOE_GPU_TEST_PARTS=memcheck timeout $((${END:-580} - SECONDS)) tools/gpu_test.sh $root/y $o/sanit_mem > $o/sanit_mem.log 2>&1
      echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -4 $o/sanit_mem.log
      grep -hE "^\[  (PASSED|FAILED)|FAILED TEST|^\[==" $o/sanit_race/racecheck.log $o/sanit_mem/memcheck.log | tail -8 ;;
  esac
done
tar czf $OUT/s47_$(IFS=_; echo "$*").tgz -C $OUT s47 && rm -rf $o
