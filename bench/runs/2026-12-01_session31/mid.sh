#!/usr/bin/env bash
# wip/pp-terms + the mid-range plan (.gpu/mid): W4A16 g128 runs CUTLASS's mixed-input kernel between
# its crossover and the register kernel's switch over it (plan_repacked_copy_use). 1. Its GPU test,
# RepackedCopy.*, W4Prefill (sizes from the new batch), memcheck of the new test; qmoe run on the
# fixture with and without the copy. 2. Layer µs of the automatic path against decode, the register
# kernel (prefill with the copy) and CUTLASS (prefill without it), same call, four shapes.
# Everything under $OUT/r, tarred (the device tool returns few files).
set -u
d=.gpu/mid; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d
r=$OUT/r; mkdir -p $r; start=$SECONDS
timeout 200 $d/qmoe_cuda_tests --gtest_filter='RepackedCopy.*:W4Prefill.*' > $r/tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|^\[       OK|Failure|Expected|Which is|rel_l2 [0-9]" $r/tests.log | grep -v "    " | head -30
grep -hE "Failure" -A6 $r/tests.log | head -40
timeout 120 compute-sanitizer --tool memcheck $d/qmoe_cuda_tests --gtest_filter='RepackedCopy.W4A16*' > $r/memcheck.log 2>&1
echo "memcheck rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|ERROR SUMMARY" $r/memcheck.log
for t in 40 100 200; do for c in "" --no-repacked-copy; do
  $d/qmoe run tests/data/fixtures/w4a16_g128 --backend cuda --tokens $t --repeat 2 $c > $r/run_${t}${c}.txt 2>&1
  echo "run $t $c rc $?: $(grep -E 'cuda gemm w13 from|check' $r/run_${t}${c}.txt | tr '\n' ' ' | cut -c1-400)"
done; done
sweep() { timeout 100 $d/qmoe bench --schemes w4a16_g128 --rotations 2 --replays 5 "$@"; }
for m in "mixtral-8x7b 32,48,64,80,96,128,144,160,192" "qwen3-30b-a3b 192,224,256,288,320,384" \
         "deepseek-v3 384,448,512,768,1024,1152,1280,1536" "deepseek-v3-tp8 384,448,512,640,768,1024,1536"; do
  set -- $m
  sweep --models $1 --tokens $2 --gemm-paths auto,decode,prefill > $r/mid_$1_copy.txt 2>&1
  sweep --models $1 --tokens $2 --gemm-paths prefill --no-repacked-copy > $r/mid_$1_one.txt 2>&1
  echo "mid $1 rc $? ($((SECONDS - start)) s)"
done
echo "model scheme tokens | layer us: auto decode register cutlass"
for f in $r/mid_*_copy.txt; do
  paste -d' ' <(grep " auto " $f | awk '{print $1, $4, $5}') <(grep " decode " $f | awk '{print $5}') \
    <(grep " prefill " $f | awk '{print $5}') <(grep " prefill " ${f%_copy.txt}_one.txt | awk '{print $5}')
done | column -t | tee $r/summary.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $r
