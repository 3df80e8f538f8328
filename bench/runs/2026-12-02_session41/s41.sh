#!/usr/bin/env bash
# Forty-first session's device calls (run from the repository root on the H200):
#   s41.sh suite                   BIN=mc (carry [".gpu/mc"]: branch wip/mxfp4-conv, qmoe and tests)
#   s41.sh sanitize                BIN=mc (memcheck and racecheck, the register kernel's tests included)
#   s41.sh ab                      carry [".gpu/mcq", ".gpu/n3q"] (qmoe alone of both: the branch, main)
# Packs: d=.gpu/X; mkdir -p $d; cp build-cuda/qmoe build-cuda/tests/qmoe_cuda_tests $(ldd build-cuda/qmoe
#   | awk '/libfmt/{print $3}') $d; strip $d/qmoe*; xz -9 -T2 $d/*  (the *q packs: qmoe.xz, libfmt.so.9.xz).
# suite: the GPU tests (tools/gpu_test.sh, tests only).
# sanitize: tools/gpu_test.sh memcheck and racecheck with QMOE_RACECHECK_KERNELS=1.
# ab: main (n3q) against the branch (mcq), two alternated rounds, GEMM / layer µs: MXFP4 on every
#   shape at narrow and prefill token counts (automatic path and the 32- / 64-row tiles forced), and
#   NVFP4 / W4A16 rows whose wide tiles changed their k-loop form.
set -u
d=.gpu/${BIN:-mc}; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
o=$OUT/s41; mkdir -p $o
start=$SECONDS
for part in "$@"; do
  case $part in
    suite)
      QMOE_GPU_TEST_PARTS=tests timeout $((590 - SECONDS)) tools/gpu_test.sh $d $o > $o/suite.log 2>&1
      echo "suite rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST|^\[==" $o/gpu_tests.log | tail -8 ;;
    sanitize)
      QMOE_RACECHECK_KERNELS=1 QMOE_GPU_TEST_PARTS="memcheck racecheck" timeout $((590 - SECONDS)) \
        tools/gpu_test.sh $d $o > $o/sanitize.log 2>&1
      echo "sanitize rc $? ($((SECONDS - start)) s)"; cat $o/sanitize.log | tail -8 ;;
    ab)
      tools/gpu_unpack.sh .gpu/mcq .gpu/n3q
      ab() {  # label binary model tokens schemes paths
        (( SECONDS - start > 500 )) && { echo "skip $1 $2"; return; }
        LD_LIBRARY_PATH=$PWD/.gpu/$2 timeout 120 .gpu/$2/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 \
          --models $3 --schemes $5 --tokens $4 --gemm-paths $6 > $o/$1.$2.log 2>&1
        echo "$1 $2 rc $? ($((SECONDS - start)) s)"
      }
      for r in 1 2; do
        for b in n3q mcq; do
          ab mixn_r$r $b mixtral-8x7b 16,32,48,64,96,128,192,256 mxfp4 auto,decode,prefill:4,prefill:5
          ab mixp_r$r $b mixtral-8x7b 512,1024,2048,4096,8192 mxfp4,nvfp4a16,w4a16_g128 auto
          ab mixw_r$r $b mixtral-8x7b 64,128 nvfp4a16,w4a16_g32 auto
          ab dsp_r$r $b deepseek-v3 256,384,512,768,1024,4096 mxfp4 auto,decode,prefill:4,prefill:5
          ab q3_r$r $b qwen3-30b-a3b 64,128,192,256,512,1024,4096 mxfp4 auto,decode,prefill:4,prefill:5
          ab oss_r$r $b gpt-oss-120b 64,128,256,512,1024,2048,4096,8192 mxfp4 auto,decode,prefill:4,prefill:5
        done
      done ;;
    *) echo "s41.sh: unknown part $part"; exit 2 ;;
  esac
done
tar czf $OUT/s41_$(IFS=_; echo "$*").tgz -C $OUT s41 && rm -rf $o
