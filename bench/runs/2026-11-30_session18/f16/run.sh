#!/usr/bin/env bash
# Carry [".gpu/f16"]. Logs to $OUT.
#   bash .gpu/f16/run.sh tests   whole GPU suite + memcheck (small set) + racecheck (tools/gpu_test.sh)
#   bash .gpu/f16/run.sh extra   memcheck of the f16 prefill tests; the f16 sweep (decode / prefill / auto)
set -u
part=${1:?tests or extra}
B=.gpu/f16
for f in $B/*.gz; do [[ -e $f ]] && gunzip -f $f; done; chmod +x $B/qmoe $B/qmoe_cuda_tests
export LD_LIBRARY_PATH=$PWD/$B QMOE_TEST_DATA_DIR=$PWD/tests/data
w=$OUT
if [[ $part == tests ]]; then
  mkdir -p $w/tests
  timeout 570 bash tools/gpu_test.sh $B $w/tests; echo "gpu_test exit $?"
  grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran" $w/tests/gpu_tests.log | head -20
  grep -E "f16" $w/tests/gpu_tests.log | head -60
  tail -n 2 $w/tests/memcheck.log $w/tests/racecheck.log
  tar -C $w -czf $w/tests_logs.tgz tests && rm -rf $w/tests; exit 0
fi
mkdir -p $w/extra
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $B/qmoe_cuda_tests \
  --gtest_filter='DequantizedPrefill.WeightsAreTheCpusBitForBit:DequantizedPrefill.HalfPrecisionModels' > $w/extra/memcheck_f16.log 2>&1
echo "memcheck f16 exit $?"; tail -n 2 $w/extra/memcheck_f16.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $w/extra/gpu.txt 2>&1
start=$SECONDS
for spec in ${SPECS:-mixtral-8x7b:bf16,w4a16_g128,w8a16 qwen3-30b-a3b:bf16,w4a16_g128,w8a16 deepseek-v3:w4a16_g128}; do
  IFS=: read m s <<< "$spec"
  (( SECONDS - start > ${BUDGET:-330} )) && { echo "skip $m"; continue; }
  timeout 150 $B/qmoe bench --f16 --models $m --schemes $s --tokens ${TOKENS:-8,16,32,64,128,256,512,1024,4096} \
    --gemm-paths decode,prefill,auto --rotations 2 --replays 5 > $w/extra/sweep_$m.log 2>&1
  echo "sweep $m exit $?"
done
cat $w/extra/sweep_*.log | grep -v "^device" | head -200
tar -C $w -czf $w/extra_logs.tgz extra && rm -rf $w/extra
