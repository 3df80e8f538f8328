#!/usr/bin/env bash
# For the next session (not run yet), call 2 of 2, same build in .gpu/n: racecheck of the register
# kernel tests (the terms epilogue's shared tile and barriers; ~210 s), then each kernel's µs in a
# DeepSeek-V3 TP8 NVFP4 forward at 2048 tokens (ncu), then the 4-bit switches with the terms
# (decode vs prefill layer µs around the rows per expert in gemm_tuning.h: 14-24 rows are 224-384
# tokens on Qwen3-30B-A3B, 448-768 on DeepSeek-V3 TP8 and gpt-oss-120b).
set -u
d=.gpu/n; xz -d $d/*.xz; chmod +x $d/qmoe $d/qmoe_cuda_tests
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
timeout 260 compute-sanitizer --tool racecheck $d/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' \
  > $OUT/racecheck_kernels.log 2>&1; echo "racecheck rc $? ($((SECONDS - start)) s)"
grep -hE "^\[  (PASSED|FAILED)|SUMMARY" $OUT/racecheck_kernels.log
timeout 120 ncu --metrics gpu__time_duration.sum $d/qmoe bench --models deepseek-v3-tp8 --schemes nvfp4a16 \
  --tokens 2048 --rotations 1 --replays 1 > $OUT/ncu_kernels.txt 2>&1; echo "ncu rc $? ($((SECONDS - start)) s)"
grep -E "^  [a-zA-Z_].*\(|gpu__time_duration" $OUT/ncu_kernels.txt | head -60
timeout 150 $d/qmoe bench --models deepseek-v3-tp8,qwen3-30b-a3b,gpt-oss-120b --schemes nvfp4a16,mxfp4,w4a16_g32 \
  --tokens 224,288,352,416,480,544,608,704,768 --rotations 2 --replays 5 --gemm-paths decode,prefill \
  --json $OUT/switches.json > $OUT/switches.txt 2>&1; echo "switches rc $? ($((SECONDS - start)) s)"
