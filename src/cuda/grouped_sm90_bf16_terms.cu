// Prefill grouped GEMM instances (one per GroupedTile): BF16 x BF16 with fp32 accumulation whose
// epilogue writes GEMM2's weighted bf16 terms for the combine (make_grouped_bf16_terms).
#include "cuda/grouped_sm90.cuh"

namespace qmoe::cuda {

std::unique_ptr<GroupedTcGemm> make_grouped_bf16_terms(GroupedTile tile, const GroupedTcBuffers& buf, int groups,
                                                       int64_t n, int64_t k, int num_sms) {
  return sm90::make_grouped<cutlass::bfloat16_t, float, cute::_64, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                            cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong, true>(tile, buf, groups, n, k,
                                                                                           num_sms);
}

}  // namespace qmoe::cuda
