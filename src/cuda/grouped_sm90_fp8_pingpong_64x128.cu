// Prefill grouped GEMM instance: FP8 e4m3 x e4m3 with fp32 accumulation promoted every 4 MMAs
// (CUTLASS's default; the Hopper FP8 MMA's own accumulator keeps fewer bits, which put the layer
// output 1.0-1.5x past the W8A8 tolerance at k 2048-2880), per-column weight and per-row input
// scales. Promotion keeps a second accumulator, so a warpgroup's tile stays at 64 x <= 192 fp32
// values per thread pair to fit the registers (64 x 256 spilled).
#include "cuda/grouped_sm90.cuh"

namespace qmoe::cuda {

namespace {
// 64 x 128 tiles, two consumer warpgroups alternating tiles (one's epilogue under the other's
// mainloop): few rows per expert, short k.
using Config = sm90::GroupedConfig<cutlass::float_e4m3_t, float, cute::Shape<cute::_64, cute::_128, cute::_128>,
                                   cute::Shape<cute::_1, cute::_2, cute::_1>,
                                   cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                                   cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>;
}  // namespace

std::unique_ptr<GroupedTcGemm> make_grouped_fp8_pingpong_64x128(const GroupedTcBuffers& buf, int groups,
                                                                int64_t n, int64_t k, int num_sms) {
  return std::make_unique<sm90::GroupedGemm<Config>>(buf, groups, n, k, num_sms);
}

}  // namespace qmoe::cuda
