#!/usr/bin/env bash
# Device calls of the thirty-sixth session (after next_first.sh of the thirty-fifth: auto/, third/).
#   check (carry [".gpu/n"]: the 320-row tile planned in a third range, 768-920 rows per expert, INT4
#         and MXFP4) memcheck of the layer test (now also at 840 rows per expert), the whole suite,
#         then 256-row tiles forced (prefill:1) against the plan at the range's edges: Qwen3-30B-A3B at
#         12032-14848 tokens (752-928 rows per expert), DeepSeek-V3 at 24576 / 28672 (768 / 896)
#   torch (carry [".gpu/n"]) the automatic path with torch's grouped GEMMs in the third range:
#         Qwen3-30B-A3B at 13312 / 14336 tokens, Mixtral-8x7B at 3328 / 3584, DeepSeek-V3 at 26624
#   status (carry [".gpu/n"]) a status run of main: tools/gpu_bench.sh per model shape at 1-8192
#         tokens with torch's grouped baselines; nine schemes on Qwen3-30B-A3B, Mixtral-8x7B and
#         DeepSeek-V3, five on the TP8 shapes and gpt-oss-120b (the twenty-fifth session's sets and
#         W4A8-INT8); a shape is skipped when the call's time runs short (the output says which)
#   skewed (carry [".gpu/n"]) the same with --routing skewed (Zipf-like: expert e's logits biased by
#         -2 ln(1 + e)) on Qwen3-30B-A3B, Mixtral-8x7B and DeepSeek-V3 at 1-8192 tokens, nine schemes
#         (SPECS="model:n ..." for other shapes: n 5 the five-scheme set)
#   chunks (carry [".gpu/o"]: branch wip/mma-chunks, the decode tensor-core kernel on chunks of 32
#         slots per block row) its decode and routing tests, memcheck of the new one, then qmoe bench
#         with one chunk per expert (QMOE_MMA_CHUNK_SLOTS=1073741824: as main, label n) and with
#         chunks of 32 (label o) alternately: skewed routing where the decode kernels lost to torch
#         (Kimi-K2 TP8, Qwen3-30B-A3B, gpt-oss-120b at 128-512 tokens), uniform decode rows (1-64
#         tokens) for regressions
set -u
d=.gpu/${BIN:-n}; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
o=$OUT/n; mkdir -p $o
start=$SECONDS
part=${1:-}
O="--rotations 2 --replays 5"
S="--schemes w4a16_g128,mxfp4,nvfp4a16"
case $part in
  check)
    f='PrefillKernels.RegisterKernel320*'
    timeout 120 compute-sanitizer --tool memcheck $d/qmoe_cuda_tests --gtest_filter="$f" > $o/memcheck.log 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|^\[       OK" $o/memcheck.log; tail -1 $o/memcheck.log
    QMOE_GPU_TEST_PARTS=tests timeout $((330 - SECONDS)) tools/gpu_test.sh $d $o/t > $o/t_summary.txt 2>&1
    echo "gpu_test rc $? ($((SECONDS - start)) s)"
    grep -hE "^\[  (PASSED|FAILED)|FAILED TEST|RegisterKernel320" $o/t/gpu_tests.log; grep -h "Failure" -A8 $o/t/gpu_tests.log | head -30
    timeout $((450 - SECONDS)) tools/gpu_sweep.sh $d $o/qwen3 2 auto prefill:1 --models qwen3-30b-a3b $S \
      --tokens 12032,12288,14592,14848 $O > /dev/null 2>&1
    echo "qwen3 rc $? ($((SECONDS - start)) s)"; cat $o/qwen3/summary.txt
    timeout $((570 - SECONDS)) tools/gpu_sweep.sh $d $o/dsv3 2 auto prefill:1 --models deepseek-v3 \
      --schemes w4a16_g128,mxfp4 --tokens 24576,28672 $O > /dev/null 2>&1
    echo "dsv3 rc $? ($((SECONDS - start)) s)"; cat $o/dsv3/summary.txt ;;
  torch)
    timeout 30 $d/qmoe bench --models qwen3-30b-a3b --schemes w4a16_g128 --tokens 4096 $O > /dev/null 2>&1
    for m in "qwen3-30b-a3b 13312,14336" "mixtral-8x7b 3328,3584" "deepseek-v3 26624"; do
      set -- $m; mkdir -p $o/$1
      QMOE_COMMIT=session36-third timeout $((560 - SECONDS)) tools/gpu_bench.sh $d $o/$1 $O --models $1 $S --tokens $2 > /dev/null 2>&1
      echo "$1 rc $? ($((SECONDS - start)) s)"; grep -E "^\| $1" $o/$1/results.md
    done ;;
  status|skewed)
    R=""; [[ $part == skewed ]] && R="--routing skewed"
    specs="qwen3-30b-a3b:9 mixtral-8x7b:9 deepseek-v3:9 deepseek-v3-tp8:5 kimi-k2-tp8:5 gpt-oss-120b:5"
    [[ $part == skewed ]] && specs=${SPECS:-"qwen3-30b-a3b:9 mixtral-8x7b:9 deepseek-v3:9"}
    for spec in $specs; do
      IFS=: read m n <<< "$spec"
      left=$((560 - SECONDS))
      (( left < 40 )) && { echo "skip $m ($((SECONDS - start)) s)"; continue; }
      if [[ $n == 9 ]]; then s=w4a16_g128,mxfp4,nvfp4a16,fp8_channel,fp8_block,w4a8_fp8,w4a8_int8,int8,bf16
      else s=w4a16_g32,mxfp4,nvfp4a16,fp8_channel,bf16; fi
      r=$o/$m; mkdir -p $r
      QMOE_COMMIT=${COMMIT:-main} timeout $left tools/gpu_bench.sh $d $r --models $m --schemes $s \
        --tokens 1,8,32,64,128,512,2048,4096,8192 $O $R > $r/run.log 2>&1
      echo "$m rc $? ($((SECONDS - start)) s)"
      grep -h "| auto |" $r/results.md 2>/dev/null | awk -F'|' '{gsub(/ /,"",$14); v=$14; sub(/x.*/,"",v); if (v+0 < 1.0) print "below torch:", $2, $3, $5, $14}'
    done ;;
  chunks)
    tools/gpu_unpack.sh .gpu/o
    LD_LIBRARY_PATH=$PWD/.gpu/o timeout 100 .gpu/o/qmoe_cuda_tests \
      --gtest_filter='RandomLayerEdges.*:CudaRouting.*:ChainedLaunches.*:CudaMoeLayerApi.*' > $o/o_tests.log 2>&1
    echo "o tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST|^\[       OK" $o/o_tests.log
    grep -h "Failure" -A8 $o/o_tests.log | head -30
    LD_LIBRARY_PATH=$PWD/.gpu/o timeout 45 compute-sanitizer --tool memcheck .gpu/o/qmoe_cuda_tests \
      --gtest_filter='RandomLayerEdges.DecodeKernelSplitsBusyExpertsIntoChunks' > $o/o_memcheck.log 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/o_memcheck.log
    b() {  # binary, label, options...
      local x=$1 l=$2; shift 2
      (( SECONDS - start > 190 )) && { echo "skip $l"; return; }
      local c=32; [[ $x == n ]] && c=1073741824
      QMOE_MMA_CHUNK_SLOTS=$c LD_LIBRARY_PATH=$PWD/.gpu/o timeout 60 .gpu/o/qmoe bench $O "$@" > $o/$l.$x.log 2>&1
      echo "$l $x rc $? ($((SECONDS - start)) s)"
    }
    for x in n o; do
      b $x skew_kimi --models kimi-k2-tp8 --schemes w4a16_g32,mxfp4 --tokens 128,512 --routing skewed
      b $x skew_small --models qwen3-30b-a3b,gpt-oss-120b --schemes mxfp4,nvfp4a16 --tokens 128,512 --routing skewed
    done
    for r in 1 2; do for x in n o; do
      b $x uni$r --models qwen3-30b-a3b,mixtral-8x7b,deepseek-v3 --schemes w4a16_g128,fp8_channel --tokens 1,8,64
    done; done ;;
  *) echo "calls.sh: check, torch, status, skewed or chunks"; exit 2 ;;
esac
tar czf $OUT/n_$part.tgz -C $OUT n && rm -rf $o
