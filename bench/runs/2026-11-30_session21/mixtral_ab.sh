#!/usr/bin/env bash
# Mixtral's 4-bit prefill (256-row tiles) old vs the landed epilogue, alternated three times: the
# final.sh A/B had one noisy NVFP4 row at 4096 tokens.
for d in .gpu/old .gpu/s21d; do for f in $d/*.gz; do gunzip -f $f; done; done
chmod +x .gpu/old/qmoe .gpu/s21d/qmoe
export LD_LIBRARY_PATH=$PWD/.gpu/s21d
o=$OUT/mixtral_ab; mkdir -p $o
for round in 1 2 3; do for tag in old new; do
  bin=.gpu/s21d; [[ $tag == old ]] && bin=.gpu/old
  $bin/qmoe bench --models mixtral-8x7b --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 4096,8192 --rotations 2 --replays 5 \
    --gemm-paths prefill --json $o/${tag}$round.json > /dev/null 2>&1
done; done
python3 - "$o" <<'PY' | tee $OUT/mixtral_ab.txt
import json, sys, collections, statistics
o = sys.argv[1]
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for tag in ["old", "new"]:
    for r in range(1, 4):
        for x in json.load(open(f"{o}/{tag}{r}.json")):
            rows[(x["scheme"], x["tokens"])][tag].append(x["gemm_us"])
print("Mixtral-8x7B prefill GEMM us, three alternated rounds each (old: 7a007b8, new: the landed epilogue)")
print(f"{'scheme':10} {'tokens':>6} {'old':>26} {'new':>26} {'median ratio':>12}")
for k, v in rows.items():
    ratio = statistics.median(v["new"]) / statistics.median(v["old"])
    print(f"{k[0]:10} {k[1]:6} {' '.join(f'{x:8.1f}' for x in v['old']):>26} {' '.join(f'{x:8.1f}' for x in v['new']):>26} {ratio:12.3f}")
PY
tar czf $OUT/mixtral_ab_logs.tgz -C $o . && rm -rf $o
