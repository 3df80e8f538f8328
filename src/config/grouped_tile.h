// The prefill kernels' tile configurations: a header of its own, so that the CUTLASS instance
// files (src/cuda/grouped_sm90_*.cu, through cuda/grouped_gemm.h) depend on nothing the planner or
// the backend change.
#pragma once

namespace qmoe {

// Tile configurations of the prefill kernels by the rows per expert they suit (one compiled instance
// each, all loaded with the layer; the values are the `prefill:<tile>` numbers of qmoe bench). What
// each is for each kernel: tile_config.
enum class GroupedTile {
  kMedium,  // FP8/INT8/BF16: cooperative 128 x 128 (a sweep option, not planned); W4A16: cooperative
            // 128 x 192, clusters of 2
  kLarge,   // FP8/INT8/BF16: pingpong 128 x 192, clusters of 2 (planned for bf16's GEMMs of short
            // reduction only); W4A16: 128 x 256, clusters of 2; FP8 block: cooperative 128 x 128
            // without clusters (a sweep option, not planned)
  kSmall,   // FP8/INT8/BF16/FP8 block: pingpong 64 x 128; W4A16: cooperative 128 x 128
  kHuge,    // FP8/INT8/BF16: cooperative 128 x 256, clusters of 2; the 4-bit register kernel: 320 input
            // rows (ranges of rows per expert: RegisterTileSwitches, gemm_tuning.h); not built for others
  kTiny,    // W4A16/W8A16/W4A8: cooperative 128 x 32 (a few input rows per expert: the 128-row tiles
            // multiply 4-16x more padding than rows); not built for the others
  kTiny48,  // W4A16/W8A16/W4A8: cooperative 128 x 48 (~28-44 rows per expert, where an expert
            // above 32 rows took a second 128 x 32 tile); not built for the others
  kWide,    // FP8/INT8/BF16: cooperative 128 x 192 weight rows x input rows (computed transposed, the
            // weights as A), clusters of 2 along the weight rows: an expert of ~130-192 rows in one
            // tile instead of two of 128; the 4-bit register kernel: 192 input rows (~120-180 rows
            // per expert); not built for the others
};
inline constexpr int kGroupedTiles = 7;

}  // namespace qmoe
