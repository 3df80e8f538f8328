#!/usr/bin/env bash
# For the next session (not run yet), one device call on main's build in .gpu/n (qmoe,
# qmoe_cuda_tests, libfmt.so.9; xz): the whole GPU suite with the sanitizers (~290 s; `1f85fd3`
# ran only its 28 kernel and layer tests), then the automatic path with `9678d62`'s switches at
# token counts where they moved (compare with tileinfo/switches_t.txt: each row should be the
# faster of decode / prefill), then the same against torch at 512 / 2048 / 4096 (the first run of
# `1f85fd3` with torch in the same call).
set -u
d=.gpu/n; xz -d $d/*.xz; chmod +x $d/qmoe $d/qmoe_cuda_tests
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
tools/gpu_test.sh $d $OUT/suite > $OUT/suite_tail.txt 2>&1; echo "suite rc $? ($((SECONDS - start)) s)"
grep -hE "^\[  (PASSED|FAILED)|SUMMARY|FAILED" $OUT/suite/*.log | head
LD_LIBRARY_PATH=$PWD/$d timeout 60 $d/qmoe bench --models deepseek-v3-tp8,qwen3-30b-a3b,gpt-oss-120b \
  --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 224,416,544 --rotations 2 --replays 5 > $OUT/auto.txt 2>&1
echo "auto rc $? ($((SECONDS - start)) s)"
o=$OUT/torch; mkdir -p $o
QMOE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo main) timeout 200 tools/gpu_bench.sh $d $o \
  --models deepseek-v3-tp8,kimi-k2-tp8,qwen3-30b-a3b,gpt-oss-120b --schemes nvfp4a16,mxfp4,w4a16_g32 \
  --tokens 512,2048,4096 --rotations 2 --replays 5 > $o/tail.txt 2>&1
echo "torch rc $? ($((SECONDS - start)) s)"; grep -h "| auto |\|^| model" $o/results.md
tar czf $OUT/logs.tgz -C $OUT suite torch auto.txt
