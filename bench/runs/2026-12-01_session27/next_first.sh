#!/usr/bin/env bash
# For the next session (not run), one call: main `dbf6646` (.gpu/n: qmoe, qmoe_cuda_tests,
# libfmt.so.9; xz; built on the Debian build machine).
# 1. The int8 register kernel's direct test after test_fp4_gemm.cpp's helpers were shared with the
#    bf16 formats' cases (`b5640c0`) and the -128 inputs (`c6be5d7`), not run on a GPU, and those cases.
# 2. ncu of the int8 register kernel's two launches (W4A8-INT8 Mixtral at 4096 tokens: 872 TOP/s
#    against FP8's 1323) and of the FP8 CUTLASS kernel's on the same shape: tensor pipe activity,
#    issue slots, L2 / DRAM throughput, warp stall reasons (is it the promotion, the wait for each
#    k-tile's MMAs, or the loads).
# 3. The whole suite (tools/gpu_test.sh) with the time left.
set -u
d=.gpu/n; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/$d timeout 150 $d/qmoe_cuda_tests --gtest_filter='Int4Int8Mainloop.*:Fp4Mainloop.*:Int4Mainloop.*' \
  > $OUT/kernel_tests.log 2>&1
echo "kernel tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/kernel_tests.log | head
mkdir -p $OUT/ncu
for job in "w4a8_int8 regex:fp4_grouped_gemm" "fp8_channel regex:device_kernel"; do
  set -- $job
  LD_LIBRARY_PATH=$PWD/$d timeout 120 ncu --clock-control none --set full --import-source no -k $2 --launch-count 2 \
    -o $OUT/ncu/$1 $d/qmoe bench --models mixtral-8x7b --schemes $1 --tokens 4096 --rotations 1 --replays 1 \
    > $OUT/ncu/$1.log 2>&1; echo "ncu $1 rc $? ($((SECONDS - start)) s)"
  ncu -i $OUT/ncu/$1.ncu-rep --page details > $OUT/ncu/$1.details.txt 2>&1
  grep -E "fp4_grouped|device_kernel|Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy" \
    $OUT/ncu/$1.details.txt | cut -c1-160 | head -14
  rm -f $OUT/ncu/$1.ncu-rep
done
mkdir -p $OUT/suite
timeout $((575 - (SECONDS - start))) tools/gpu_test.sh $d $OUT/suite > $OUT/suite/tail.txt 2>&1
echo "suite rc $? ($((SECONDS - start)) s)"; tail -n 5 $OUT/suite/tail.txt; grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/suite/*.log
cd $OUT && tar czf logs.tgz kernel_tests.log ncu suite && rm -rf ncu suite
