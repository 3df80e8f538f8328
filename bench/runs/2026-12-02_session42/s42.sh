#!/usr/bin/env bash
# The forty-second session's device calls (run from the repository root on the H200). One archive,
# .gpu/s42/packs.tar.xz (tools/gpu_pack.sh), holds the builds of one call. First call: p = main
# `13b1fab` (qmoe and tests: MXFP4's conversion and its 9-row switch, the tests' sanitizer subset),
# mc = `aa6e99d` (qmoe: the conversion with the old 14-row switch), tc = wip/narrow-2cta-regs
# `2dce0b4` and sh = wip/scale-halves `84233b7` (qmoe and tests). Later calls: m = main `c473135`
# (wip/scale-halves merged; qmoe and tests), p and mc (qmoe). The last call (ROOT=.gpu/s43): m (qmoe)
# and m2 = `c473135` + MXFP4's short-reduction switch 17 -> 10 (qmoe); then m and m3 = the switches
# read from w4_paths and w4_paths2 (qmoe). The next call (ROOT=.gpu/s45): m3 (qmoe), pf = branch
# wip/next-tile-prefetch `1c6a721`, d2 = branch wip/narrow-deep-stages `df4a1a2` and dp = branch
# wip/narrow-deep-prefetch `8ea6ec8` (both; qmoe and tests). Parts, in the order given:
#   tests       per build in BINS (default "tc sh"): the register kernel's, W4 prefill, repacked-copy
#               and random-layer edge tests, then memcheck of the kernel tests
#   branch_ab   p against each build in NEW (default "tc sh"), rounds in ROUNDS (default 2): the
#               32-row tile forced and the automatic path at 8-24 rows per expert, three 4-bit formats
#   wide_ab     p against each build in NEW (default m), rounds in ROUNDS: the automatic path at
#               1024-8192 tokens, NVFP4 A16 and INT4 (g32, g128, asymmetric g128), three shapes
#   suite       the GPU suite's tests (tools/gpu_test.sh) on BIN (default p)
#   plan_ab     the automatic path of mc (MXFP4 switch 14) against p (9), MXFP4 at 6-16 rows per expert
#   short       MXFP4 on the TP8 shapes (short reduction, switch 17): decode against the 32-row tile
#   short_ab    the automatic path of m (MXFP4 short-reduction switch 17) against m2 (10), TP8 shapes
#   w4_paths    m's decode, 32-row tile and automatic path for NVFP4 A16 and INT4 g32 at 6-14 rows per
#               expert on five shapes (their switches after the scale-halves merge)
#   w4_paths2   the same around the crossings w4_paths left open: NVFP4 A16 at 3-6 rows per expert on
#               the long reductions, INT4 g32 and asymmetric g128 at 7-12 rows
#   verify      the automatic path of m against m3 (the new switches) where they moved, two rounds
#   branches    the kernel tests (Fp4Mainloop, Int4Mainloop) of each build in NEW (default "pf d2 dp")
#               between two rounds of m3 against them: the 32- and 64-row tiles forced and the
#               automatic path, three 4-bit formats
#   profile     ncu (full set) of m's 32-row NVFP4 and MXFP4 instances, Mixtral-8x7B at 64 tokens
#   kernel_race racecheck of the register kernel's tests in their sanitizer subset on BIN
#   sustained   Mixtral-8x7B MXFP4, NVFP4 A16, W4A16 g128 at 4096 / 8192 tokens, 400 replays, with
#               nvidia-smi sampling clocks and power (issue 4's 650 TFLOP/s under the power cap)
# Benches stop being started LIMIT seconds (default 540) after the script starts.
set -u
root=${ROOT:-.gpu/s42}
o=$OUT/s42; mkdir -p $o
start=$SECONDS
tools/gpu_unpack.sh $root
bench() {  # label build model tokens schemes paths
  (( SECONDS - start > ${LIMIT:-540} )) && { echo "skip $1 $2"; return; }
  LD_LIBRARY_PATH=$PWD/$root/$2 timeout 120 $root/$2/qmoe bench --rotations 2 --replays 5 --max-tokens 8192 \
    --models $3 --tokens $4 --schemes $5 --gemm-paths $6 > $o/$1.$2.log 2>&1
  echo "$1 $2 rc $? ($((SECONDS - start)) s)"
}
for part in "$@"; do
  case $part in
    tests)
      for b in ${BINS:-tc sh}; do
        f='Fp4Mainloop.*:Int4Mainloop.*:Int4Int8Mainloop.*:W4Prefill.*:RepackedCopy.*:RandomLayerEdges.*'
        QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$root/$b timeout 200 $root/$b/qmoe_cuda_tests \
          --gtest_filter="$f" > $o/tests_$b.log 2>&1
        echo "tests $b rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/tests_$b.log
        QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$root/$b timeout 100 compute-sanitizer --tool memcheck \
          --error-exitcode 9 $root/$b/qmoe_cuda_tests --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $o/memcheck_$b.log 2>&1
        echo "memcheck $b rc $? ($((SECONDS - start)) s)"; tail -1 $o/memcheck_$b.log
      done ;;
    branch_ab)
      for r in $(seq ${ROUNDS:-2}); do
        for b in p ${NEW:-tc sh}; do
          bench mix_r$r $b mixtral-8x7b 32,48,64,96 mxfp4,nvfp4a16,w4a16_g32 auto,prefill:4
          bench ds_r$r $b deepseek-v3 256,384,512,768 mxfp4,nvfp4a16,w4a16_g32 auto,prefill:4
          bench q3_r$r $b qwen3-30b-a3b 128,192,256,384 mxfp4,nvfp4a16,w4a16_g32 auto,prefill:4
          bench oss_r$r $b gpt-oss-120b 256,384,512,768 mxfp4,nvfp4a16 auto,prefill:4
        done
      done ;;
    wide_ab)
      for r in $(seq ${ROUNDS:-2}); do
        for b in p ${NEW:-m}; do
          bench wmix_r$r $b mixtral-8x7b 1024,4096,8192 nvfp4a16,w4a16_g32,w4a16_g128,w4a16_asym_g128 auto
          bench wds_r$r $b deepseek-v3 2048,8192 nvfp4a16,w4a16_g32,w4a16_g128 auto
          bench wq3_r$r $b qwen3-30b-a3b 1024,4096,8192 nvfp4a16,w4a16_g32,w4a16_asym_g128 auto
        done
      done ;;
    suite)
      QMOE_GPU_TEST_PARTS=tests timeout $((590 - SECONDS)) tools/gpu_test.sh $root/${BIN:-p} $o > $o/suite.log 2>&1
      echo "suite rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST|^\[==" $o/gpu_tests.log | tail -8 ;;
    plan_ab)
      for r in $(seq ${ROUNDS:-2}); do
        for b in mc p; do
          bench mix_r$r $b mixtral-8x7b 24,32,36,40,44,48,56,64 mxfp4 auto
          bench ds_r$r $b deepseek-v3 256,288,320,352,384,448,512 mxfp4 auto
          bench q3_r$r $b qwen3-30b-a3b 128,144,160,176,192,224,256 mxfp4 auto
          bench oss_r$r $b gpt-oss-120b 256,288,320,384,448,512 mxfp4 auto
        done
      done ;;
    short)
      bench short_ds p deepseek-v3-tp8 192,256,320,384,448,512,640 mxfp4 auto,decode,prefill:4
      bench short_kimi p kimi-k2-tp8 288,384,480,576,672,768,960 mxfp4 auto,decode,prefill:4 ;;
    short_ab)
      for r in $(seq ${ROUNDS:-2}); do
        for b in m m2; do
          bench sds_r$r $b deepseek-v3-tp8 256,288,320,384,448,512,640 mxfp4 auto
          bench skimi_r$r $b kimi-k2-tp8 384,432,480,576,672,768,960 mxfp4 auto
        done
      done ;;
    w4_paths)
      s4=nvfp4a16,w4a16_g32
      bench pmix m mixtral-8x7b 24,32,40,48,56 $s4 auto,decode,prefill:4
      bench pds m deepseek-v3 192,256,320,384,448 $s4 auto,decode,prefill:4
      bench pq3 m qwen3-30b-a3b 96,128,160,192,224 $s4 auto,decode,prefill:4
      bench poss m gpt-oss-120b 192,256,320,384,448 $s4 auto,decode,prefill:4
      bench pdst m deepseek-v3-tp8 192,256,320,384,448 $s4 auto,decode,prefill:4 ;;
    w4_paths2)
      bench qds m deepseek-v3 96,128,160,192 nvfp4a16 auto,decode,prefill:4
      bench qoss m gpt-oss-120b 96,128,160,192,224 nvfp4a16 auto,decode,prefill:4
      bench qmix m mixtral-8x7b 28,36,44 w4a16_g32 auto,decode,prefill:4
      bench qmixa m mixtral-8x7b 32,36,40,48 w4a16_asym_g128 auto,decode,prefill:4
      bench qds4 m deepseek-v3 288,352 w4a16_g32 auto,decode,prefill:4
      bench qq3 m qwen3-30b-a3b 144,176 w4a16_g32 auto,decode,prefill:4
      bench qq3a m qwen3-30b-a3b 128,144,160,192 w4a16_asym_g128 auto,decode,prefill:4
      bench qoss4 m gpt-oss-120b 224,288 w4a16_g32 auto,decode,prefill:4
      bench qdst m deepseek-v3-tp8 352 w4a16_g32 auto,decode,prefill:4
      bench qdstn m deepseek-v3-tp8 224,288 nvfp4a16 auto,decode,prefill:4 ;;
    verify)
      for r in 1 2; do
        for b in m m3; do
          bench vnv_ds_r$r $b deepseek-v3 192,224 nvfp4a16 auto
          bench vnv_oss_r$r $b gpt-oss-120b 192,224,256 nvfp4a16,w4a16_g32 auto
          bench vnv_q3_r$r $b qwen3-30b-a3b 112,160,176 nvfp4a16,w4a16_g32,w4a16_asym_g128,w4a16_g128 auto
          bench vnv_tp_r$r $b deepseek-v3-tp8 256,320,352 nvfp4a16,mxfp4 auto
          bench vi_mix_r$r $b mixtral-8x7b 40,44 w4a16_g32,w4a16_asym_g128 auto
          bench vi_ds_r$r $b deepseek-v3 288,320,352 w4a16_g32 auto
          bench vmx_kimi_r$r $b kimi-k2-tp8 480,528 mxfp4 auto
        done
      done ;;
    branches)
      ab_round() {
        for b in m3 ${NEW:-pf d2 dp}; do
          bench fmix_r$1 $b mixtral-8x7b 48,64,128 mxfp4,nvfp4a16,w4a16_g32 auto,prefill:4,prefill:5
          bench fds_r$1 $b deepseek-v3 384,512 mxfp4,nvfp4a16,w4a16_g32 auto,prefill:4
        done
      }
      ab_round 1
      for b in ${NEW:-pf d2 dp}; do
        QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$root/$b timeout 120 $root/$b/qmoe_cuda_tests \
          --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*' > $o/tests_$b.log 2>&1
        echo "tests $b rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED TEST" $o/tests_$b.log
      done
      ab_round 2 ;;
    profile)
      for s in nvfp4a16 mxfp4; do
        n=narrow32_${s}_64; left=$((570 - SECONDS)); (( left < 60 )) && { echo "skip $n"; continue; }
        LD_LIBRARY_PATH=$PWD/$root/m timeout $left ncu --clock-control none --set full --import-source no -k regex:fp4_grouped --launch-count 2 \
          -o $o/$n $root/m/qmoe bench --models mixtral-8x7b --schemes $s --tokens 64 --gemm-paths prefill:4 \
          --rotations 1 --replays 1 > $o/$n.log 2>&1
        echo "$n rc $? ($((SECONDS - start)) s)"
        ncu -i $o/$n.ncu-rep --page details > $o/$n.details.txt 2>&1
        ncu -i $o/$n.ncu-rep --page source --csv --print-source sass > $o/$n.source.csv 2>&1 || echo "source page failed"
        xz -T4 $o/$n.source.csv; rm -f $o/$n.ncu-rep
        grep -E "Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Achieved Occupancy" $o/$n.details.txt | head -10
      done ;;
    kernel_race)
      b=${BIN:-p}
      QMOE_TEST_SANITIZER_SUBSET=1 QMOE_TEST_DATA_DIR=$PWD/tests/data LD_LIBRARY_PATH=$PWD/$root/$b \
        timeout ${RACE_S:-400} compute-sanitizer --tool racecheck $root/$b/qmoe_cuda_tests \
        --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*:Int4Int8Mainloop.*' > $o/kernel_race.log 2>&1
      echo "kernel_race rc $? ($((SECONDS - start)) s)"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" $o/kernel_race.log
      echo "hazard lines: $(grep -c 'Race reported' $o/kernel_race.log)" ;;
    sustained)
      b=${BIN:-p}
      for s in mxfp4 nvfp4a16 w4a16_g128; do
        for tokens in 4096 8192; do
          nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader \
            -lms 50 > $o/smi_${s}_$tokens.csv 2>&1 &
          mon=$!
          LD_LIBRARY_PATH=$PWD/$root/$b timeout 60 $root/$b/qmoe bench --models mixtral-8x7b --schemes $s \
            --tokens $tokens --rotations 2 --replays 400 > $o/sustained_${s}_$tokens.log 2>&1
          kill $mon; wait $mon 2>/dev/null
          echo "sustained $s $tokens ($((SECONDS - start)) s): $(grep -h mixtral $o/sustained_${s}_$tokens.log)"
          awk -F', ' '$2+0 > 400 {n++; c += $2; w += $3} END {if (n) printf "  %d busy samples, %.0f MHz, %.0f W\n", n, c/n, w/n}' \
            $o/smi_${s}_$tokens.csv
        done
      done ;;
    *) echo "s42.sh: unknown part $part"; exit 2 ;;
  esac
done
tar czf $OUT/s42_$(IFS=_; echo "$*").tgz -C $OUT s42 && rm -rf $o
