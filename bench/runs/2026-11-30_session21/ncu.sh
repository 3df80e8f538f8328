#!/usr/bin/env bash
# Profiles the 4-bit register kernel's two GEMMs (ncu, clocks not locked) on the shapes where it is
# slowest against torch: DeepSeek-V3 TP8 NVFP4 / MXFP4 at 2048 tokens, Mixtral NVFP4 at 4096.
B=${B:-.gpu/s21}
for f in $B/*.gz; do gunzip -f $f; done; chmod +x $B/qmoe $B/qmoe_cuda_tests
export LD_LIBRARY_PATH=$PWD/$B
o=$OUT/ncu; mkdir -p $o
prof() {  # name model scheme tokens
  ncu --clock-control none --graph-profiling node -k regex:fp4_grouped_gemm --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats \
    $B/qmoe bench --models $2 --schemes $3 --tokens $4 --rotations 1 --replays 1 --gemm-paths prefill > $o/$1.txt 2>&1
  grep -E "fp4_grouped|Duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Registers|Achieved Occ" $o/$1.txt | head -40
}
prof tp8_nvfp4_2048 deepseek-v3-tp8 nvfp4a16 2048
prof tp8_mxfp4_2048 deepseek-v3-tp8 mxfp4 2048
prof mixtral_nvfp4_4096 mixtral-8x7b nvfp4a16 4096
$B/qmoe bench --models deepseek-v3-tp8 --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 1024,2048 --rotations 2 --replays 5 --gemm-paths decode,prefill > $o/bench_paths.txt 2>&1
tail -20 $o/bench_paths.txt
