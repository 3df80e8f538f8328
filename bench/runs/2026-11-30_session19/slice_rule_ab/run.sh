#!/usr/bin/env bash
# Carry [".gpu/slice"]. Decode slice-length A/B (QMOE_SHORT_SLICE), logs to $OUT/slice.
set -u
B=.gpu/slice
gunzip -f $B/qmoe.gz 2>/dev/null; chmod +x $B/qmoe
export LD_LIBRARY_PATH=$PWD/$B
w=$OUT/slice; mkdir -p $w; start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $w/gpu.txt 2>&1
for round in 1 2; do
  for v in old new; do
    for spec in qwen3-30b-a3b:w4a16_g128,mxfp4,nvfp4a16,fp8_channel,bf16,w4a8_fp8,int8 gpt-oss-120b:mxfp4,fp8_channel,bf16 deepseek-v3-tp8:w4a16_g128,fp8_channel kimi-k2-tp8:w4a16_g32; do
      IFS=: read m s <<< "$spec"
      (( SECONDS - start > 400 )) && continue
      if [[ $v == old ]]; then export QMOE_OLD_SLICE_RULE=1; else unset QMOE_OLD_SLICE_RULE; fi
      timeout 100 $B/qmoe bench --models $m --schemes $s --tokens 1,2,3,4,8 --gemm-paths decode \
        --rotations 2 --replays 5 > $w/s${v}_${m}_$round.log 2>&1
    done
  done
done
unset QMOE_OLD_SLICE_RULE
python3 - $w <<'PY'
import glob,collections,sys,re,os
rows=collections.defaultdict(lambda: collections.defaultdict(list))
for f in glob.glob(sys.argv[1]+'/s*_*.log'):
    v=os.path.basename(f).split('_')[0]
    for l in open(f):
        p=l.split()
        if len(p)>=6 and p[2]=='decode':
            rows[(p[0],p[1],int(p[3]))][v].append(float(p[5]))
print('model scheme tokens  gemm us (mean of rounds) old / new   new/old  (rounds old; new)')
for k in sorted(rows):
    d=rows[k]; m={v:sum(x)/len(x) for v,x in d.items()}
    if 'sold' in m and 'snew' in m:
        print(k[0][:15],k[1],k[2],' %.1f %.1f   %.3f  %s; %s'%(m['sold'],m['snew'],m['snew']/m['sold'],d['sold'],d['snew']))
PY
echo "elapsed $((SECONDS - start)) s"
tar -C $OUT -czf $OUT/slice_logs.tgz slice && rm -rf $w
