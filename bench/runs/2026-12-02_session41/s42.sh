#!/usr/bin/env bash
# The next session's new device calls (run from the repository root on the H200). Packs (ignored,
# .gpu/): p = main's qmoe and tests at `13b1fab` (the kernels and planner of `c3908c8`: MXFP4's
# conversion and switch; the tests' sanitizer subset), pq = its qmoe alone, mcq = `aa6e99d`'s qmoe
# (the conversion with the old switch, 14 rows per expert). With them:
#   BIN=p bash bench/runs/2026-12-02_session41/s41.sh suite        carry [".gpu/p"]
#   BIN=p bash bench/runs/2026-12-02_session40/s40.sh profile      carry [".gpu/p"] (ncu, 32-row tile)
#   BIN=p bash bench/runs/2026-12-02_session41/s42.sh kernel_race sustained carry [".gpu/p"]
#   bash bench/runs/2026-12-02_session41/s42.sh plan_ab short      carry [".gpu/pq", ".gpu/mcq"]
# Two branches, each built and CPU-tested, never run: wip/narrow-2cta-regs (`2dce0b4`: the 32-row
# tile at two CTAs per SM; packs tc = qmoe and tests, tcq = qmoe alone) and wip/scale-halves
# (`84233b7`: NVFP4's and INT4's scale halves by operand selectors, no PRMTs; packs sh, shq):
#   BINS="tc sh" bash bench/runs/2026-12-02_session41/s42.sh tests      carry [".gpu/tc", ".gpu/sh"]
#   NEW="tcq shq" bash bench/runs/2026-12-02_session41/s42.sh branch_ab carry [".gpu/pq", ".gpu/tcq", ".gpu/shq"]
# kernel_race: racecheck of the register kernel's tests in their sanitizer subset
#   (QMOE_TEST_SANITIZER_SUBSET=1; the forty-first session's runs of the whole tests stopped inside
#   Fp4Mainloop's NVFP4 cases).
# sustained: Mixtral-8x7B MXFP4, NVFP4 A16 and W4A16 g128 at 4096 / 8192 tokens, 400 replays, with
#   nvidia-smi sampling clocks and power (issue 4's 650 TFLOP/s under the power cap).
# plan_ab: the automatic path of mcq (switch 14) against pq (9), MXFP4 at 6-16 rows per expert.
# tests: per pack in BINS, the register kernel's, prefill, W4, repacked-copy and random-layer edge
#   tests, then memcheck of the kernel tests.
# branch_ab: main (pq) against each pack in NEW, two rounds: the 32-row tile forced and the
#   automatic path at 8-24 rows per expert, the three 4-bit register formats, four shapes.
# short: MXFP4 on the TP8 shapes (short reduction, switch 17, never measured on the 32-row tile):
#   decode against the 32-row tile at 6-20 rows per expert (pq).
set -u
d=.gpu/${BIN:-p}
o=$OUT/s42; mkdir -p $o
start=$SECONDS
bench() {  # label pack model tokens schemes paths
  (( SECONDS - start > 540 )) && { echo "skip $1"; return; }
  LD_LIBRARY_PATH=$PWD/.gpu/$2 timeout 120 .gpu/$2/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 \
    --models $3 --tokens $4 --schemes $5 --gemm-paths $6 > $o/$1.$2.log 2>&1
  echo "$1 $2 rc $? ($((SECONDS - start)) s)"
}
for part in "$@"; do
  case $part in
    kernel_race)
      tools/gpu_unpack.sh $d
      QMOE_TEST_SANITIZER_SUBSET=1 QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$d timeout 400 \
        compute-sanitizer --tool racecheck $d/qmoe_cuda_tests \
        --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*:Int4Int8Mainloop.*' > $o/kernel_race.log 2>&1
      echo "kernel_race rc $? ($((SECONDS - start)) s)"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" $o/kernel_race.log
      echo "hazard lines: $(grep -c 'Race reported' $o/kernel_race.log)" ;;
    sustained)
      tools/gpu_unpack.sh $d
      for s in mxfp4 nvfp4a16 w4a16_g128; do
        for tokens in 4096 8192; do
          nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader \
            -lms 50 > $o/smi_${s}_$tokens.csv 2>&1 &
          mon=$!
          LD_LIBRARY_PATH=$PWD/$d timeout 60 $d/qmoe bench --models mixtral-8x7b --schemes $s --tokens $tokens \
            --rotations 2 --replays 400 > $o/sustained_${s}_$tokens.log 2>&1
          kill $mon; wait $mon 2>/dev/null
          echo "sustained $s $tokens ($((SECONDS - start)) s): $(grep -h mixtral $o/sustained_${s}_$tokens.log)"
          awk -F', ' '$2+0 > 400 {n++; c += $2; w += $3} END {if (n) printf "  %d busy samples, %.0f MHz, %.0f W\n", n, c/n, w/n}' \
            $o/smi_${s}_$tokens.csv
        done
      done ;;
    plan_ab)
      tools/gpu_unpack.sh .gpu/pq .gpu/mcq
      for r in 1 2; do
        for b in mcq pq; do
          bench mix_r$r $b mixtral-8x7b 24,32,36,40,44,48,56,64 mxfp4 auto
          bench ds_r$r $b deepseek-v3 256,288,320,352,384,448,512 mxfp4 auto
          bench q3_r$r $b qwen3-30b-a3b 128,144,160,176,192,224,256 mxfp4 auto
          bench oss_r$r $b gpt-oss-120b 256,288,320,384,448,512 mxfp4 auto
        done
      done ;;
    short)
      tools/gpu_unpack.sh .gpu/pq
      bench short_ds pq deepseek-v3-tp8 192,256,320,384,448,512,640 mxfp4 auto,decode,prefill:4
      bench short_kimi pq kimi-k2-tp8 288,384,480,576,672,768,960 mxfp4 auto,decode,prefill:4 ;;
    tests)
      for b in ${BINS:-tc sh}; do
        tools/gpu_unpack.sh .gpu/$b
        f='Fp4Mainloop.*:Int4Mainloop.*:Int4Int8Mainloop.*:PrefillKernels.*:W4Prefill.*:RepackedCopy.*:RandomLayerEdges.*'
        QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/.gpu/$b timeout 240 .gpu/$b/qmoe_cuda_tests \
          --gtest_filter="$f" > $o/tests_$b.log 2>&1
        echo "tests $b rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/tests_$b.log
        QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/.gpu/$b timeout 100 compute-sanitizer --tool memcheck \
          --error-exitcode 9 .gpu/$b/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $o/memcheck_$b.log 2>&1
        echo "memcheck $b rc $? ($((SECONDS - start)) s)"; tail -1 $o/memcheck_$b.log
      done ;;
    branch_ab)
      tools/gpu_unpack.sh .gpu/pq; for b in ${NEW:-tcq shq}; do tools/gpu_unpack.sh .gpu/$b; done
      for r in 1 2; do
        for b in pq ${NEW:-tcq shq}; do
          bench mix_r$r $b mixtral-8x7b 32,48,64,96 mxfp4,nvfp4a16,w4a16_g32 auto,prefill:4
          bench ds_r$r $b deepseek-v3 256,384,512,768 mxfp4,nvfp4a16,w4a16_g32 auto,prefill:4
          bench q3_r$r $b qwen3-30b-a3b 128,192,256,384 mxfp4,nvfp4a16,w4a16_g32 auto,prefill:4
          bench oss_r$r $b gpt-oss-120b 256,384,512,768 mxfp4,nvfp4a16 auto,prefill:4
        done
      done ;;
    *) echo "s42.sh: unknown part $part"; exit 2 ;;
  esac
done
tar czf $OUT/s42_$(IFS=_; echo "$*").tgz -C $OUT s42 && rm -rf $o
