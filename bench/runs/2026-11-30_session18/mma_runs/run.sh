#!/usr/bin/env bash
# Carry [".gpu/mma"]. Logs to $OUT.
#   bash .gpu/mma/run.sh tests   decode-relevant suite under each variant + memcheck (persistent, contiguous)
#   bash .gpu/mma/run.sh ab      GEMM/layer µs of the four variants (slices x grid), two alternated rounds
set -u
part=${1:?tests or ab}
B=.gpu/run
for f in $B/*.gz; do [[ -e $f ]] && gunzip -f $f; done; chmod +x $B/qmoe $B/qmoe_cuda_tests $B/qmoe_main
export LD_LIBRARY_PATH=$PWD/$B QMOE_TEST_DATA_DIR=$PWD/tests/data
w=$OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $w/gpu_$part.txt 2>&1
variant() {  # name -> env
  case $1 in
    main) echo "QMOE_X=0" ;;
    r0) echo "QMOE_MMA_RUN=0" ;;
    r1) echo "QMOE_MMA_RUN=1" ;;
    r2) echo "QMOE_MMA_RUN=2" ;;
    r3) echo "QMOE_MMA_RUN=3" ;;
  esac
}
binary() { [[ $1 == main ]] && echo $B/qmoe_main || echo $B/qmoe; }
if [[ $part == tests ]]; then
  mkdir -p $w/tests
  f=${FILTER:-'Formats/RandomLayers.*:RandomLayerEdges.*:CudaFixtures.*:CudaMoeLayerApi.*:ChainedLaunches.*'}
  for v in ${VARIANTS:-r1 r2}; do
    env $(variant $v) timeout 200 $B/qmoe_cuda_tests --gtest_filter="$f" > $w/tests/suite_$v.log 2>&1; echo "suite $v exit $?"
    grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $w/tests/suite_$v.log | head -10
  done
  env $(variant r2) timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/qmoe_cuda_tests \
    --gtest_filter='Formats/RandomLayers.MatchTheCpuBackend/mxfp4:Formats/RandomLayers.MatchTheCpuBackend/nvfp4a16:Formats/RandomLayers.MatchTheCpuBackend/w4a16_asym_g32:Formats/RandomLayers.MatchTheCpuBackend/fp8_block:RandomLayerEdges.*' \
    > $w/tests/memcheck_r2.log 2>&1; echo "memcheck exit $?"; tail -n 1 $w/tests/memcheck_r2.log
  tar -C $w -czf $w/tests_logs.tgz tests && rm -rf $w/tests; exit 0
fi
mkdir -p $w/ab
for v in ${SMOKE:-r1 r2}; do
  env $(variant $v) timeout 90 $B/qmoe_cuda_tests --gtest_filter='Formats/RandomLayers.*:RandomLayerEdges.*' > $w/ab/smoke_$v.txt 2>&1; echo "smoke $v exit $?"
  grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $w/ab/smoke_$v.txt | head -10
done
T=${TOKENS:-1,8,32,64}
start=$SECONDS
for rep in 1 2; do for v in ${VARIANTS:-main r0 r1 r2}; do
  for spec in ${SPECS:-mixtral-8x7b:w4a16_g128,mxfp4,nvfp4a16,fp8_channel deepseek-v3:w4a16_g128,nvfp4a16,fp8_channel qwen3-30b-a3b:w4a16_g128,mxfp4,fp8_channel}; do
    IFS=: read m s <<< "$spec"
    (( SECONDS - start > ${BUDGET:-420} )) && { echo "skip $v $m $rep"; continue; }
    env $(variant $v) timeout 100 $(binary $v) bench --models $m --schemes $s --tokens $T --gemm-paths ${PATHS:-decode} --rotations 3 --replays 5 > $w/ab/${v}_${m}_$rep.log 2>&1
  done; done; done
python3 - $w <<'PY' | tee $w/ab_summary.txt
import collections, glob, os, sys
d = collections.defaultdict(list)
vs = set()
for f in sorted(glob.glob(sys.argv[1] + '/ab/*.log')):
    v = os.path.basename(f).split('_')[0]; vs.add(v)
    for l in open(f):
        x = l.split()
        if len(x) > 8 and x[0] in ('mixtral-8x7b', 'gpt-oss-120b', 'kimi-k2-tp8', 'qwen3-30b-a3b', 'deepseek-v3', 'deepseek-v3-tp8'):
            d[(x[0], x[1], int(x[3]), v)].append((float(x[4]), float(x[5])))
vs = sorted(vs)
print('means of the rounds; GEMM us per variant (ratio to v0), layer us per variant;', ' '.join(vs))
m = lambda v, i: sum(x[i] for x in v) / len(v)
for k in sorted({k[:3] for k in d}):
    if not all(d[k + (v,)] for v in vs): continue
    g = [m(d[k + (v,)], 1) for v in vs]; l = [m(d[k + (v,)], 0) for v in vs]
    print(f"{k[0]:14} {k[1]:12} {k[2]:4} gemm " + ' '.join(f"{x:8.1f}({x/g[0]:.3f})" for x in g) + "  layer " + ' '.join(f"{x:8.1f}" for x in l))
PY
tar -C $w -czf $w/ab_logs.tgz ab && rm -rf $w/ab
