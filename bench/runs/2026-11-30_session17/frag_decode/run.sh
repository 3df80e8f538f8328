#!/usr/bin/env bash
# Branch state in .gpu/fd/commit. Carry [".gpu/fd"]. Logs straight to $OUT.
#   bash .gpu/fd/run.sh tests   the suite's decode-relevant tests with QMOE_FRAG_DECODE=1, memcheck of
#                               the register-kernel formats with it, and the FP8 one-token tolerance check
#   bash .gpu/fd/run.sh ab      layer/GEMM µs, QMOE_FRAG_DECODE=0 vs 1, two alternated rounds
set -u
part=${1:?tests or ab}
B=.gpu/fd
for f in $B/*.gz; do [[ -e $f ]] && gunzip -f $f; done; chmod +x $B/qmoe $B/qmoe_cuda_tests
export LD_LIBRARY_PATH=$PWD/$B QMOE_TEST_DATA_DIR=$PWD/tests/data
w=$OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $w/gpu_$part.txt 2>&1
if [[ $part == tests ]]; then
  mkdir -p $w/tests
  f=${FILTER:-'Formats/RandomLayers.*:RandomLayerEdges.*:CudaFixtures.*:CudaMoeLayerApi.*:ChainedLaunches.*'}
  QMOE_FRAG_DECODE=1 timeout 300 $B/qmoe_cuda_tests --gtest_filter="$f" > $w/tests/frag_suite.log 2>&1; echo "frag suite exit $?"
  grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $w/tests/frag_suite.log | head -20
  grep -E "mxfp4|nvfp4a16|asym_g32" $w/tests/frag_suite.log | grep rel_l2 | head -30
  QMOE_FRAG_DECODE=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/qmoe_cuda_tests \
    --gtest_filter='Formats/RandomLayers.MatchTheCpuBackend/mxfp4:Formats/RandomLayers.MatchTheCpuBackend/nvfp4a16:Formats/RandomLayers.MatchTheCpuBackend/w4a16_asym_g32' \
    > $w/tests/frag_memcheck.log 2>&1; echo "memcheck exit $?"; tail -n 1 $w/tests/frag_memcheck.log
  QMOE_TEST_SEED=3058480099 timeout 60 $B/qmoe_cuda_tests --gtest_filter='PrefillKernels.EdgeCases' > $w/tests/seed_replay.log 2>&1; echo "seed replay exit $?"
  grep "fp8_channel_token one token" $w/tests/seed_replay.log
  for i in 1 2 3 4 5 6 7 8; do timeout 30 $B/qmoe_cuda_tests --gtest_filter='PrefillKernels.EdgeCases' > $w/tests/edge_$i.log 2>&1; done
  grep -h "prefill fp8_channel_token one token" $w/tests/edge_*.log | sort -k7 -g | tail -4
  tar -C $w -czf $w/tests_logs.tgz tests && rm -rf $w/tests; exit 0
fi
mkdir -p $w/ab
for rep in 1 2; do for fd in 0 1; do
  for spec in ${SPECS:-mixtral-8x7b:mxfp4,nvfp4a16,w4a16_g32,w4a16_asym_g128 qwen3-30b-a3b:mxfp4,nvfp4a16,w4a16_g32 gpt-oss-120b:mxfp4 kimi-k2-tp8:w4a16_g32 deepseek-v3:mxfp4}; do
    IFS=: read m s <<< "$spec"
    QMOE_FRAG_DECODE=$fd timeout 90 $B/qmoe bench --models $m --schemes $s --tokens 1,8,32,64 --rotations 3 --replays 5 > $w/ab/fd${fd}_${m}_$rep.log 2>&1
  done; done; done
python3 - $w <<'PY' | tee $w/ab_summary.txt
import collections, glob, os, sys
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + '/ab/*.log')):
    v = os.path.basename(f).split('_')[0]
    for l in open(f):
        x = l.split()
        if len(x) > 8 and x[0] in ('mixtral-8x7b', 'gpt-oss-120b', 'kimi-k2-tp8', 'qwen3-30b-a3b', 'deepseek-v3'):
            d[(x[0], x[1], int(x[3]), v)].append((float(x[4]), float(x[5]), x[7]))
print('means of two rounds; layer us, GEMM us (canonical fd0 / fragment fd1), GEMM ratio fd1/fd0, TB/s fd0 fd1')
for k in sorted({k[:3] for k in d}):
    a, b = d[k + ('fd0',)], d[k + ('fd1',)]
    if not a or not b: continue
    m = lambda v, i: sum(x[i] for x in v) / len(v)
    print(f"{k[0]:14} {k[1]:15} {k[2]:4} layer {m(a,0):8.1f} {m(b,0):8.1f}  gemm {m(a,1):8.1f} {m(b,1):8.1f}  {m(b,1)/m(a,1):.3f}  TB/s {a[0][2]} {b[0][2]}")
PY
tar -C $w -czf $w/ab_logs.tgz ab && rm -rf $w/ab
