#!/usr/bin/env bash
# Fortieth session's device calls (run from the repository root on the H200):
#   s40.sh profile suite   BIN=m (carry [".gpu/m"]: main with wip/paired-halves merged, qmoe and tests)
#   s40.sh narrow_tests    BIN=n (carry [".gpu/n"]: the narrow tiles' k-loop without the serialized
#                          wgmmas, qmoe and tests)
#   s40.sh narrow_ab       carry [".gpu/nq", ".gpu/mq"] (qmoe alone of both)
#   s40.sh suite short     BIN=n2 (carry [".gpu/n2"]: the narrow k-loop and the planner's new switches)
#   s40.sh plan_ab         carry [".gpu/n2q", ".gpu/mq"]
#   s40.sh short_ab        carry [".gpu/n3q", ".gpu/n2q"] (n3q: the short reduction's switches moved,
#                          NVFP4 12 -> 9, INT4 16 -> 12; main's tip)
# For the next session (not run): BIN=b s40.sh narrow_tests (carry [".gpu/b"]: branch
#   wip/mxfp4-tile-branch `3e87028`, qmoe and tests), then s40.sh branch_ab (carry [".gpu/bq",
#   ".gpu/n3q"]), and short_ab above. Rebuild the packs if .gpu/ did not survive (d=.gpu/X; mkdir -p
#   $d; cp build-cuda/qmoe build-cuda/tests/qmoe_cuda_tests $(ldd build-cuda/qmoe | awk '/libfmt/{print
#   $3}') $d; strip $d/qmoe*; xz -9 -T2 $d/*; the *q packs hold qmoe.xz and libfmt.so.9.xz only).
# profile: Nsight Compute's full set and per-instruction stall samples of the register kernel's
#   32-row tile (the narrow tile that streams at ~0.4 of copy at 16 rows per expert), NVFP4 A16 and
#   MXFP4 on Mixtral-8x7B at 64 tokens (tile forced: prefill:4).
# suite: the GPU tests (tools/gpu_test.sh, tests only).
# narrow_tests: the register kernel's tests (every tile and format), the prefill, W4, repacked-copy
#   and random-layer edge tests; memcheck of the kernel tests; a quick bench at Mixtral-8x7B 64 tokens.
# narrow_ab: main (mq) against the branch (nq), two alternated rounds: GEMM / layer µs at 4-64 rows
#   per expert on the automatic path and forced onto the decode kernels and the 32-, 64- and 128-row
#   tiles (prefill:4, :5, :2), 4-bit formats, four shapes (the planner's switches are re-measured).
set -u
d=.gpu/${BIN:-m}; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
o=$OUT/s40; mkdir -p $o
start=$SECONDS
for part in "$@"; do
  case $part in
    profile)
      for s in nvfp4a16 mxfp4; do
        n=narrow32_${s}_64; left=$((560 - SECONDS)); (( left < 60 )) && { echo "skip $n"; continue; }
        timeout $left ncu --clock-control none --set full --import-source no -k regex:fp4_grouped --launch-count 2 \
          -o $o/$n $d/qmoe bench --models mixtral-8x7b --schemes $s --tokens 64 --gemm-paths prefill:4 --rotations 1 \
          --replays 1 > $o/$n.log 2>&1
        echo "$n rc $? ($((SECONDS - start)) s)"
        ncu -i $o/$n.ncu-rep --page details > $o/$n.details.txt 2>&1
        ncu -i $o/$n.ncu-rep --page source --csv --print-source sass > $o/$n.source.csv 2>&1 || echo "source page failed"
        ncu -i $o/$n.ncu-rep --page raw --csv > $o/$n.raw.csv 2>&1 || echo "raw page failed"
        xz -T4 $o/$n.source.csv $o/$n.raw.csv; rm -f $o/$n.ncu-rep
        grep -E "Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Achieved Occupancy" $o/$n.details.txt | head -10
      done ;;
    suite)
      QMOE_GPU_TEST_PARTS=tests timeout $((590 - SECONDS)) tools/gpu_test.sh $d $o > $o/suite.log 2>&1
      echo "suite rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST|^\[==" $o/gpu_tests.log | tail -8 ;;
    narrow_tests)
      f='Fp4Mainloop.*:Int4Mainloop.*:Int4Int8Mainloop.*:PrefillKernels.*:W4Prefill.*:RepackedCopy.*:RandomLayerEdges.*'
      timeout 300 $d/qmoe_cuda_tests --gtest_filter="$f" > $o/narrow_tests.log 2>&1
      echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/narrow_tests.log
      timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $d/qmoe_cuda_tests \
        --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $o/narrow_memcheck.log 2>&1
      echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/narrow_memcheck.log
      timeout 60 $d/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 --models mixtral-8x7b \
        --schemes w4a16_g32,mxfp4,nvfp4a16 --tokens 64 --gemm-paths auto,prefill:4 > $o/narrow_quick.log 2>&1
      echo "bench rc $? ($((SECONDS - start)) s)"; grep mixtral $o/narrow_quick.log ;;
    narrow_ab)
      tools/gpu_unpack.sh .gpu/nq .gpu/mq
      ab() {  # label binary model tokens schemes
        (( SECONDS - start > 540 )) && { echo "skip $1 $2"; return; }
        LD_LIBRARY_PATH=$PWD/.gpu/$2 timeout 120 .gpu/$2/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 \
          --models $3 --schemes $5 --tokens $4 --gemm-paths auto,decode,prefill:4,prefill:5,prefill:2 > $o/$1.$2.log 2>&1
        echo "$1 $2 rc $? ($((SECONDS - start)) s)"
      }
      for r in 1 2; do
        for b in mq nq; do
          ab mix_r$r $b mixtral-8x7b 16,24,32,48,64,96,128,192,256 w4a16_g32,w4a16_g128,mxfp4,nvfp4a16
          ab q3_r$r $b qwen3-30b-a3b 64,128,192,256,384,512,768,1024 w4a16_g32,mxfp4,nvfp4a16
          ab ds_r$r $b deepseek-v3 128,256,384,512,768,1024,1536 w4a16_g32,mxfp4,nvfp4a16
          ab oss_r$r $b gpt-oss-120b 128,256,512,768,1024 mxfp4
        done
      done ;;
    short)  # the short reduction's switches (the TP8 shapes), not measured in narrow_ab
      LD_LIBRARY_PATH=$PWD/$d timeout 120 $d/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 \
        --models deepseek-v3-tp8 --schemes w4a16_g32,nvfp4a16 --tokens 256,384,512,768 \
        --gemm-paths auto,decode,prefill:4 > $o/short_ds.log 2>&1
      echo "short ds rc $? ($((SECONDS - start)) s)"
      LD_LIBRARY_PATH=$PWD/$d timeout 120 $d/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 \
        --models kimi-k2-tp8 --schemes w4a16_g32 --tokens 384,576,768,1152 \
        --gemm-paths auto,decode,prefill:4 > $o/short_kimi.log 2>&1
      echo "short kimi rc $? ($((SECONDS - start)) s)" ;;
    plan_ab)  # main (mq) against the narrow k-loop and the new switches (n2q), automatic path, two rounds
      tools/gpu_unpack.sh .gpu/n2q .gpu/mq
      pab() {  # label binary model tokens schemes
        (( SECONDS - start > 400 )) && { echo "skip $1 $2"; return; }
        LD_LIBRARY_PATH=$PWD/.gpu/$2 timeout 120 .gpu/$2/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 \
          --models $3 --schemes $5 --tokens $4 --gemm-paths auto > $o/$1.$2.log 2>&1
        echo "$1 $2 rc $? ($((SECONDS - start)) s)"
      }
      for r in 1 2; do
        for b in mq n2q; do
          pab mix_r$r $b mixtral-8x7b 16,24,28,32,48,64,96,128,160,192,256 w4a16_g32,w4a16_g128,nvfp4a16
          pab q3_r$r $b qwen3-30b-a3b 128,192,256,384,512,768 w4a16_g32,w4a16_g128,nvfp4a16
          pab ds_r$r $b deepseek-v3 256,384,512,768,1024,1536 w4a16_g32,w4a16_g128,nvfp4a16
        done
      done ;;
    short_ab)
      tools/gpu_unpack.sh .gpu/n3q .gpu/n2q
      for r in 1 2; do
        for b in n2q n3q; do
          LD_LIBRARY_PATH=$PWD/.gpu/$b timeout 60 .gpu/$b/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 \
            --models deepseek-v3-tp8 --schemes w4a16_g32,nvfp4a16 --tokens 256,288,320,352,384,448 --gemm-paths auto \
            > $o/sds_r$r.$b.log 2>&1; echo "ds $b rc $?"
          LD_LIBRARY_PATH=$PWD/.gpu/$b timeout 60 .gpu/$b/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 \
            --models kimi-k2-tp8 --schemes w4a16_g32 --tokens 480,528,576,672 --gemm-paths auto \
            > $o/skimi_r$r.$b.log 2>&1; echo "kimi $b rc $? ($((SECONDS - start)) s)"
        done
      done ;;
    branch_ab)  # main's tip (n3q) against the branch (bq): narrow rows with forced paths, prefill rows
      tools/gpu_unpack.sh .gpu/bq .gpu/n3q
      bab() {  # label binary model tokens schemes paths
        (( SECONDS - start > 500 )) && { echo "skip $1 $2"; return; }
        LD_LIBRARY_PATH=$PWD/.gpu/$2 timeout 120 .gpu/$2/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 \
          --models $3 --schemes $5 --tokens $4 --gemm-paths $6 > $o/$1.$2.log 2>&1
        echo "$1 $2 rc $? ($((SECONDS - start)) s)"
      }
      for r in 1 2; do
        for b in n3q bq; do
          bab mixn_r$r $b mixtral-8x7b 48,64,96,128,192 mxfp4,nvfp4a16,w4a16_g32 auto,prefill:4,prefill:5
          bab mixp_r$r $b mixtral-8x7b 512,1024,4096,8192 mxfp4,nvfp4a16,w4a16_g128 auto
          bab dsp_r$r $b deepseek-v3 512,1024,4096,8192 mxfp4,nvfp4a16,w4a16_g128 auto
          bab q3_r$r $b qwen3-30b-a3b 192,256,512,4096 mxfp4,nvfp4a16 auto
          bab oss_r$r $b gpt-oss-120b 512,1024,4096 mxfp4 auto
        done
      done ;;
    *) echo "s40.sh: unknown part $part"; exit 2 ;;
  esac
done
tar czf $OUT/s40_$(IFS=_; echo "$*").tgz -C $OUT s40 && rm -rf $o
