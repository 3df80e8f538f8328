#!/usr/bin/env bash
# The landed epilogue (DivideRn on N = 128 tiles only): the NVFP4 rows that lost with DivideRn on
# N = 256 tiles, old vs new alternated twice; the whole GPU suite with the sanitizers; then the
# decode / prefill crossover of the 4-bit kernels on the many-expert shapes.
for d in .gpu/old .gpu/s21d; do for f in $d/*.gz; do gunzip -f $f; done; done
chmod +x .gpu/old/qmoe .gpu/s21d/qmoe .gpu/s21d/qmoe_cuda_tests
export LD_LIBRARY_PATH=$PWD/.gpu/s21d QMOE_TEST_DATA_DIR=$PWD/tests/data
o=$OUT/final; mkdir -p $o
ab() {  # bin tag
  $1/qmoe bench --models mixtral-8x7b --schemes nvfp4a16 --tokens 4096,8192 --rotations 2 --replays 5 \
    --gemm-paths prefill --json $o/ab_mixtral_$2.json > $o/ab_$2.txt 2>&1
  $1/qmoe bench --models qwen3-30b-a3b,deepseek-v3-tp8 --schemes nvfp4a16 --tokens 512,2048,4096 --rotations 2 --replays 5 \
    --gemm-paths prefill --json $o/ab_mid_$2.json >> $o/ab_$2.txt 2>&1
}
ab .gpu/old old1; ab .gpu/s21d new1; ab .gpu/old old2; ab .gpu/s21d new2
python3 - "$o" <<'PY' | tee $OUT/ab_summary.txt
import json, sys, collections
o = sys.argv[1]
rows = collections.defaultdict(dict)
for tag in ["old1", "new1", "old2", "new2"]:
    for part in ["mixtral", "mid"]:
        for r in json.load(open(f"{o}/ab_{part}_{tag}.json")):
            rows[(r["model"], r["scheme"], r["tokens"])][tag] = r["gemm_us"]
print(f"{'model':16} {'scheme':10} {'tokens':>6} {'old1':>8} {'old2':>8} {'new1':>8} {'new2':>8} {'ratio':>6}")
for k, v in rows.items():
    og = (v["old1"] + v["old2"]) / 2; ng = (v["new1"] + v["new2"]) / 2
    print(f"{k[0]:16} {k[1]:10} {k[2]:6} {v['old1']:8.1f} {v['old2']:8.1f} {v['new1']:8.1f} {v['new2']:8.1f} {ng/og:6.3f}")
PY
tools/gpu_test.sh .gpu/s21d $o/suite > $o/suite_tail.txt 2>&1; echo "suite rc $?"; tail -4 $o/suite_tail.txt
grep -E "^\[  (PASSED|FAILED)" $o/suite/gpu_tests.log
.gpu/s21d/qmoe bench --models deepseek-v3-tp8 --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 384,448,512,576,640,704,768,832,2048 \
  --rotations 2 --replays 5 --gemm-paths decode,prefill --json $o/x_tp8.json > $o/x_tp8.txt 2>&1
.gpu/s21d/qmoe bench --models qwen3-30b-a3b --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 192,224,256,288,320,352,384,2048 \
  --rotations 2 --replays 5 --gemm-paths decode,prefill --json $o/x_qwen3.json > $o/x_qwen3.txt 2>&1
.gpu/s21d/qmoe bench --models gpt-oss-120b --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 384,448,512,576,640,2048 \
  --rotations 2 --replays 5 --gemm-paths decode,prefill --json $o/x_gptoss.json > $o/x_gptoss.txt 2>&1
cp $o/suite/gpu_tests.log $o/suite/memcheck.log $o/suite/racecheck.log $OUT/ 2>/dev/null
tar czf $OUT/final_logs.tgz -C $o . && cat $o/x_*.txt | grep -v "^model" > $OUT/crossover.txt
