// Prefill grouped GEMM instances (one per GroupedTile): FP8 e4m3 x e4m3 (W8A8 with per-tensor or per-channel weight scales, per-row input scales),
// fp32 accumulation promoted every 4 MMAs (CUTLASS's default; the Hopper FP8 MMA's own accumulator
// keeps fewer bits, which put the layer output 1.0-1.5x past the W8A8 tolerance at k 2048-2880).
#include "cuda/grouped_sm90.cuh"

namespace qmoe::cuda {

std::unique_ptr<GroupedTcGemm> make_grouped_fp8(GroupedTile tile, const GroupedTcBuffers& buf, int groups, int64_t n,
                                                int64_t k, int num_sms) {
  return sm90::make_grouped<cutlass::float_e4m3_t, float, cute::_128, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                            cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong>(tile, buf, groups, n, k, num_sms);
}

}  // namespace qmoe::cuda
