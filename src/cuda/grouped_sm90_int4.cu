// Prefill grouped GEMM instances (one per GroupedTile): signed INT4 weights (two's complement on the device, see
// launch_codes_to_signed) with bf16 group or channel scales x bf16 inputs, fp32 accumulation (W4A16;
// W4A8 with the activation codes as bf16 inputs and their row scale in the epilogue).
#include "cuda/grouped_sm90_mixed.cuh"

namespace qmoe::cuda {

std::unique_ptr<GroupedTcGemm> make_grouped_int4_bf16(GroupedTile tile, const GroupedTcBuffers& buf, int groups,
                                                      int64_t n, int64_t k, int64_t group_size, int num_sms) {
  return sm90::make_mixed_grouped<cutlass::int4b_t>(tile, buf, groups, n, k, group_size, num_sms);
}

}  // namespace qmoe::cuda
