#!/usr/bin/env bash
# For the next session (not run yet): branch wip/gather-gemm1 (bench/runs/2026-12-01_session22/
# wip_gather_gemm1.patch, `git am`-able on main as of this session's end). Build it into .gpu/g (qmoe,
# qmoe_cuda_tests, libfmt.so.9; xz), then in one device call: its kernel and layer tests with a
# timeout (a protocol bug would hang, not fail), memcheck / racecheck of the kernel tests, then the
# A/B of the same binary without (A, QMOE_GATHER_GEMM1=0) and with the gather (B), layer µs.
set -u
d=.gpu/g; xz -d $d/*.xz; chmod +x $d/qmoe $d/qmoe_cuda_tests
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
start=$SECONDS
f='Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:CudaMoeLayerApi.*:RandomLayerEdges.*:W4Prefill.*:PrefillKernels.EdgeCases'
timeout 150 $d/qmoe_cuda_tests --gtest_filter="$f" > $OUT/g_tests.log 2>&1; echo "tests rc $? ($((SECONDS - start)) s)"
grep -hE "^\[  (PASSED|FAILED)|FAILED|gathered input rows: [1-9]" $OUT/g_tests.log | head -20
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $d/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*' > $OUT/g_memcheck.log 2>&1; echo "memcheck rc $?"
mkdir -p .gpu/g0; cp $d/libfmt.so.9 .gpu/g0/
printf '#!/bin/sh\nQMOE_GATHER_GEMM1=0 exec "%s/qmoe" "$@"\n' "$PWD/$d" > .gpu/g0/qmoe; chmod +x .gpu/g0/qmoe
timeout 200 tools/gpu_ab.sh .gpu/g0 $d $OUT/ab 3 --models deepseek-v3-tp8,kimi-k2-tp8,qwen3-30b-a3b,gpt-oss-120b,mixtral-8x7b \
  --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 2048,4096 --rotations 2 --replays 5 > $OUT/ab_summary.txt 2>&1
echo "ab rc $? ($((SECONDS - start)) s)"; cat $OUT/ab_summary.txt
left=$((560 - (SECONDS - start)))
timeout $left compute-sanitizer --tool racecheck $d/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*' > $OUT/g_racecheck.log 2>&1; echo "racecheck rc $?"
grep -hE "SUMMARY|Race" $OUT/g_memcheck.log $OUT/g_racecheck.log | head
tar czf $OUT/ab.tgz -C $OUT ab
