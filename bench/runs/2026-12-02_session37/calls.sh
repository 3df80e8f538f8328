#!/usr/bin/env bash
# Device calls of the thirty-seventh session (after the thirty-sixth's next_first.sh parts suite,
# race and chunksize on `.gpu/q`, and two inline bench calls on `.gpu/p`: README.md).
#   early (carry [".gpu/r"]: branch wip/early-inputs, the decode tensor-core kernel with an A/B
#         switch QMOE_MMA_EARLY_INPUTS=1: n-tiles past the first load the next 8-element group's
#         inputs before the current group's mmas) the busy-experts, random-layer, activation and
#         chained-launch tests with the switch on, memcheck of the busy-experts test with it on,
#         then qmoe bench on the decode path (--gemm-paths decode) where the kernel runs 2 or 4
#         n-tiles (16-32 slots per pass), switch off (label a) and on (label b) alternately, two
#         rounds
#   final (BIN=t; carry [".gpu/q", ".gpu/t"]) see the part's comment
set -u
d=.gpu/${BIN:-r}; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
o=$OUT/n; mkdir -p $o
start=$SECONDS
part=${1:-}
O="--rotations 2 --replays 5 --gemm-paths decode"
case $part in
  early)
    f='RandomLayerEdges.*:Formats/RandomLayers.*:ChainedLaunches.*'
    QMOE_MMA_EARLY_INPUTS=1 timeout 200 $d/qmoe_cuda_tests --gtest_filter="$f" > $o/b_tests.log 2>&1
    echo "tests (switch on) rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/b_tests.log
    grep -h "Failure" -A8 $o/b_tests.log | head -30
    QMOE_MMA_EARLY_INPUTS=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $d/qmoe_cuda_tests \
      --gtest_filter='RandomLayerEdges.DecodeKernelSplitsBusyExpertsIntoChunks' > $o/b_memcheck.log 2>&1
    echo "memcheck (switch on) rc $? ($((SECONDS - start)) s)"; tail -1 $o/b_memcheck.log
    b() {  # label (a: off, b: on), log name, options...
      local l=$1 n=$2; shift 2
      (( SECONDS - start > 520 )) && { echo "skip $n $l"; return; }
      QMOE_MMA_EARLY_INPUTS=$([[ $l == b ]] && echo 1 || echo 0) timeout 60 $d/qmoe bench $O "$@" > $o/$n.$l.log 2>&1
      echo "$n $l rc $? ($((SECONDS - start)) s)"
    }
    for r in 1 2; do
      for l in a b; do
        b $l mixtral_r$r --models mixtral-8x7b --schemes w4a16_g128,mxfp4,nvfp4a16,fp8_channel,bf16 --tokens 32,64,128,256
        b $l dsv3_r$r --models deepseek-v3 --schemes w4a16_g128,mxfp4,nvfp4a16,fp8_channel,bf16 --tokens 256,512
        b $l small_r$r --models qwen3-30b-a3b --schemes w4a16_g128,mxfp4,nvfp4a16,fp8_channel,bf16 --tokens 128,256
        b $l kimi_r$r --models kimi-k2-tp8 --schemes w4a16_g32,mxfp4,nvfp4a16 --tokens 512
      done
    done ;;
  final)
    # (BIN=t; carry [".gpu/q", ".gpu/t"]: `.gpu/t` = branch wip/decode-fusion: the dense decode
    # instances' inputs loaded first (no switch), and the decode path's input conversion and its
    # quantization, and the activation and its quantization, each pair in one launch (switch
    # QMOE_FUSED_QUANT=0: two launches, as before)) the decode, random-layer, chained-launch, API and
    # fixture tests (fusion on), memcheck of the busy-experts test and the static FP8 layers, then
    # layer µs with the fusion off (label a) / on (b) on the schemes that quantize their activations,
    # and bf16 on the decode path on `.gpu/q` (label a, main's kernel) / `.gpu/t` (b), rounds while
    # the call's time lasts
    f='RandomLayerEdges.*:Formats/RandomLayers.*:ChainedLaunches.*:CudaMoeLayerApi.*:CudaFixtures.*:CudaRouting.*'
    timeout 150 $d/qmoe_cuda_tests --gtest_filter="$f" > $o/t_tests.log 2>&1
    echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/t_tests.log
    grep -h "Failure" -A8 $o/t_tests.log | head -30
    timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $d/qmoe_cuda_tests \
      --gtest_filter='RandomLayerEdges.DecodeKernelSplitsBusyExpertsIntoChunks:Formats/RandomLayers.MatchTheCpuBackend/fp8_tensor_static' \
      > $o/t_memcheck.log 2>&1
    echo "memcheck rc $? ($((SECONDS - start)) s)"; tail -1 $o/t_memcheck.log
    tools/gpu_unpack.sh .gpu/q
    for r in 1 2; do
      for l in a b; do
        (( SECONDS - start > ${LIMIT:-230} )) && { echo "skip fused r$r $l"; continue; }
        QMOE_FUSED_QUANT=$([[ $l == b ]] && echo 1 || echo 0) timeout 60 $d/qmoe bench --rotations 2 --replays 5 \
          --schemes fp8_channel,fp8_block,int8,w4a8_fp8,w4a8_int8 --models qwen3-30b-a3b,mixtral-8x7b,deepseek-v3 \
          --tokens 1,8,32,64 > $o/fused_r$r.$l.log 2>&1
        echo "fused r$r $l rc $? ($((SECONDS - start)) s)"
      done
      for l in a b; do
        (( SECONDS - start > ${LIMIT:-230} )) && { echo "skip bf16 r$r $l"; continue; }
        bin=$([[ $l == a ]] && echo .gpu/q || echo $d)
        LD_LIBRARY_PATH=$PWD/$bin timeout 60 $bin/qmoe bench $O --schemes bf16 --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 \
          --tokens 32,128,256 > $o/bf16_r$r.$l.log 2>&1
        echo "bf16 r$r $l rc $? ($((SECONDS - start)) s)"
      done
    done ;;
  *) echo "calls.sh: early or final"; exit 2 ;;
esac
tar czf $OUT/n_$part.tgz -C $OUT n && rm -rf $o
