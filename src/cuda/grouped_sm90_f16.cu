// Prefill grouped GEMM instances (one per GroupedTile): F16 x F16 with fp32 accumulation (unquantized
// experts of f16 models, and f16 weights dequantized into a workspace; no scales).
#include "cuda/grouped_sm90.cuh"

namespace qmoe::cuda {

std::unique_ptr<GroupedTcGemm> make_grouped_f16(GroupedTile tile, const GroupedTcBuffers& buf, int groups, int64_t n,
                                                int64_t k, int num_sms) {
  return sm90::make_grouped<cutlass::half_t, float, cute::_64, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                            cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong>(tile, buf, groups, n, k, num_sms);
}

}  // namespace qmoe::cuda
