#!/usr/bin/env bash
# For the next session (not run), carry [".gpu/u"]: branch wip/decode-fusion (`ce88f7d`) at the thirty-seventh
# session's end (main plus the decode path's conversion and quantization, and activation and
# quantization, each in one launch; revised after its first run to keep one-scale rows of up to
# 8192 columns in registers and leave wider rows and NVFP4 to two launches; A/B switch
# QMOE_FUSED_QUANT=0). Rebuild and repack .gpu/u from that branch if .gpu/ did not survive.
#   next_first.sh fusion  the new FusedQuantization tests (fused against two launches, bit for
#                         bit), the decode, random-layer, chained-launch, API, fixture and routing
#                         tests with the fusion on, the random-layer tests with it off, memcheck of the
#                         busy-experts test and the FP8 / INT8 random layers (fusion on), then layer
#                         µs with the fusion off (label a) and on (b) alternately, three rounds, at
#                         1-8 tokens on five shapes and the five schemes that quantize activations
#   next_first.sh race    racecheck of tools/gpu_test.sh's list (its per-token FP8 edge cases run
#                         the fused kernels' block reductions)
#   next_first.sh profile Nsight Compute (full set, source page) on the decode tensor-core kernel at
#                         Mixtral-8x7B's 64 tokens (MXFP4, 0.30 of copy bandwidth) and on the W4A16
#                         row's CUTLASS tile there, for issue 3's 64-token target; then each kernel's
#                         duration in Qwen3-30B-A3B's 1-token forwards (what runs outside the GEMMs)
#   BIN=v next_first.sh hybrid  (carry [".gpu/v"]: branch wip/hybrid `5cef9c5`, the decode path's
#                         per-expert hybrid, off by default) its tests and memcheck, then skewed
#                         routing with the threshold QMOE_HYBRID_ROWS 0 / 32 / 64 / 128 / 256 and mild
#                         routing 0 / 64; pick the default from it, or leave it off
# Merge wip/decode-fusion if the tests pass and no row is slower beyond the rounds' spread.
# Order by value: fusion, hybrid, profile, race (race only matters before merging the fusion).
set -u
d=.gpu/${BIN:-u}; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
o=$OUT/n; mkdir -p $o
start=$SECONDS
part=${1:-}
case $part in
  fusion)
    f='FusedQuantization.*:RandomLayerEdges.*:Formats/RandomLayers.*:ChainedLaunches.*:CudaMoeLayerApi.*:CudaFixtures.*:CudaRouting.*'
    timeout 200 $d/qmoe_cuda_tests --gtest_filter="$f" > $o/u_tests.log 2>&1
    echo "tests (fusion on) rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/u_tests.log
    grep -h "Failure" -A8 $o/u_tests.log | head -30
    QMOE_FUSED_QUANT=0 timeout 80 $d/qmoe_cuda_tests --gtest_filter='Formats/RandomLayers.*' > $o/u_tests_off.log 2>&1
    echo "random layers (fusion off) rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/u_tests_off.log
    m='RandomLayerEdges.DecodeKernelSplitsBusyExpertsIntoChunks:Formats/RandomLayers.MatchTheCpuBackend/fp8*:Formats/RandomLayers.MatchTheCpuBackend/int8*'
    timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $d/qmoe_cuda_tests --gtest_filter="$m" > $o/u_memcheck.log 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/u_memcheck.log
    for r in 1 2 3; do
      for l in a b; do
        (( SECONDS - start > 540 )) && { echo "skip r$r $l"; continue; }
        export QMOE_FUSED_QUANT=$([[ $l == b ]] && echo 1 || echo 0)
        timeout 60 $d/qmoe bench --rotations 2 --replays 5 --schemes fp8_channel,fp8_block,int8,w4a8_fp8,w4a8_int8 \
          --models qwen3-30b-a3b,mixtral-8x7b,deepseek-v3,kimi-k2-tp8 --tokens 1,2,4,8 > $o/fused_r$r.$l.log 2>&1
        echo "fused r$r $l rc $? ($((SECONDS - start)) s)"
        # (gpt-oss-120b's 2880 columns take no 128-column groups)
        timeout 30 $d/qmoe bench --rotations 2 --replays 5 --schemes fp8_channel,int8 --models gpt-oss-120b \
          --tokens 1,2,4,8 > $o/fused_oss_r$r.$l.log 2>&1
        echo "fused gpt-oss r$r $l rc $? ($((SECONDS - start)) s)"
        unset QMOE_FUSED_QUANT
      done
    done ;;
  race)
    QMOE_GPU_TEST_PARTS=racecheck timeout 560 tools/gpu_test.sh $d $o/r > $o/r_summary.txt 2>&1
    echo "racecheck rc $? ($((SECONDS - start)) s)"; tail -3 $o/r/racecheck.log ;;
  profile)
    # Nsight Compute's full set on the decode tensor-core kernel's two launches (GEMM1, GEMM2) of one
    # forward where it streams its weights farthest below copy bandwidth (Mixtral-8x7B at 64 tokens:
    # 16 slots per expert, 0.28-0.38 of copy): MXFP4 on the decode path; then the W4A16 g128 row's
    # automatic path (CUTLASS's mixed-input 128 x 32 tile) for comparison. Details and the source
    # page (stall samples per instruction) for the next step on issue 3's 64-token target.
    for spec in mxfp4:decode:grouped_mma_kernel w4a16_g128:auto:device_kernel; do
      IFS=: read s path k <<< "$spec"
      n=mixtral_${s}_64; left=$((560 - SECONDS)); (( left < 60 )) && { echo "skip $n"; continue; }
      timeout $left ncu --clock-control none --set full --import-source no -k regex:$k --launch-count 2 \
        -o $o/$n $d/qmoe bench --models mixtral-8x7b --schemes $s --tokens 64 --gemm-paths $path --rotations 1 \
        --replays 1 > $o/$n.log 2>&1
      echo "$n rc $? ($((SECONDS - start)) s)"
      ncu -i $o/$n.ncu-rep --page details > $o/$n.details.txt 2>&1
      ncu -i $o/$n.ncu-rep --page source --csv --print-source sass > $o/$n.source.csv 2>&1 || echo "source page failed"
      xz -T4 $o/$n.source.csv; rm -f $o/$n.ncu-rep
      grep -E "Duration|Memory Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Registers Per|Achieved Occupancy" \
        $o/$n.details.txt | head -16
    done
    # Every kernel of Qwen3-30B-A3B's first forwards at 1 token (W4A16 g128, FP8 channel): each
    # kernel's own duration (ncu runs them one at a time, so no chained overlap): where the ~21-27
    # µs of the layer outside its GEMMs go.
    for s in w4a16_g128 fp8_channel; do
      n=qwen3_${s}_1; (( SECONDS - start > 500 )) && { echo "skip $n"; continue; }
      timeout 60 ncu --clock-control none --section SpeedOfLight --launch-count 16 \
        -k regex:'route_and_group|convert|activation|fake_quant|grouped_mma|combine' $d/qmoe bench --models qwen3-30b-a3b \
        --schemes $s --tokens 1 --rotations 1 --replays 1 > $o/$n.log 2>&1
      echo "$n rc $? ($((SECONDS - start)) s)"; grep -E "^  [a-z_]+.*\(|Duration" $o/$n.log | head -34
    done ;;
  hybrid)
    # (BIN=v; carry [".gpu/v"]: branch wip/hybrid, the decode path's per-expert hybrid, off unless
    # QMOE_HYBRID_ROWS / ForwardOptions::hybrid_busy_rows) its new test, the tests of what it
    # touched (grouping, combine, the register kernel's rows per expert), memcheck of the new test;
    # then qmoe bench under skewed routing with QMOE_HYBRID_ROWS 0 (off) / 32 / 64 / 128 / 256,
    # rotating, two rounds, and under mild routing 0 / 64 for regressions
    f='RandomLayerEdges.*:CudaMoeLayerApi.*:CudaRouting.*:Formats/RandomLayers.*:PrefillKernels.MatchTheCpuBackend:PrefillKernels.EdgeCases:W4Prefill.*:Fp4Mainloop.*:Int4Mainloop.*'
    timeout 300 $d/qmoe_cuda_tests --gtest_filter="$f" > $o/v_tests.log 2>&1
    echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/v_tests.log
    grep -h "Failure" -A8 $o/v_tests.log | head -30; grep -h "hybrid" $o/v_tests.log | head -8
    timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $d/qmoe_cuda_tests \
      --gtest_filter='RandomLayerEdges.HybridRunsBusyExpertsOnTheRegisterKernel' > $o/v_memcheck.log 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/v_memcheck.log
    for r in 1 2; do
      for h in 0 32 64 128 256; do
        (( SECONDS - start > 540 )) && { echo "skip r$r $h"; continue; }
        QMOE_HYBRID_ROWS=$h timeout 60 $d/qmoe bench --rotations 2 --replays 5 --routing skewed \
          --models kimi-k2-tp8,deepseek-v3-tp8,deepseek-v3,qwen3-30b-a3b,gpt-oss-120b --schemes w4a16_g32,mxfp4,nvfp4a16 \
          --tokens 128,512 > $o/skew_r$r.h$h.log 2>&1
        echo "skewed r$r hybrid $h rc $? ($((SECONDS - start)) s)"
      done
      for h in 0 64; do
        (( SECONDS - start > 540 )) && { echo "skip mild r$r $h"; continue; }
        QMOE_HYBRID_ROWS=$h timeout 60 $d/qmoe bench --rotations 2 --replays 5 --routing mild \
          --models kimi-k2-tp8,qwen3-30b-a3b --schemes w4a16_g32,mxfp4 --tokens 128,512 > $o/mild_r$r.h$h.log 2>&1
        echo "mild r$r hybrid $h rc $? ($((SECONDS - start)) s)"
      done
    done ;;
  *) echo "next_first.sh: fusion, race, profile or hybrid"; exit 2 ;;
esac
tar czf $OUT/n_$part.tgz -C $OUT n && rm -rf $o
