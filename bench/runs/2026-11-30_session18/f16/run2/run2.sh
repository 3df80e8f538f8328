#!/usr/bin/env bash
# Carry [".gpu/f16"]. Logs to $OUT.
#   bash .gpu/f16/run2.sh tests   whole GPU suite + memcheck small set + memcheck of the f16 prefill tests
#   bash .gpu/f16/run2.sh bench   f16 sweep (decode / prefill / auto) and the auto path with torch baselines
set -u
part=${1:?tests or bench}
B=.gpu/f16
for f in $B/*.gz; do [[ -e $f ]] && gunzip -f $f; done; chmod +x $B/qmoe $B/qmoe_cuda_tests
export LD_LIBRARY_PATH=$PWD/$B QMOE_TEST_DATA_DIR=$PWD/tests/data
w=$OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $w/gpu_$part.txt 2>&1
if [[ $part == tests ]]; then
  mkdir -p $w/tests
  timeout 330 $B/qmoe_cuda_tests > $w/tests/gpu_tests.log 2>&1; echo "suite exit $?"
  grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran" $w/tests/gpu_tests.log | head -20
  grep -E "f16" $w/tests/gpu_tests.log | head -80
  small='CudaMoeLayerApi.*:CudaRouting.*:RandomLayerEdges.*:PrefillKernels.EdgeCases:DequantizedPrefill.EdgeCases:Fp4Mainloop.*:Int4Mainloop.*:DequantizedPrefill.WeightsAreTheCpusBitForBit:DequantizedPrefill.HalfPrecisionModels'
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $B/qmoe_cuda_tests --gtest_filter="$small" > $w/tests/memcheck.log 2>&1
  echo "memcheck exit $?"; tail -n 3 $w/tests/memcheck.log
  tar -C $w -czf $w/tests_logs.tgz tests && rm -rf $w/tests; exit 0
fi
mkdir -p $w/bench
start=$SECONDS
for spec in ${SPECS:-mixtral-8x7b:w4a16_g128 qwen3-30b-a3b:w4a16_g128 deepseek-v3:w4a16_g128}; do
  IFS=: read m s <<< "$spec"
  (( SECONDS - start > ${BUDGET:-200} )) && { echo "skip $m"; continue; }
  timeout 120 $B/qmoe bench --f16 --models $m --schemes $s --tokens ${TOKENS:-8,16,32,64,128,512,1024,4096} \
    --gemm-paths decode,prefill,auto --rotations 2 --replays 5 > $w/bench/sweep_$m.log 2>&1
  echo "sweep $m exit $?"
done
grep -h "f16" $w/bench/sweep_*.log
mkdir -p $w/bench/auto
(( SECONDS - start < 330 )) && timeout 200 bash tools/gpu_bench.sh $B $w/bench/auto --f16 --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 \
  --schemes bf16,w4a16_g128,w8a16 --tokens 1,64,1024,4096,8192 --rotations 2 --replays 5 > $w/bench/auto/run.log 2>&1
echo "auto exit $?"; grep -E "^\|" $w/bench/auto/*.md 2>/dev/null | head -60
tar -C $w -czf $w/bench_logs.tgz bench && rm -rf $w/bench
