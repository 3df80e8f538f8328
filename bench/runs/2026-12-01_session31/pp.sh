#!/usr/bin/env bash
# wip/pp-terms (.gpu/pp): bf16 GEMM2 terms on the large tile as pingpong (QMOE_EXP_PP=1: 128 x 128,
# 2: 128 x 192) against the cooperative 128 x 192 (0). Tests of every tile and edge cases under
# each; then three-way alternated rounds on the TP8 shapes with the GEMMs timed apart; torch once.
set -u
d=.gpu/pp; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
for pp in 1 2; do
  QMOE_EXP_PP=$pp timeout 150 $d/qmoe_cuda_tests --gtest_filter='PrefillKernels.EveryTileMatchesTheCpuBackend:PrefillKernels.EdgeCases' > $OUT/tests_pp$pp.log 2>&1
  echo "tests pp$pp rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)" $OUT/tests_pp$pp.log
done
for r in 1 2; do for pp in 0 1 2; do
  QMOE_EXP_PP=$pp timeout 90 $d/qmoe bench --models kimi-k2-tp8,deepseek-v3-tp8 --schemes bf16 --tokens 2048,4096,8192,16384 \
    --split-gemms --rotations 2 --replays 5 > $OUT/bench_pp${pp}_r$r.txt 2>&1
  echo "bench pp$pp r$r rc $? ($((SECONDS - start)) s)"
done; done
for pp in 0 1 2; do echo "== pp$pp"; grep -h "auto" $OUT/bench_pp${pp}_r*.txt; done
if (( SECONDS - start < 330 )); then
  mkdir -p $OUT/torch; timeout 200 tools/gpu_bench.sh $d $OUT/torch --models kimi-k2-tp8,deepseek-v3-tp8 --schemes bf16 \
    --tokens 4096,8192 --split-gemms > /dev/null 2>&1; echo "torch rc $? ($((SECONDS - start)) s)"
  grep -h -E "kimi|deepseek" $OUT/torch/results.md 2>/dev/null | head -20
fi
