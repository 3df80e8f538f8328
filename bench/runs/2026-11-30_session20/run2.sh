#!/usr/bin/env bash
# Twentieth session, second device call: (1) same-binary A/B of the decode wave rule counting each
# kernel's own blocks per SM (QMOE_MMA_WAVE_BLOCKS=3: the old rule) on the rows whose plan changes;
# (2) a status refresh of the three model shapes x eight schemes at 1-512 tokens with torch's baselines.
# Carry [".gpu/s20"] (binaries of main + the uncommitted planner change).
set -u
B=.gpu/s20
for f in $B/*.gz; do gunzip -f $f; done; chmod +x $B/qmoe $B/qmoe_cuda_tests
export LD_LIBRARY_PATH=$PWD/$B QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
w=$OUT/wave_ab; mkdir -p $w
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $w/gpu.txt 2>&1
timeout 100 $B/qmoe_cuda_tests --gtest_filter='RandomLayerEdges.*:ChainedLaunches.*' > $w/tests.log 2>&1
echo "tests exit $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $w/tests.log | head
for round in 1 2; do
  for v in old new; do
    for spec in qwen3-30b-a3b:w4a8_fp8,bf16 mixtral-8x7b:w4a8_fp8 deepseek-v3:w4a8_fp8 deepseek-v3-tp8:w4a8_fp8,bf16 kimi-k2-tp8:bf16; do
      IFS=: read m s <<< "$spec"
      (( SECONDS - start > 260 )) && continue
      if [[ $v == old ]]; then export QMOE_MMA_WAVE_BLOCKS=3; else unset QMOE_MMA_WAVE_BLOCKS; fi
      timeout 100 $B/qmoe bench --models $m --schemes $s --tokens 1,2,3,6,12,16,24 --gemm-paths decode --rotations 2 --replays 5 \
        > $w/${v}_${m}_$round.log 2>&1
    done
  done
done
unset QMOE_MMA_WAVE_BLOCKS
python3 - $w <<'PY' | tee $w/summary.txt
import glob,collections,sys,os
rows=collections.defaultdict(lambda: collections.defaultdict(list))
for f in glob.glob(sys.argv[1]+'/*_*_[12].log'):
    v=os.path.basename(f).split('_')[0]
    for l in open(f):
        p=l.split()
        if len(p)>=6 and p[2]=='decode': rows[(p[0],p[1],int(p[3]))][v].append(float(p[5]))
print('model scheme tokens   decode GEMM us (mean of rounds): old rule / new   new/old')
for k in sorted(rows):
    m={v:sum(x)/len(x) for v,x in rows[k].items()}
    if 'old' in m and 'new' in m: print(k[0][:15],k[1],k[2],'  %.1f %.1f   %.3f'%(m['old'],m['new'],m['new']/m['old']))
PY
echo "A/B done at $((SECONDS - start)) s"
for m in qwen3-30b-a3b mixtral-8x7b deepseek-v3; do
  (( SECONDS - start > 520 )) && { echo "skip $m"; continue; }
  r=$OUT/status/$m; mkdir -p $r
  timeout $((570 - (SECONDS - start))) bash tools/gpu_bench.sh $B $r --models $m \
    --schemes w4a16_g128,mxfp4,nvfp4a16,fp8_channel,fp8_block,int8,w4a8_fp8,bf16 --tokens 1,8,32,64,128,512 \
    --rotations 2 --replays 5 > $r/run.log 2>&1
  echo "$m done at $((SECONDS - start)) s"
done
tar -C $OUT -czf $OUT/s20_run2.tgz wave_ab status && rm -rf $w $OUT/status
