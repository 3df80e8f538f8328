// The prefill grouped GEMM instances (CUTLASS, src/cuda/grouped_sm90_*.cu) and the per-group arrays
// they read. The instance files include only this (and config/grouped_tile.h), so that a change of
// the planner or of the other kernels' interface (moe_kernels.h) rebuilds nothing heavy.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "config/grouped_tile.h"

namespace qmoe::cuda {

// Per-group device arrays ([groups] each) that the prefill grouped GEMM reads, filled on the device
// for every forward by launch_grouped_setup (so the GEMM's own arguments are fixed at load).
struct GroupedTcBuffers {
  int32_t* problem_mnk = nullptr;  // [groups, 3]: (m_e, n, k), or (n, m_e, k) for the swapped tiles
                                   // (grouped_tile_swapped: the mixed-input kernels, the wide tile)
  const void** a = nullptr;        // A_e: [m_e, k] rows of the sorted input
  const void** b = nullptr;        // B_e: [n, k] weights
  void** d = nullptr;              // D_e: [m_e, n] fp32 rows of the sorted output (terms instances: bf16)
  float** a_scale = nullptr;       // [m_e] per-row input scales, or the array itself null (scale 1);
                                   // FP8 block: [m_e, ceil(k / 128)]
  float** b_scale = nullptr;       // [n] per-column weight scales, or the array itself null (scale 1);
                                   // FP8 block: [ceil(n / 128), ceil(k / 128)]
  const void** b_group_scale = nullptr;  // weight-only kernels: [k / group, n] bf16 scales (n contiguous)
  const float** row_weight = nullptr;  // terms instances: [m_e] each row's routing weight, or the array null (1)
};

// One grouped GEMM instance (CUTLASS, wgmma + TMA) bound to its buffers at load; run() only
// launches. D_e = (A_e B_e^T) * a_scale_e (rows) * b_scale_e (columns).
class GroupedTcGemm {
 public:
  virtual ~GroupedTcGemm() = default;
  virtual cudaError_t run(cudaStream_t stream) = 0;
};
// Override of the order in which the persistent tile scheduler walks each group's output tiles, for
// A/B runs: QMOE_RASTER=m (consecutive tiles along M) or n. Read once per process; unset: the
// weights-stationary order (grouped_sm90_common.cuh). (No swizzle knob: with the problem shapes only
// on the device, CUTLASS's grouped scheduler always computes a swizzle of 1.)
struct GroupedTileOrder {
  int raster = 0;  // 0 default, 1 along M, 2 along N
};
GroupedTileOrder grouped_tile_order();

// The instances of each operand type (grouped_sm90_<type>.cu), one per tile of config/grouped_tile.h.
// They throw std::invalid_argument for sizes they cannot take.
std::unique_ptr<GroupedTcGemm> make_grouped_fp8(GroupedTile tile, const GroupedTcBuffers& buf, int groups, int64_t n,
                                                int64_t k, int num_sms);
std::unique_ptr<GroupedTcGemm> make_grouped_int8(GroupedTile tile, const GroupedTcBuffers& buf, int groups, int64_t n,
                                                 int64_t k, int num_sms);
std::unique_ptr<GroupedTcGemm> make_grouped_bf16(GroupedTile tile, const GroupedTcBuffers& buf, int groups, int64_t n,
                                                 int64_t k, int num_sms);
// GEMM2's terms instances of the bf16 kernel (grouped_sm90_bf16_terms.cu): D_e holds the combine's
// terms bf16(row_weight_e[m] * (A_e B_e^T)[m, n]) (the product in fp32, one rounding), half the
// bytes of the fp32 rows, and the combine only sums them.
std::unique_ptr<GroupedTcGemm> make_grouped_bf16_terms(GroupedTile tile, const GroupedTcBuffers& buf, int groups,
                                                       int64_t n, int64_t k, int num_sms);
// The same for the FP8 kernel (grouped_sm90_fp8_terms.cu): bf16(row_weight_e[m] * D_e[m, n]) with D_e
// the scaled fp32 sums as above.
std::unique_ptr<GroupedTcGemm> make_grouped_fp8_terms(GroupedTile tile, const GroupedTcBuffers& buf, int groups,
                                                      int64_t n, int64_t k, int num_sms);
std::unique_ptr<GroupedTcGemm> make_grouped_f16(GroupedTile tile, const GroupedTcBuffers& buf, int groups, int64_t n,
                                                int64_t k, int num_sms);
// INT4 and INT8 weights dequantized in the mainloop (grouped_sm90_int4.cu, grouped_sm90_int8w.cu;
// transposed: problem_mnk holds (n, m_e, k)): D_e = (A_e * dequant(B_e)^T) * a_scale_e (rows; W4A8's
// activation codes, else a null array) with B_e signed int4 / int8 codes [n, k] and bf16 scales
// b_group_scale_e [k / group_size, n].
std::unique_ptr<GroupedTcGemm> make_grouped_int4_bf16(GroupedTile tile, const GroupedTcBuffers& buf, int groups,
                                                      int64_t n, int64_t k, int64_t group_size, int num_sms);
std::unique_ptr<GroupedTcGemm> make_grouped_int8_bf16(GroupedTile tile, const GroupedTcBuffers& buf, int groups,
                                                      int64_t n, int64_t k, int64_t group_size, int num_sms);
// The same for f16 models: f16 inputs, f16 scales (grouped_sm90_int4_f16.cu, grouped_sm90_int8w_f16.cu).
std::unique_ptr<GroupedTcGemm> make_grouped_int4_f16(GroupedTile tile, const GroupedTcBuffers& buf, int groups,
                                                     int64_t n, int64_t k, int64_t group_size, int num_sms);
std::unique_ptr<GroupedTcGemm> make_grouped_int8_f16(GroupedTile tile, const GroupedTcBuffers& buf, int groups,
                                                     int64_t n, int64_t k, int64_t group_size, int num_sms);
// FP8 with 128 x 128 weight blocks and inputs in groups of 128 columns (grouped_sm90_fp8_block.cu):
// D_e[m, n] = sum over 128-column blocks b of a_scale_e[m, b] * b_scale_e[n / 128, b] *
// sum_{k in b} A_e[m, k] B_e[n, k], the inner sums in the FP8 MMA's (reduced-precision) accumulator,
// the outer in fp32.
std::unique_ptr<GroupedTcGemm> make_grouped_fp8_block(GroupedTile tile, const GroupedTcBuffers& buf, int groups,
                                                      int64_t n, int64_t k, int num_sms);

}  // namespace qmoe::cuda
