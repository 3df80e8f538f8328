// Tuning constants of the tensor-core kernel's launch heuristic (plan_mma_launch). Kept out of
// gemm_plan.h, which every CUDA file includes, so that retuning them rebuilds only the planner.
#pragma once

namespace qmoe {

// Reduction split: as many warps per row tile as keep at least kMmaLongSlice steps each (a longer
// slice per warp keeps more loads in flight and amortizes its prologue and reduction: up to 1.3x
// faster than kMmaShortSlice at 8-128 tokens on the H200), unless the grid would then have fewer
// than kMmaMinWaves waves of kMmaBlocksPerSm blocks per SM: short grids (1 token on DeepSeek-V3 and
// Qwen3-30B-A3B) ran up to 1.13x faster with the short slices' smaller, more numerous blocks. Short
// reductions (w2 of small experts) give rows to more warps instead.
inline constexpr int kMmaLongSlice = 8;
inline constexpr int kMmaShortSlice = 4;
inline constexpr int kMmaMinWaves = 3;
inline constexpr int kMmaBlocksPerSm = 3;  // the pipelined one-n-tile kernels' occupancy (moe_mma.cu)

// The automatic path switches a projection to its prefill grouped GEMM (use_grouped_kernel) from
// kGroupedMinTokens tokens, or from kGroupedMinTokensFull when every expert gets a slot on average.
// Measured on the H200 (FP8 channel, bench/NOTES.md): the prefill kernels win from 8 tokens on
// Mixtral (1 slot/expert), tie at 16 and win from 24 on Qwen3-30B-A3B, and win by 1-4% from 2
// tokens on DeepSeek-V3, where this rule still takes the decode kernels below 16.
inline constexpr int kGroupedMinTokens = 16;
inline constexpr int kGroupedMinTokensFull = 8;
// Prefill tiles by mean rows per expert (H200, FP8 channel, bench/NOTES.md): 64 x 128 pingpong
// below kGroupedMinRowsFor128 (up to 1.15x faster than 128-row tiles on Qwen3-30B-A3B and
// DeepSeek-V3 at 16-1024 tokens), 128 x 128 cooperative up to kGroupedMinRowsFor192 (1.1x faster
// than pingpong on Mixtral at 256 tokens), then 128 x 192 (3-4% faster on Mixtral at 4096-16384).
inline constexpr int kGroupedMinRowsFor128 = 64;
inline constexpr int kGroupedMinRowsFor192 = 1024;

}  // namespace qmoe
