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

}  // namespace qmoe
