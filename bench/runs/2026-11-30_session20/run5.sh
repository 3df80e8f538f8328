#!/usr/bin/env bash
# Twentieth session, fifth device call (carry [".gpu/s20c"]: the new planner, uncommitted at the
# call): the 4-bit register kernel's switch by GEMM2's reduction. On the token counts whose plan
# changes (the old switch took the prefill kernel there, the new one the decode kernels): decode,
# prefill and auto paths, layer and GEMM µs, two rounds; then the whole GPU suite.
set -u
start=$SECONDS
B=.gpu/s20c; for f in $B/*.gz; do gunzip -f $f; done; chmod +x $B/qmoe $B/qmoe_cuda_tests
export LD_LIBRARY_PATH=$PWD/$B
w=$OUT/switch_ab; mkdir -p $w
for round in 1 2; do
  for v in r; do
    for spec in gpt-oss-120b:mxfp4:608 gpt-oss-120b:nvfp4a16:448 qwen3-30b-a3b:mxfp4:320,352 qwen3-30b-a3b:nvfp4a16:256,288 \
                deepseek-v3-tp8:mxfp4:640,768 deepseek-v3-tp8:nvfp4a16:512,768 kimi-k2-tp8:mxfp4:1024,1152 kimi-k2-tp8:nvfp4a16:768,1024,1152; do
      IFS=: read m s t <<< "$spec"
      timeout 60 $B/qmoe bench --models $m --schemes $s --tokens $t --gemm-paths decode,prefill,auto --rotations 2 --replays 5 >> $w/${v}_$round.log 2>&1
    done
  done
done
python3 - $w <<'PY' | tee $w/summary.txt
import glob,collections,sys
rows=collections.defaultdict(lambda: collections.defaultdict(list))
for f in glob.glob(sys.argv[1]+'/r_[12].log'):
    for l in open(f):
        p=l.split()
        if len(p)>=6 and p[2] in ('decode','prefill','auto'): rows[(p[0],p[1],int(p[3]))][p[2]].append(float(p[4]))
print('model scheme tokens   layer us, means of two rounds: decode / prefill (the old switch) / auto (the new)   auto/prefill')
for k in sorted(rows):
    m={v:sum(x)/len(x) for v,x in rows[k].items()}
    print(k[0][:15],k[1],k[2],'  %.1f / %.1f / %.1f   %.3f'%(m['decode'],m['prefill'],m['auto'],m['auto']/m['prefill']))
PY
echo "A/B done at $((SECONDS - start)) s"
t=$OUT/suite; mkdir -p $t
timeout $((590 - (SECONDS - start))) bash tools/gpu_test.sh $B $t > $t/run.log 2>&1; echo "gpu_test exit $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $t/gpu_tests.log | head; tail -n 2 $t/memcheck.log $t/racecheck.log
echo "done at $((SECONDS - start)) s"
tar -C $OUT -czf $OUT/s20_run5.tgz switch_ab suite && rm -rf $w $t
