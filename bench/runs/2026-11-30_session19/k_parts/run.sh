#!/usr/bin/env bash
# The next session's device call for the prepared split across blocks (README.md here).
# Build first (on the build machine, from main with prepared.patch applied):
#   git apply bench/runs/2026-11-30_session19/k_parts/prepared.patch
#   ninja -C build-cuda -j2 qmoe qmoe_cuda_tests && mkdir -p .gpu/kp && cp build-cuda/qmoe \
#     build-cuda/tests/qmoe_cuda_tests /usr/lib/x86_64-linux-gnu/libfmt.so.9 .gpu/kp/ && \
#     strip .gpu/kp/qmoe .gpu/kp/qmoe_cuda_tests && gzip .gpu/kp/qmoe .gpu/kp/qmoe_cuda_tests
# Then one call with carry [".gpu/kp"]: bash bench/runs/2026-11-30_session19/k_parts/run.sh
set -u
B=.gpu/kp
for f in $B/*.gz; do gunzip -f $f; done; chmod +x $B/qmoe $B/qmoe_cuda_tests
export LD_LIBRARY_PATH=$PWD/$B QMOE_TEST_DATA_DIR=$PWD/tests/data
w=$OUT/kp; mkdir -p $w; start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $w/gpu.txt 2>&1
timeout 120 $B/qmoe_cuda_tests --gtest_filter='RandomLayerEdges.DecodeSplitAcrossBlocks:ChainedLaunches.*:CudaMoeLayerApi.*' \
  > $w/tests.log 2>&1; echo "tests exit $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|Failure" $w/tests.log | head
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/qmoe_cuda_tests \
  --gtest_filter='RandomLayerEdges.DecodeSplitAcrossBlocks' > $w/memcheck.log 2>&1; echo "memcheck exit $?"; tail -n 2 $w/memcheck.log
for round in 1 2; do
  for v in off on; do
    for spec in mixtral-8x7b:w4a16_g128,mxfp4,nvfp4a16,fp8_channel,bf16 deepseek-v3-tp8:w4a16_g128,fp8_channel,mxfp4 kimi-k2-tp8:w4a16_g32; do
      IFS=: read m s <<< "$spec"
      (( SECONDS - start > 450 )) && continue
      if [[ $v == off ]]; then export QMOE_NO_K_PARTS=1; else unset QMOE_NO_K_PARTS; fi
      timeout 100 $B/qmoe bench --models $m --schemes $s --tokens 1,2,4,8 --gemm-paths decode --rotations 2 --replays 5 \
        > $w/${v}_${m}_$round.log 2>&1
    done
  done
done
unset QMOE_NO_K_PARTS
python3 - $w <<'PY'
import glob,collections,sys,os
rows=collections.defaultdict(lambda: collections.defaultdict(list))
for f in glob.glob(sys.argv[1]+'/o*_*.log'):
    v=os.path.basename(f).split('_')[0]
    for l in open(f):
        p=l.split()
        if len(p)>=6 and p[2]=='decode': rows[(p[0],p[1],int(p[3]))][v].append(float(p[5]))
print('model scheme tokens  gemm us (mean of rounds) no parts / parts   parts/no parts')
for k in sorted(rows):
    m={v:sum(x)/len(x) for v,x in rows[k].items()}
    if 'off' in m and 'on' in m: print(k[0][:15],k[1],k[2],' %.1f %.1f   %.3f'%(m['off'],m['on'],m['on']/m['off']))
PY
echo "elapsed $((SECONDS - start)) s"
tar -C $OUT -czf $OUT/kp_logs.tgz kp && rm -rf $w
