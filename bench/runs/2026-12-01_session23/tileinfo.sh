#!/usr/bin/env bash
# The register kernel with its tiles published by the producer warpgroup's second warp (.gpu/t)
# against main (.gpu/n): the 4-bit kernel and layer tests (timeouts: a barrier bug would hang), the
# A/B in layer µs, the decode / prefill switch sweep of both builds, memcheck and racecheck of the
# kernel tests.
set -u
for d in .gpu/n .gpu/t; do xz -d $d/*.xz; chmod +x $d/qmoe $d/qmoe_cuda_tests; done
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
f='Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:CudaMoeLayerApi.*:RandomLayerEdges.*:W4Prefill.*:ChainedLaunches.*'
LD_LIBRARY_PATH=$PWD/.gpu/t timeout 200 .gpu/t/qmoe_cuda_tests --gtest_filter="$f" > $OUT/t_tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED|CTAs 2: [1-9]" $OUT/t_tests.log | head -20
timeout 150 tools/gpu_ab.sh .gpu/n .gpu/t $OUT/ab 3 --models deepseek-v3-tp8,kimi-k2-tp8,qwen3-30b-a3b,gpt-oss-120b \
  --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 512,2048,4096 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab/summary.txt
for d in n t; do
  LD_LIBRARY_PATH=$PWD/.gpu/$d timeout 60 .gpu/$d/qmoe bench --models deepseek-v3-tp8,qwen3-30b-a3b,gpt-oss-120b \
    --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 160,192,224,288,352,416,480,544,608,704,768 --rotations 2 --replays 5 \
    --gemm-paths decode,prefill --json $OUT/switches_$d.json > $OUT/switches_$d.txt 2>&1
  echo "switches $d rc $? ($((SECONDS - start)) s)"
done
export LD_LIBRARY_PATH=$PWD/.gpu/t
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/t/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*' > $OUT/t_memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"
left=$((570 - (SECONDS - start)))
timeout $left compute-sanitizer --tool racecheck .gpu/t/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $OUT/t_racecheck.log 2>&1
echo "racecheck rc $? ($((SECONDS - start)) s)"
grep -hE "SUMMARY|Race|^\[  (PASSED|FAILED)" $OUT/t_memcheck.log $OUT/t_racecheck.log | head
cd $OUT && tar czf ab.tgz ab && rm -rf ab
