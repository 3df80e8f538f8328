#!/usr/bin/env bash
# The 4-bit register kernel's epilogue (DivideRn, one pointer per column, stop at the tile's last
# row) with DivideRn's slow path out of line (second version): GPU tests of the new binary, then the
# prefill path old vs new, alternated twice; the logs packed into one archive.
for d in .gpu/old .gpu/s21c; do for f in $d/*.gz; do gunzip -f $f; done; done
chmod +x .gpu/old/qmoe .gpu/s21c/qmoe .gpu/s21c/qmoe_cuda_tests
export QMOE_TEST_DATA_DIR=$PWD/tests/data
o=$OUT/ab2; mkdir -p $o
LD_LIBRARY_PATH=$PWD/.gpu/old .gpu/s21c/qmoe_cuda_tests \
  --gtest_filter='DivideRn.*:HardwareConversions.*:Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:CudaFixtures.*:PrefillKernels.*:RandomLayerEdges.*' \
  > $o/tests.log 2>&1
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $o/tests.log
bench() {  # bin tag
  LD_LIBRARY_PATH=$PWD/.gpu/old $1/qmoe bench --models deepseek-v3-tp8 --schemes nvfp4a16,mxfp4,w4a16_g32 \
    --tokens 512,2048 --rotations 2 --replays 5 --gemm-paths prefill --json $o/tp8_$2.json > $o/tp8_$2.txt 2>&1
  LD_LIBRARY_PATH=$PWD/.gpu/old $1/qmoe bench --models qwen3-30b-a3b,gpt-oss-120b --schemes nvfp4a16,mxfp4,w4a16_g32 \
    --tokens 512,2048,4096 --rotations 2 --replays 5 --gemm-paths prefill --json $o/mid_$2.json > $o/mid_$2.txt 2>&1
  LD_LIBRARY_PATH=$PWD/.gpu/old $1/qmoe bench --models mixtral-8x7b --schemes nvfp4a16,mxfp4,w4a16_g32 \
    --tokens 4096,8192 --rotations 2 --replays 5 --gemm-paths prefill --json $o/mixtral_$2.json > $o/mixtral_$2.txt 2>&1
}
bench .gpu/old old1; bench .gpu/s21c new1; bench .gpu/old old2; bench .gpu/s21c new2
python3 - "$o" <<'PY'
import json, sys, collections
o = sys.argv[1]
rows = collections.defaultdict(dict)
for tag in ["old1", "new1", "old2", "new2"]:
    for part in ["tp8", "mid", "mixtral"]:
        try: data = json.load(open(f"{o}/{part}_{tag}.json"))
        except Exception as e: print("missing", part, tag, e); continue
        for r in data:
            rows[(r["model"], r["scheme"], r["tokens"])][tag] = (r["gemm_us"], r["layer_us"])
with open(f"{o}/summary.txt", "w") as f:
    print(f"{'model':16} {'scheme':10} {'tokens':>6} {'old gemm':>9} {'new gemm':>9} {'ratio':>6} {'old layer':>9} {'new layer':>9}", file=f)
    for k, v in rows.items():
        if len(v) < 4: continue
        og = (v["old1"][0] + v["old2"][0]) / 2; ng = (v["new1"][0] + v["new2"][0]) / 2
        ol = (v["old1"][1] + v["old2"][1]) / 2; nl = (v["new1"][1] + v["new2"][1]) / 2
        print(f"{k[0]:16} {k[1]:10} {k[2]:6} {og:9.1f} {ng:9.1f} {ng/og:6.3f} {ol:9.1f} {nl:9.1f}", file=f)
print(open(f"{o}/summary.txt").read())
PY
cp $o/summary.txt $o/tests.log $OUT/ && tar czf $OUT/ab2_logs.tgz -C $o . && rm -rf $o
