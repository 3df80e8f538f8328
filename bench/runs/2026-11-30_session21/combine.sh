#!/usr/bin/env bash
# The combine, one block row per token with 4 columns per thread (16-byte loads and stores where
# aligned): the forward tests that run it, memcheck on a few, then layer µs old (s21e) vs new.
for d in .gpu/s21e .gpu/s21f; do for f in $d/*.gz; do gunzip -f $f; done; done
chmod +x .gpu/s21e/qmoe .gpu/s21f/qmoe .gpu/s21f/qmoe_cuda_tests
export LD_LIBRARY_PATH=$PWD/.gpu/s21e QMOE_TEST_DATA_DIR=$PWD/tests/data
o=$OUT/combine; mkdir -p $o
.gpu/s21f/qmoe_cuda_tests --gtest_filter='CudaMoeLayerApi.*:RandomLayerEdges.*:CudaFixtures.*:Formats/RandomLayers.*:CudaRouting.*:PrefillKernels.EdgeCases' > $o/tests.log 2>&1
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $o/tests.log
compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/s21f/qmoe_cuda_tests \
  --gtest_filter='CudaMoeLayerApi.UnalignedOutputMatchesAligned:RandomLayerEdges.*' > $o/memcheck.log 2>&1; echo "memcheck rc $?"
tail -2 $o/memcheck.log
for round in 1 2; do for tag in old new; do
  bin=.gpu/s21f; [[ $tag == old ]] && bin=.gpu/s21e
  $bin/qmoe bench --models deepseek-v3-tp8,qwen3-30b-a3b,mixtral-8x7b --schemes nvfp4a16,fp8_channel --tokens 1,64,2048 \
    --rotations 2 --replays 5 --json $o/${tag}$round.json > /dev/null 2>&1
done; done
python3 - "$o" <<'PY' | tee $OUT/combine_ab.txt
import json, sys, collections
o = sys.argv[1]
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for tag in ["old", "new"]:
    for r in (1, 2):
        for x in json.load(open(f"{o}/{tag}{r}.json")):
            rows[(x["model"], x["scheme"], x["tokens"])][tag].append((x["layer_us"], x["gemm_us"]))
print("layer µs (GEMM µs), automatic path, two alternated rounds; old = s21e (fca7239), new = the combine change")
print(f"{'model':16} {'scheme':12} {'tokens':>6} {'old layer':>10} {'new layer':>10} {'ratio':>6} {'old gemm':>9} {'new gemm':>9}")
for k, v in rows.items():
    ol = sum(a for a, _ in v["old"]) / 2; nl = sum(a for a, _ in v["new"]) / 2
    og = sum(b for _, b in v["old"]) / 2; ng = sum(b for _, b in v["new"]) / 2
    print(f"{k[0]:16} {k[1]:12} {k[2]:6} {ol:10.1f} {nl:10.1f} {nl/ol:6.3f} {og:9.1f} {ng:9.1f}")
PY
cp $o/tests.log $o/memcheck.log $OUT/ && tar czf $OUT/combine_json.tgz -C $o . && rm -rf $o
