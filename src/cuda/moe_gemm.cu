// Grouped GEMM over the routed slots, one shared skeleton for every weight format: a warp owns an
// output row of one expert, its lanes walk the reduction dimension dequantizing the canonical
// checkpoint layout element by element (the same formats.h arithmetic as the CPU reference) and
// accumulate up to kSlotTile slots at once in fp32. Correctness first: this is the generic path
// every faster kernel is checked against.
#include "cuda/launch.cuh"
#include "cuda/moe_kernels.h"
#include "cuda/weight_access.cuh"
#include "quant/formats.h"

namespace qmoe::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kSlotTile = 8;

__global__ void __launch_bounds__(kWarpsPerBlock * 32) grouped_gemm_kernel(GroupedGemmParams p) {
  chain_start();
  int e, m0, m1;
  if (!block_expert(p, &e, &m0, &m1)) return;
  const WeightLayout& L = p.layout;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (n >= L.rows) return;
  const ExpertTensors w = p.experts[e];
  const int64_t K = L.cols;
  const float bias = w.bias ? w.bias[n] : 0.0f;
  for (int s0 = m0; s0 < m1; s0 += kSlotTile) {
    const int count = min(kSlotTile, m1 - s0);
    const float* rows[kSlotTile];  // (K) input rows of the tile's slots
    int slots[kSlotTile];
#pragma unroll
    for (int i = 0; i < kSlotTile; ++i) {
      slots[i] = p.sorted_slots[s0 + min(i, count - 1)];
      rows[i] = p.in + static_cast<int64_t>(p.in_by_token ? slots[i] / p.top_k : slots[i]) * K;
    }
    float acc[kSlotTile] = {};
    for (int64_t c = lane; c < K; c += 32) {
      const float wv = dequant(L, w, n, c);
#pragma unroll
      for (int i = 0; i < kSlotTile; ++i) acc[i] += wv * rows[i][c];
    }
#pragma unroll
    for (int i = 0; i < kSlotTile; ++i)
      for (int o = 16; o > 0; o >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
    if (lane == 0)
      for (int i = 0; i < count; ++i) p.out[static_cast<int64_t>(slots[i]) * L.rows + n] = acc[i] + bias;
  }
}

}  // namespace

cudaError_t launch_grouped_gemm(const GroupedGemmParams& p, cudaStream_t stream) {
  if (p.chunks == nullptr || p.num_chunks == nullptr) return cudaErrorInvalidValue;
  if (p.max_chunks == 0 || p.layout.rows == 0) return cudaSuccess;
  if (p.max_chunks > kMaxGridRows) return cudaErrorInvalidConfiguration;  // (mma_chunk_slots keeps it below)
  const dim3 grid(static_cast<unsigned>((p.layout.rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>(p.max_chunks));
  return launch_chained(grouped_gemm_kernel, grid, kWarpsPerBlock * 32, 0, stream, p);
}

}  // namespace qmoe::cuda
