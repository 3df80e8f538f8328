// Prefill grouped GEMM instances (one per GroupedTile): INT8 x INT8 with int32 accumulation (W8A8 with per-tensor or per-channel
// weight scales, per-row input scales applied to the exact int32 sums).
#include "cuda/grouped_sm90.cuh"

namespace qmoe::cuda {

std::unique_ptr<GroupedTcGemm> make_grouped_int8(GroupedTile tile, const GroupedTcBuffers& buf, int groups, int64_t n,
                                                 int64_t k, int num_sms) {
  return sm90::make_grouped<int8_t, int32_t, cute::_128, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                            cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong>(tile, buf, groups, n, k, num_sms);
}

}  // namespace qmoe::cuda
