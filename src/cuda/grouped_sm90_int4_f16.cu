// Prefill grouped GEMM instances (one per GroupedTile) of f16 models: signed INT4 weights (two's complement on
// the device) with f16 group or channel scales x f16 inputs, fp32 accumulation (W4A16 of GPTQ-like f16
// checkpoints).
#include "cuda/grouped_sm90_mixed.cuh"

namespace qmoe::cuda {

std::unique_ptr<GroupedTcGemm> make_grouped_int4_f16(GroupedTile tile, const GroupedTcBuffers& buf, int groups,
                                                     int64_t n, int64_t k, int64_t group_size, int num_sms) {
  return sm90::make_mixed_grouped<cutlass::int4b_t, cutlass::half_t>(tile, buf, groups, n, k, group_size, num_sms);
}

}  // namespace qmoe::cuda
