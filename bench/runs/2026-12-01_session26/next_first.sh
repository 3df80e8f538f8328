#!/usr/bin/env bash
# For the next session (not run), one call: main `2f3dc8f`'s build in .gpu/n (qmoe,
# qmoe_cuda_tests, libfmt.so.9; xz; built on the Debian build machine).
# 1. The API tests, with the new CudaMoeLayerApi.BenchTimingSplitsTheGemms (bench --split-gemms).
# 2. bf16 on the TP8 shapes at 4096 / 8192 with GEMM1 and GEMM2 timed apart, and torch's baseline
#    in the same call (tools/bench_torch_baseline.py now also times bf16's GEMM2 alone): which
#    GEMM of Kimi-K2 TP8 at 8192 (0.93x torch) is behind.
# 3. With the time left, the whole suite and sanitizers (tools/gpu_test.sh; last whole run on
#    `1a4e208`, twenty-fourth session).
set -u
tools/gpu_unpack.sh .gpu/n
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/n timeout 100 .gpu/n/qmoe_cuda_tests --gtest_filter='CudaMoeLayerApi.*' > $OUT/api_tests.log 2>&1
echo "api tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED" $OUT/api_tests.log | head
mkdir -p $OUT/split
QMOE_COMMIT=2f3dc8f timeout 150 tools/gpu_bench.sh .gpu/n $OUT/split --models deepseek-v3-tp8,kimi-k2-tp8,qwen3-30b-a3b \
  --schemes bf16 --tokens 4096,8192 --split-gemms --rotations 2 --replays 5 > /dev/null 2>&1
echo "split rc $? ($((SECONDS - start)) s)"; cat $OUT/split/qmoe_bench.log $OUT/split/torch.log
mkdir -p $OUT/suite
timeout $((570 - (SECONDS - start))) tools/gpu_test.sh .gpu/n $OUT/suite > $OUT/suite/tail.txt 2>&1
echo "suite rc $? ($((SECONDS - start)) s)"; tail -n 5 $OUT/suite/tail.txt; grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/suite/*.log
cd $OUT && tar czf logs.tgz api_tests.log split suite && rm -rf split suite
