#!/usr/bin/env bash
# wip/pp-terms landed form (.gpu/pp2): GroupedTile::kLarge of the FP8 / INT8 / bf16 / f16 grouped
# GEMMs is pingpong 128 x 192 (was cooperative 128 x 192); BackendOptions::repacked_copy. 1. Tests of every tile,
# the f16 models, RepackedCopy (now through the Backend interface too). 2. Main (.gpu/n, cooperative) against it on the planned bf16 TP8 rows, alternated,
# GEMMs apart. 3. Whether more GEMM2s should take it: prefill:3/1 (GEMM2 on the pingpong tile)
# against the plan (128 x 256 GEMM2) for FP8 / INT8 / bf16 on five shapes. 4. (5. below.) 6. Torch on the bf16 TP8 rows.
set -u
tools/gpu_unpack.sh .gpu/n .gpu/pp2
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/.gpu/pp2
start=$SECONDS
timeout 240 .gpu/pp2/qmoe_cuda_tests --gtest_filter='PrefillKernels.EveryTileMatchesTheCpuBackend:DequantizedPrefill.HalfPrecisionModels:RepackedCopy.*' > $OUT/tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|^\[       OK|FAILED" $OUT/tests.log | tail -4
tp8="--models kimi-k2-tp8,deepseek-v3-tp8 --schemes bf16 --tokens 2048,4096,8192,16384 --split-gemms --rotations 2 --replays 5"
for r in 1 2; do for b in n pp2; do
  timeout 60 .gpu/$b/qmoe bench $tp8 > $OUT/tp8_${b}_r$r.txt 2>&1; echo "tp8 $b r$r rc $? ($((SECONDS - start)) s)"
done; done
for b in n pp2; do echo "== $b"; grep -h auto $OUT/tp8_${b}_r*.txt | cut -c1-50,63-74,110-140; done
run() { timeout 120 .gpu/pp2/qmoe bench --gemm-paths auto,prefill:3/1 --split-gemms --rotations 2 --replays 5 "$@"; }
run --models deepseek-v3-tp8,kimi-k2-tp8,qwen3-30b-a3b,deepseek-v3,mixtral-8x7b --schemes fp8_channel,int8 --tokens 2048,8192 > $OUT/gemm2_q.txt 2>&1
echo "gemm2 fp8/int8 rc $? ($((SECONDS - start)) s)"
run --models qwen3-30b-a3b,mixtral-8x7b --schemes bf16 --tokens 2048,8192 > $OUT/gemm2_bf16.txt 2>&1
echo "gemm2 bf16 rc $? ($((SECONDS - start)) s)"
grep -h -E "auto|prefill" $OUT/gemm2_q.txt $OUT/gemm2_bf16.txt | cut -c1-50,63-74,110-140
# 5. W4A16 g128 between the decode kernels and the register kernel: since afbf7e2 the register
# kernel (from 22 rows per expert with few experts, 16-17 with many) replaced CUTLASS's mixed-input
# kernel (from 12 / 14 rows), so 12-22 rows run the decode kernels. Decode, register (prefill with
# the copy) and CUTLASS (prefill without it) on three shapes at 8-64 rows per expert.
sweep() { timeout 100 .gpu/pp2/qmoe bench --schemes w4a16_g128 --rotations 2 --replays 5 "$@"; }
for m in "mixtral-8x7b 32,48,64,80,96,128,160,192,256" "qwen3-30b-a3b 128,192,224,256,320,384,512,768,1024" \
         "deepseek-v3 256,384,448,512,640,768,1024,1536,2048"; do
  set -- $m
  sweep --models $1 --tokens $2 --gemm-paths decode,prefill > $OUT/mid_$1_copy.txt 2>&1
  sweep --models $1 --tokens $2 --gemm-paths prefill --no-repacked-copy > $OUT/mid_$1_one.txt 2>&1
  echo "mid $1 rc $? ($((SECONDS - start)) s)"
done
for f in $OUT/mid_*_copy.txt; do paste -d'|' <(grep -E "decode|prefill" $f | grep decode | cut -c1-74) \
  <(grep prefill $f | cut -c45-74) <(grep prefill ${f%_copy.txt}_one.txt | cut -c45-74); done
if (( SECONDS - start < 430 )); then
  mkdir -p $OUT/torch; timeout 180 tools/gpu_bench.sh .gpu/pp2 $OUT/torch --models kimi-k2-tp8,deepseek-v3-tp8 --schemes bf16 \
    --tokens 4096,8192,16384 --split-gemms > /dev/null 2>&1; echo "torch rc $? ($((SECONDS - start)) s)"
  grep -h -E "kimi|deepseek" $OUT/torch/results.md 2>/dev/null | head -20
  tar czf $OUT/torch.tgz -C $OUT torch && rm -rf $OUT/torch
fi
