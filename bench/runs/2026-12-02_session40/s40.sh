#!/usr/bin/env bash
# Fortieth session's device calls (run from the repository root on the H200):
#   s40.sh profile suite   BIN=m (carry [".gpu/m"]: main with wip/paired-halves merged, qmoe and tests)
# profile: Nsight Compute's full set and per-instruction stall samples of the register kernel's
#   32-row tile (the narrow tile that streams at ~0.4 of copy at 16 rows per expert), NVFP4 A16 and
#   MXFP4 on Mixtral-8x7B at 64 tokens (tile forced: prefill:4).
# suite: the GPU tests (tools/gpu_test.sh, tests only).
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
    *) echo "s40.sh: unknown part $part"; exit 2 ;;
  esac
done
tar czf $OUT/s40_$(IFS=_; echo "$*").tgz -C $OUT s40 && rm -rf $o
