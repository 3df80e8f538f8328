#!/usr/bin/env bash
# For the next session (not run), one call: main `6b3cd84` (.gpu/n: qmoe, qmoe_cuda_tests,
# libfmt.so.9; xz; built on the Debian build machine). The whole GPU suite (tools/gpu_test.sh: it
# last ran on `dbf6646`; since then fp32 scales, sums over whole scale groups, the per-row switch
# `af393b9`, the scale-group checks `228faff` and the review follow-ups `e5ba808` (new tests:
# Int4Int8Mainloop.SumsAtTheLargestGroup, groups of 384, the w4a8_int8_g256 layers) ran on no GPU
# or only in part), then the per-row W4A8-INT8 layout around its new switch on the automatic path
# (auto must match the faster of decode and prefill at each count).
set -u
d=.gpu/n; tools/gpu_unpack.sh $d
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
mkdir -p $OUT/suite
timeout 520 tools/gpu_test.sh $d $OUT/suite > $OUT/suite/tail.txt 2>&1
echo "suite rc $? ($((SECONDS - start)) s)"; tail -n 4 $OUT/suite/tail.txt; grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/suite/*.log
for job in "mixtral-8x7b 24,32,36,40,48" "deepseek-v3 64,128,160,192" "qwen3-30b-a3b 48,64,80,96"; do
  set -- $job
  LD_LIBRARY_PATH=$PWD/$d timeout 30 $d/qmoe bench --models $1 --schemes w4a8_int8_channel --tokens $2 \
    --gemm-paths auto,decode,prefill --rotations 2 --replays 5 >> $OUT/switch.txt 2>&1
done
echo "switch ($((SECONDS - start)) s)"; grep -h "w4a8" $OUT/switch.txt | cut -c1-100
cd $OUT && tar czf logs.tgz suite && rm -rf suite
