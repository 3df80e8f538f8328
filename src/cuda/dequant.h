// The prefill path of weight-only layouts without a mixed-input kernel (GroupedKernel::kDequantBf16,
// kDequantF16): a batch of experts' weights dequantized to bf16 (f16), then the bf16 (f16) grouped
// GEMM on that batch's rows.
// (Its own header: moe_kernels.h is included by the CUTLASS instance files, which this leaves alone.)
#pragma once

#include "cuda/moe_kernels.h"

namespace qmoe::cuda {

// The weights of local experts [first, first + count) dequantized (formats.h, as the CPU reference)
// to bf16, or with `f16` to f16, [count, rows, cols] in `out`; experts without slots
// (expert_offsets) are skipped and their part of `out` left as it was. Only for layouts whose values
// the output type holds exactly (dequantizes_to_bf16_exactly, dequantizes_to_f16_exactly); cols a
// multiple of 8.
struct DequantParams {
  WeightLayout layout;
  const ExpertTensors* experts = nullptr;   // [num_local_experts] (device)
  const int32_t* expert_offsets = nullptr;  // [num_local_experts + 1] (device)
  int first = 0, count = 0;
  uint16_t* out = nullptr;  // [count, rows, cols] bf16 or f16
  bool f16 = false;
};
cudaError_t launch_dequantize(const DequantParams& p, cudaStream_t stream);

// launch_grouped_setup for one batch: only groups [begin, end) get their rows (the others none),
// group e's weights at b_rows + (e - begin) * b_group_bytes.
struct DequantBatch {
  const void* b_rows = nullptr;
  int64_t b_group_bytes = 0;
  int begin = 0, end = 0;
};
cudaError_t launch_grouped_setup_batch(const GroupedSetupParams& p, const DequantBatch& batch, cudaStream_t stream);

}  // namespace qmoe::cuda
