#!/usr/bin/env bash
# For the next session (not run), carry [".gpu/p"]: main's code at the thirty-sixth session's end
# (`ecbda6a`; rebuild and repack .gpu/p if .gpu/ did not survive). Calls:
#   next_first.sh suite   the whole suite, then memcheck of tools/gpu_test.sh's list (the new
#                         RandomLayerEdges.DecodeKernelSplitsBusyExpertsIntoChunks among them)
#   next_first.sh race    racecheck of the routing / grouping list (the grouping's scan changed: its
#                         count array now holds the chunk starts), with the new test
#   next_first.sh skewed  skewed routing with torch on all six shapes at 1-8192 tokens (the chunks'
#                         vs-torch figures, and the rows not re-measured: Kimi-K2 TP8 NVFP4,
#                         DeepSeek-V3 TP8 MXFP4, DeepSeek-V3 MXFP4 at 512); ROUTING=mild for
#                         `--routing mild` (a quarter of the bias, first run)
#   next_first.sh chunksize  the decode chunks' size, QMOE_MMA_CHUNK_SLOTS 8 / 16 / 32 (a block row
#                         per pass of 8-16 slots spreads a busy expert further, at more empty rows
#                         under uniform routing): the busy-experts test at 8 and 16, then qmoe bench
#                         with skewed routing (Kimi-K2 TP8, DeepSeek-V3 TP8, Qwen3-30B-A3B,
#                         gpt-oss-120b at 128 / 512 tokens) and uniform decode rows (1-128 tokens),
#                         sizes in rotating order, two rounds
#   BIN=q next_first.sh gemv  (carry [".gpu/q"]: branch wip/gemv-chunks, `1415e81`: the GEMV and
#                         generic decode kernels on the chunks too, the unused active-expert list
#                         removed) its decode, routing, API, layer and fixture tests, memcheck and
#                         racecheck of the busy-experts and routing tests; merge it if all pass
set -u
d=.gpu/${BIN:-p}; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
o=$OUT/n; mkdir -p $o
start=$SECONDS
part=${1:-}
case $part in
  suite)
    QMOE_GPU_TEST_PARTS=tests timeout 330 tools/gpu_test.sh $d $o/t > $o/t_summary.txt 2>&1
    echo "tests rc $? ($((SECONDS - start)) s)"
    grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/t/gpu_tests.log; grep -h "Failure" -A8 $o/t/gpu_tests.log | head -30
    QMOE_GPU_TEST_PARTS=memcheck timeout $((570 - SECONDS)) tools/gpu_test.sh $d $o/m > $o/m_summary.txt 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -3 $o/m/memcheck.log ;;
  race)
    QMOE_GPU_TEST_PARTS=racecheck timeout 560 tools/gpu_test.sh $d $o/r > $o/r_summary.txt 2>&1
    echo "racecheck rc $? ($((SECONDS - start)) s)"; tail -3 $o/r/racecheck.log ;;
  skewed)
    O="--rotations 2 --replays 5 --routing ${ROUTING:-skewed}"
    for spec in qwen3-30b-a3b:9 mixtral-8x7b:9 deepseek-v3:9 deepseek-v3-tp8:5 kimi-k2-tp8:5 gpt-oss-120b:5; do
      IFS=: read m n <<< "$spec"
      left=$((560 - SECONDS))
      (( left < 40 )) && { echo "skip $m ($((SECONDS - start)) s)"; continue; }
      if [[ $n == 9 ]]; then s=w4a16_g128,mxfp4,nvfp4a16,fp8_channel,fp8_block,w4a8_fp8,w4a8_int8,int8,bf16
      else s=w4a16_g32,mxfp4,nvfp4a16,fp8_channel,bf16; fi
      r=$o/$m; mkdir -p $r
      QMOE_COMMIT=ecbda6a timeout $left tools/gpu_bench.sh $d $r --models $m --schemes $s \
        --tokens 1,8,32,64,128,512,2048,4096,8192 $O > $r/run.log 2>&1
      echo "$m rc $? ($((SECONDS - start)) s)"
      grep -h "| auto |" $r/results.md 2>/dev/null | awk -F'|' '{gsub(/ /,"",$14); v=$14; sub(/x.*/,"",v); if (v+0 < 1.0) print "below torch:", $2, $3, $5, $14}'
    done ;;
  chunksize)
    for c in 8 16; do
      QMOE_MMA_CHUNK_SLOTS=$c timeout 60 $d/qmoe_cuda_tests --gtest_filter='RandomLayerEdges.DecodeKernelSplitsBusyExpertsIntoChunks' \
        > $o/busy_$c.log 2>&1
      echo "busy-experts test, chunks of $c: rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)" $o/busy_$c.log
    done
    O="--rotations 2 --replays 5"
    b() {  # chunk size, label, options...
      local c=$1 l=$2; shift 2
      (( SECONDS - start > 520 )) && { echo "skip $l $c"; return; }
      QMOE_MMA_CHUNK_SLOTS=$c timeout 60 $d/qmoe bench $O "$@" > $o/$l.c$c.log 2>&1
      echo "$l chunks of $c rc $? ($((SECONDS - start)) s)"
    }
    for r in 1 2; do
      for c in 32 8 16; do
        b $c skew_tp8_r$r --models kimi-k2-tp8,deepseek-v3-tp8 --schemes w4a16_g32,mxfp4,nvfp4a16 --tokens 128,512 --routing skewed
        b $c skew_small_r$r --models qwen3-30b-a3b,gpt-oss-120b --schemes mxfp4,nvfp4a16 --tokens 128,512 --routing skewed
        b $c uni_r$r --models qwen3-30b-a3b,mixtral-8x7b,deepseek-v3 --schemes w4a16_g128,mxfp4,fp8_channel,bf16 --tokens 1,8,32,64,128
      done
    done ;;
  gemv)
    timeout 300 $d/qmoe_cuda_tests --gtest_filter='RandomLayerEdges.*:CudaRouting.*:CudaMoeLayerApi.*:ChainedLaunches.*:Formats/RandomLayers.*:CudaFixtures.*:DequantizedPrefill.*:RepackedCopy.*' \
      > $o/q_tests.log 2>&1
    echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/q_tests.log
    grep -h "Failure" -A8 $o/q_tests.log | head -30
    f='RandomLayerEdges.DecodeKernelSplitsBusyExpertsIntoChunks:CudaRouting.*'
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $d/qmoe_cuda_tests --gtest_filter="$f" > $o/q_memcheck.log 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/q_memcheck.log
    timeout $((570 - SECONDS)) compute-sanitizer --tool racecheck $d/qmoe_cuda_tests --gtest_filter="$f" > $o/q_racecheck.log 2>&1
    echo "racecheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/q_racecheck.log ;;
  *) echo "next_first.sh: suite, race, skewed, chunksize or gemv"; exit 2 ;;
esac
tar czf $OUT/n_$part.tgz -C $OUT n && rm -rf $o
