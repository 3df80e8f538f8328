#!/usr/bin/env bash
# For the next session (not run): branch wip/int8-rows (`3be009b` on main `d131600`, built into
# .gpu/r, full): W4A8-INT8 layers with one scale per row in kernel instances of their own
# (Int4Int8Scales<.., kWholeRows>) whose k-loop issues each k-tile's MMAs while the previous k-tile's
# run (double-buffered code registers, as the bf16 formats), the sums converted once after the loop;
# in the shared instances ptxas had spilled ~1.1 KB, the g128 loop included, so they stay as they
# are (same SASS size as main). Against main's qmoe: carry [".gpu/r", ".gpu/n/qmoe.xz",
# ".gpu/n/libfmt.so.9.xz"] (main's test binary is not needed). Run in the 29th session carrying all
# of .gpu/n, to finish the racecheck of main's suite that the first call's time limit cut short
# (step 3: CudaMoeLayerApi after its first test, the longest last, in the time left).
# 1. Its tests (the kernel's: per-row cases take the new instances, the largest-group case their
#    narrow-tile spans loop; prefill layers; the W4A8-INT8 random layers); memcheck.
# 2. A/B main vs branch: W4A8-INT8 per row (and g128, unchanged code: a control) at 2048-8192 tokens
#    on three shapes, two rounds. Then the per-row switch again if it moved (decode vs prefill).
set -u
tools/gpu_unpack.sh .gpu/r .gpu/n
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/r timeout 200 .gpu/r/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*:PrefillKernels.MatchTheCpuBackend:Formats/RandomLayers.MatchTheCpuBackend/w4a8_int8*' \
  > $OUT/r_tests.log 2>&1
echo "r tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/r_tests.log | head
LD_LIBRARY_PATH=$PWD/.gpu/r timeout 100 compute-sanitizer --tool memcheck .gpu/r/qmoe_cuda_tests \
  --gtest_filter='Int4Int8Mainloop.*' > $OUT/r_memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/r_memcheck.log | tail -2
timeout 150 tools/gpu_ab.sh .gpu/n .gpu/r $OUT/ab_r 2 --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 \
  --schemes w4a8_int8_channel,w4a8_int8 --tokens 2048,4096,8192 --rotations 2 --replays 5 > /dev/null 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_r/summary.txt
for job in "mixtral-8x7b 24,32,36,40" "deepseek-v3 96,128,160"; do
  set -- $job
  LD_LIBRARY_PATH=$PWD/.gpu/r timeout 30 .gpu/r/qmoe bench --models $1 --schemes w4a8_int8_channel --tokens $2 \
    --gemm-paths decode,prefill --rotations 2 --replays 5 >> $OUT/r_switch.txt 2>&1
done
grep -h "w4a8" $OUT/r_switch.txt | cut -c1-100
LD_LIBRARY_PATH=$PWD/.gpu/n timeout 90 compute-sanitizer --tool racecheck .gpu/n/qmoe_cuda_tests \
  --gtest_filter='CudaMoeLayerApi.UnalignedOutputMatchesAligned:CudaMoeLayerApi.LayersSharingAWorkspaceMatchTheirOwn' \
  > $OUT/n_racecheck.log 2>&1
echo "racecheck rc $? ($((SECONDS - start)) s)"; grep -E "SUMMARY|PASSED|FAILED" $OUT/n_racecheck.log | tail -2
left=$((575 - SECONDS))
if ((left > 60)); then
  LD_LIBRARY_PATH=$PWD/.gpu/n timeout $left compute-sanitizer --tool racecheck .gpu/n/qmoe_cuda_tests \
    --gtest_filter='CudaMoeLayerApi.BenchTimingSplitsTheGemms' > $OUT/n_racecheck_bench.log 2>&1
  echo "racecheck (bench timing) rc $? ($((SECONDS - start)) s)"; grep -E "SUMMARY|PASSED|FAILED" $OUT/n_racecheck_bench.log | tail -2
fi
cd $OUT && tar czf ab_r.tgz ab_r && rm -rf ab_r
