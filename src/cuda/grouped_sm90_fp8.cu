// Prefill grouped GEMM instances (one per GroupedTile): FP8 e4m3 x e4m3 (W8A8 with per-tensor or
// per-channel weight scales, per-row input scales). The sums stay in the Hopper FP8 MMA's own
// (reduced-precision) accumulator over the whole k, as in vLLM's CUTLASS (FastAccum) and Triton
// (imprecise accumulation by default on sm90) FP8 MoE kernels: 10-13% faster than promoting them to
// fp32 every 4 MMAs (H200, bench/RESULTS.md), at a layer rel_l2 of up to 2e-2 against the CPU
// (bound 3e-2, docs/tolerances.md).
#include "cuda/grouped_sm90.cuh"

namespace qmoe::cuda {

std::unique_ptr<GroupedTcGemm> make_grouped_fp8(GroupedTile tile, const GroupedTcBuffers& buf, int groups, int64_t n,
                                                int64_t k, int num_sms) {
  return sm90::make_grouped<cutlass::float_e4m3_t, float, cute::_128, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum,
                            cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum>(tile, buf, groups, n, k, num_sms);
}

}  // namespace qmoe::cuda
