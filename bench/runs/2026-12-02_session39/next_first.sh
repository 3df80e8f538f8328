#!/usr/bin/env bash
# For the next session (not run). Packs left in .gpu/ (ignored by git): .gpu/y = main's qmoe and
# tests (built at `f807223`, code as `e2c9c7a`), .gpu/yq its qmoe alone; .gpu/p = branch
# wip/paired-halves `d18a1f4`'s qmoe and tests, .gpu/pq its qmoe alone.
# Rebuild and repack them if .gpu/ did not survive (for .gpu/p from the branch; the *q packs hold
# qmoe.xz and libfmt.so.9.xz only):
#   d=.gpu/y; mkdir -p $d; cp build-cuda/qmoe build-cuda/tests/qmoe_cuda_tests \
#     $(ldd build-cuda/qmoe | awk '/libfmt/{print $3}') $d; strip $d/qmoe $d/qmoe_cuda_tests; xz -9 -T2 $d/*
#   next_first.sh ncu    why the register kernel's 32-row tile streams at ~0.3-0.4 of copy at 16 rows
#                        per expert (NOTES "First"): ncu memory workload, warp states and scheduler
#                        statistics of its two GEMMs on Mixtral-8x7B NVFP4 A16 at 64 tokens, then of
#                        the decode kernels at the same rows (which stream 2.4-3 TB/s)
#   next_first.sh paired_tests  carry [".gpu/p"] (branch wip/paired-halves: the repacked tiles of a
#                        128-row pair side by side, one bulk copy each of codes and scales per k-tile
#                        instead of two each): the register kernel's tests, memcheck of its kernel tests
#   next_first.sh paired_ab     carry [".gpu/pq", ".gpu/yq"] (the branch's and main's qmoe alone): GEMM
#                        µs of the narrow tiles forced and of the automatic path at 16-64 rows per
#                        expert and of the prefill tiles at 256-2048, main vs branch, two rounds. The
#                        hypothesis (NOTES "Thirty-ninth session"): the per-copy cost of the bulk
#                        copies, shared per SM, bounds the kernel at few rows per expert
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
  paired_quick)  # (the thirty-ninth session's last ~190 s of device time) carry [".gpu/p"]
    d=.gpu/p; tools/gpu_unpack.sh $d; export LD_LIBRARY_PATH=$PWD/$d
    timeout 30 $d/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 --models mixtral-8x7b \
      --schemes w4a16_g128,mxfp4,nvfp4a16 --tokens 64 --gemm-paths auto,prefill:4 > $o/paired_quick.log 2>&1
    echo "bench rc $? ($((SECONDS - start)) s)"; grep mixtral $o/paired_quick.log
    timeout 60 $d/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $o/paired_quick_tests.log 2>&1
    echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/paired_quick_tests.log ;;
  paired_tests)
    d=.gpu/p; tools/gpu_unpack.sh $d; export LD_LIBRARY_PATH=$PWD/$d
    f='Fp4Mainloop.*:Int4Mainloop.*:Int4Int8Mainloop.*:PrefillKernels.*:W4Prefill.*:RepackedCopy.*:RandomLayerEdges.*'
    timeout 300 $d/qmoe_cuda_tests --gtest_filter="$f" > $o/paired_tests.log 2>&1
    echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/paired_tests.log
    timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $d/qmoe_cuda_tests \
      --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $o/paired_memcheck.log 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/paired_memcheck.log ;;
  paired_ab)
    tools/gpu_unpack.sh .gpu/pq .gpu/yq
    run() {  # label binary models tokens paths
      (( SECONDS - start > 500 )) && { echo "skip $1 $2"; return; }
      LD_LIBRARY_PATH=$PWD/.gpu/$2 timeout 150 .gpu/$2/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 \
        --models $3 --schemes w4a16_g128,mxfp4,nvfp4a16 --tokens $4 --gemm-paths $5 > $o/$1.$2.log 2>&1
      echo "$1 $2 rc $? ($((SECONDS - start)) s)"
    }
    for r in 1 2; do
      for b in yq pq; do
        run mix_r$r $b mixtral-8x7b 64,128,256 auto,prefill:4,prefill:2
        run ds_r$r $b deepseek-v3 512,1024,4096 auto,prefill:4
        run q3_r$r $b qwen3-30b-a3b 256,4096,8192 auto
      done
    done ;;
  suite)
    QMOE_GPU_TEST_PARTS=tests timeout 560 tools/gpu_test.sh $d $o > $o/suite.log 2>&1
    echo "suite rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/gpu_tests.log ;;
  *) echo "next_first.sh: ncu or suite"; exit 2 ;;
esac
tar czf $OUT/n_$1.tgz -C $OUT n && rm -rf $o
