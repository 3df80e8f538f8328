#!/usr/bin/env bash
# One call in the session's last ~240 s: W4A16 g128 on the register kernel against torch's bf16
# grouped GEMM (tools/gpu_bench.sh), three shapes at 1024-8192 tokens. Build: main after `afbf7e2`
# with the few-experts switch at 22 (.gpu/n; no count here is near it).
set -u
tools/gpu_unpack.sh .gpu/n
mkdir -p $OUT/status
QMOE_COMMIT=afbf7e2+22 timeout 170 tools/gpu_bench.sh .gpu/n $OUT/status --models mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 \
  --schemes w4a16_g128 --tokens 1024,2048,4096,8192 --rotations 2 --replays 5 > $OUT/tail.txt 2>&1
echo "rc $?"; tail -n 20 $OUT/status/torch.log; ls $OUT/status
