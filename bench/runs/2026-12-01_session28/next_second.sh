#!/usr/bin/env bash
# For the next session (not run): branch wip/int8-planes (`7bd389f` on main `e5ba808`, built into
# .gpu/p, full), two commits: `4eb4877` the int8 register kernel's codes in two planes of 16 bytes
# per thread, so that each warp's code load reads 512 contiguous bytes (ncu, 28th session: 35% of
# its shared-load wavefronts were bank conflicts); `7bd389f` every register-kernel format's input
# descriptors from stage 0's low word plus offsets (no mask and shift per address in the k-loop:
# ~8 fewer instructions per k-tile). Against main (.gpu/n, full; carry both: the tree is ~31 MB).
# 1. Its tests: the kernels' (int8 and bf16 formats), prefill layers, the random layers of the
#    register-kernel schemes; memcheck of the kernels' tests.
# 2. A/B main vs branch: W4A8-INT8 g128 and per row, MXFP4, NVFP4 A16, W4A16 g32 at 2048-8192
#    tokens on three shapes, two rounds. MXFP4 / NVFP4 / g32 move by the descriptors alone.
# 3. ncu of the branch's W4A8-INT8 g128 GEMM1 on Mixtral at 4096 tokens: warp state statistics
#    and the sampled stall reasons per SASS instruction (what keeps the two consumer warpgroups'
#    MMAs and promotions from overlapping: issue slots 57%, tensor pipe 47% in the 28th session).
# Land what is faster; else delete the branch. (Run in the 29th session with the timeouts cut to fit
# one 600 s call, the ncu step moved before the A/B: the A/B writes its summary after every round.)
set -u
tools/gpu_unpack.sh .gpu/p .gpu/n
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/p timeout 150 .gpu/p/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*:Fp4Mainloop.*:Int4Mainloop.*:PrefillKernels.MatchTheCpuBackend:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8*:Formats/RandomLayers.MatchTheCpuBackend/mxfp4:Formats/RandomLayers.MatchTheCpuBackend/nvfp4a16:Formats/RandomLayers.MatchTheCpuBackend/w4a16_asym_g32' \
  > $OUT/p_tests.log 2>&1
echo "p tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/p_tests.log | head
LD_LIBRARY_PATH=$PWD/.gpu/p timeout 100 compute-sanitizer --tool memcheck .gpu/p/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*:Fp4Mainloop.*:Int4Mainloop.*' > $OUT/p_memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/p_memcheck.log | tail -2
LD_LIBRARY_PATH=$PWD/.gpu/p timeout 90 ncu --clock-control none --import-source no --section WarpStateStats \
  --section SchedulerStats --section SourceCounters --section ComputeWorkloadAnalysis -k regex:fp4_grouped_gemm \
  --launch-count 1 -o $OUT/int8_stalls .gpu/p/qmoe bench --models mixtral-8x7b --schemes w4a8_int8 --tokens 4096 \
  --rotations 1 --replays 1 > $OUT/int8_stalls.log 2>&1
echo "ncu rc $? ($((SECONDS - start)) s)"
ncu -i $OUT/int8_stalls.ncu-rep --page details > $OUT/int8_stalls.txt 2>&1
ncu -i $OUT/int8_stalls.ncu-rep --page source --csv --print-source sass > $OUT/int8_stalls_sass.csv 2>&1
grep -iE "stall|Warp Cycles|Issue Slots|Eligible" $OUT/int8_stalls.txt | head -20
timeout 220 tools/gpu_ab.sh .gpu/n .gpu/p $OUT/ab_p 2 --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 \
  --schemes w4a8_int8,w4a8_int8_channel,mxfp4,nvfp4a16,w4a16_g32 --tokens 2048,4096,8192 --rotations 2 \
  --replays 5 > /dev/null 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_p/summary.txt
cd $OUT && tar czf ab_p.tgz ab_p int8_stalls.txt int8_stalls_sass.csv int8_stalls.log && rm -rf ab_p int8_stalls.ncu-rep
