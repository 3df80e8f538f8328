// Prefill grouped GEMM instances (one per GroupedTile): the FP8 kernel of grouped_sm90_fp8.cu whose
// epilogue writes GEMM2's weighted bf16 terms for the combine (make_grouped_fp8_terms).
#include "cuda/grouped_sm90.cuh"

namespace qmoe::cuda {

std::unique_ptr<GroupedTcGemm> make_grouped_fp8_terms(GroupedTile tile, const GroupedTcBuffers& buf, int groups,
                                                      int64_t n, int64_t k, int num_sms) {
  return sm90::make_grouped<cutlass::float_e4m3_t, float, cute::_128, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum,
                            cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum, true>(tile, buf, groups, n,
                                                                                                       k, num_sms);
}

}  // namespace qmoe::cuda
