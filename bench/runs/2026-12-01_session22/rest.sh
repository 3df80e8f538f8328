#!/usr/bin/env bash
# Call 4: b2 (wip/bf16-terms + routing weights loaded before the mainloop) on the GPU suites call 3
# did not run (ChainedLaunches, DequantizedPrefill, PrefillKernels, the conversions), then qmoe b2
# vs torch's grouped GEMMs on the TP8 many-expert shapes at 2048 tokens.
set -u
d=.gpu/b2; xz -d $d/*.xz; chmod +x $d/qmoe $d/qmoe_cuda_tests
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/$d timeout 240 $d/qmoe_cuda_tests \
  --gtest_filter='-Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:CudaMoeLayerApi.*:RandomLayerEdges.*' > $OUT/b2_rest.log 2>&1
echo "b2 rest rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED|tests from.*total" $OUT/b2_rest.log
o=$OUT/torch; mkdir -p $o
QMOE_COMMIT=b2 timeout 300 tools/gpu_bench.sh $d $o --models deepseek-v3-tp8,kimi-k2-tp8 --schemes nvfp4a16,mxfp4,w4a16_g32 \
  --tokens 2048 --rotations 2 --replays 5 > $o/tail.txt 2>&1
echo "torch bench rc $? ($((SECONDS - start)) s)"; grep -h "| auto |\|^| model" $o/results.md
tar czf $OUT/torch.tgz -C $OUT torch
