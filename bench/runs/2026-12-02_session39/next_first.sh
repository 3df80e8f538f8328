#!/usr/bin/env bash
# For the next session (not run), carry [".gpu/y"] built from main (`f807223`; code as `e2c9c7a`).
# Rebuild and repack .gpu/y if .gpu/ did not survive:
#   d=.gpu/y; mkdir -p $d; cp build-cuda/qmoe build-cuda/tests/qmoe_cuda_tests \
#     $(ldd build-cuda/qmoe | awk '/libfmt/{print $3}') $d; strip $d/qmoe $d/qmoe_cuda_tests; xz -9 -T2 $d/*
#   next_first.sh ncu    why the register kernel's 32-row tile streams at ~0.3-0.4 of copy at 16 rows
#                        per expert (NOTES "First"): ncu memory workload, warp states and scheduler
#                        statistics of its two GEMMs on Mixtral-8x7B NVFP4 A16 at 64 tokens, then of
#                        the decode kernels at the same rows (which stream 2.4-3 TB/s)
#   next_first.sh suite  the GPU suite's tests on main (tools/gpu_test.sh, tests only; its memcheck
#                        and racecheck parts take another call): this session ran parts of it on the
#                        branch builds only
set -u
d=.gpu/${BIN:-y}; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
o=$OUT/n; mkdir -p $o
start=$SECONDS
case ${1:-} in
  ncu)
    for path in prefill:4 decode; do
      timeout 200 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
        -k regex:'fp4_grouped|grouped_mma|gemv' --launch-skip 2 --launch-count 2 $d/qmoe bench \
        --models mixtral-8x7b --schemes nvfp4a16 --tokens 64 --max-tokens 8192 --gemm-paths $path \
        --rotations 1 --replays 2 > $o/ncu_${path/:/_}.txt 2>&1
      echo "ncu $path rc $? ($((SECONDS - start)) s)"
      grep -E "^  [a-z_ ]+.*\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|Achieved Occupancy|Eligible Warps|Issued Warp" \
        $o/ncu_${path/:/_}.txt | cut -c1-150 | head -40
    done ;;
  suite)
    QMOE_GPU_TEST_PARTS=tests timeout 560 tools/gpu_test.sh $d $o > $o/suite.log 2>&1
    echo "suite rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/gpu_tests.log ;;
  *) echo "next_first.sh: ncu or suite"; exit 2 ;;
esac
tar czf $OUT/n_$1.tgz -C $OUT n && rm -rf $o
