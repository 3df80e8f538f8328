#!/usr/bin/env bash
# Batched epilogue fast paths (this session's working tree, build in .gpu/e) against main `b895cf6`
# (build in .gpu/d, the divide-rn-256 branch's build, whose code main now holds): the register
# kernel's tests and the new exhaustive fast-path tests on e, then the A/B (three alternated
# rounds, layer and GEMM µs) on the shapes where the epilogue counts: Qwen3-30B-A3B at
# 2048-8192 tokens, Mixtral NVFP4, DeepSeek-V3 TP8 NVFP4 / MXFP4 and gpt-oss-120b NVFP4 at 4096.
set -u
for d in .gpu/d .gpu/e; do xz -d $d/*.xz 2>/dev/null; chmod +x $d/qmoe $d/qmoe_cuda_tests; done
export QMOE_TEST_DATA_DIR=$PWD/tests/data
start=$SECONDS
LD_LIBRARY_PATH=$PWD/.gpu/e timeout 200 .gpu/e/qmoe_cuda_tests \
  --gtest_filter='Fp4Mainloop.*:Int4Mainloop.*:Formats/RandomLayers.*:W4Prefill.*:DivideRn.*:SiluQuick.*:HardwareConversions.*' > $OUT/e_tests.log 2>&1
echo "tests rc $? ($((SECONDS - start)) s)"; grep -hE "^\[  (PASSED|FAILED)|FAILED|OK \] (DivideRn|SiluQuick)" $OUT/e_tests.log | head -20
ab() { timeout 200 tools/gpu_ab.sh .gpu/d .gpu/e $OUT/$1 3 "${@:2}" --rotations 2 --replays 5 > /dev/null 2>&1; echo "ab $1 rc $? ($((SECONDS - start)) s)"; cat $OUT/$1/summary.txt; }
ab qwen3 --models qwen3-30b-a3b --schemes nvfp4a16,mxfp4,w4a16_g32 --tokens 2048,4096,8192
ab tp8 --models deepseek-v3-tp8 --schemes nvfp4a16,mxfp4 --tokens 2048,4096
ab others --models mixtral-8x7b,gpt-oss-120b --schemes nvfp4a16 --tokens 4096
cd $OUT && tar czf ab.tgz qwen3 tp8 others && rm -rf qwen3 tp8 others
