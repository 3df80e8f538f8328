// The decode path of the grouped GEMM: few slots per expert, so the weights are read exactly once
// with 16-byte loads, dequantized in registers (formats.h arithmetic, identical to the CPU) and
// multiplied with up to kSlots input rows at a time. A warp owns 1-4 output rows, several 16-byte
// chunks in flight per lane. Layouts it cannot take (act-order g_idx, rows not a multiple of 16
// bytes, groups that split a chunk) return cudaErrorNotSupported and the caller uses the generic
// kernel.
#include <cuda_bf16.h>

#include "cuda/launch.cuh"
#include "cuda/moe_kernels.h"
#include "cuda/weight_access.cuh"
#include "quant/formats.h"

namespace qmoe::cuda {
namespace {

constexpr int kWarps = 8;

// How a 16-byte chunk decodes.
enum class Chunk { kInt4, kInt8Packed, kInt8, kFp8, kNvfp4, kMxfp4, kBf16, kF16 };

template <Chunk C>
constexpr int elems_per_chunk() {
  return C == Chunk::kInt4 || C == Chunk::kNvfp4 || C == Chunk::kMxfp4 ? 32
         : C == Chunk::kBf16 || C == Chunk::kF16                        ? 8
                                                                        : 16;
}

// Scale and zero point of the group that holds columns [col, col + chunk) (no act order here).
__device__ __forceinline__ float chunk_scale(const WeightLayout& L, const ExpertTensors& w, int64_t row, int64_t col) {
  return scale_at(L, w, row, group_of(L, w, col));
}

__device__ __forceinline__ int chunk_zero(const WeightLayout& L, const ExpertTensors& w, int64_t row, int64_t col) {
  return zero_point_at(L, w, row, group_of(L, w, col));
}

// Decodes the 16-byte chunk `raw` holding columns [col, col + elems) of `row`.
template <Chunk C>
__device__ __forceinline__ void decode(const WeightLayout& L, const ExpertTensors& w, int64_t row, int64_t col, uint4 raw,
                                       float* out) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (C == Chunk::kInt4) {
    if (L.round_to_scale_dtype && L.scale_kind == 0) {
      // W4A16 with bf16 scales, two nibbles per instruction: xor-ing a device nibble u ^ 8
      // (launch_codes_to_signed) with 8 into the mantissa of bf16 128.0 (0x4300) gives 128 + u
      // exactly; subtracting 136 + z gives q - z exactly; the
      // bf16x2 multiply by the scale rounds once to bf16, i.e. RNE_bf16((q - z) * s) as the CPU.
      // (w >> 4j) & 0x000F000F holds elements j and j + 4 of the word in its two halves.
      const __nv_bfloat162 s2 = __bfloat162bfloat162(__float2bfloat16_rn(chunk_scale(L, w, row, col)));
      const __nv_bfloat162 off2 = __bfloat162bfloat162(__float2bfloat16_rn(136.0f + chunk_zero(L, w, row, col)));
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t bits = ((words[i] >> (4 * j)) & 0x000F000Fu) ^ 0x43084308u;
          const __nv_bfloat162 v = __hmul2(__hsub2(*reinterpret_cast<const __nv_bfloat162*>(&bits), off2), s2);
          const uint32_t r = *reinterpret_cast<const uint32_t*>(&v);
          out[i * 8 + j] = __uint_as_float(r << 16);
          out[i * 8 + j + 4] = __uint_as_float(r & 0xFFFF0000u);
        }
      return;
    }
  }
  if constexpr (C == Chunk::kInt4 || C == Chunk::kInt8Packed || C == Chunk::kInt8) {
    const float s = chunk_scale(L, w, row, col);
    const int z = chunk_zero(L, w, row, col);
    const quant::ScaleKind kind = kind_of(L);
    constexpr int kBits = C == Chunk::kInt4 ? 4 : 8;
    constexpr int kPerWord = 32 / kBits;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < kPerWord; ++j) {
        // Device 4-bit codes are u ^ 8 (launch_codes_to_signed); 8-bit ones, packed or not, int8.
        const uint32_t u = ((words[i] >> (kBits * j)) & ((1u << kBits) - 1)) ^ (C == Chunk::kInt4 ? 8u : 0u);
        const int q = C == Chunk::kInt4 ? static_cast<int>(u) - 8 : static_cast<int>(static_cast<int8_t>(u));
        out[i * kPerWord + j] = quant::dequant_int(q, z, s, kind);
      }
  } else if constexpr (C == Chunk::kFp8) {
    const float s = chunk_scale(L, w, row, col);
    const quant::ScaleKind kind = kind_of(L);
#pragma unroll
    for (int i = 0; i < 16; ++i) out[i] = quant::dequant_fp8((words[i / 4] >> (8 * (i % 4))) & 0xFF, s, kind);
  } else if constexpr (C == Chunk::kNvfp4 || C == Chunk::kMxfp4) {
    const uint8_t* scales = static_cast<const uint8_t*>(w.scale) + row * L.scale_cols + col / L.group_size;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const uint8_t nibble = (words[i / 8] >> (4 * (i % 8))) & 0xF;
      const uint8_t sb = scales[C == Chunk::kNvfp4 ? i / 16 : 0];
      if constexpr (C == Chunk::kMxfp4)
        out[i] = quant::dequant_mxfp4(nibble, sb);
      else
        out[i] = L.round_to_scale_dtype ? quant::dequant_nvfp4(nibble, sb, w.global_scale)
                                        : quant::e2m1_to_float(nibble) * (quant::fp8e4m3_to_float(sb) / w.global_scale);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint16_t h = static_cast<uint16_t>(words[i / 2] >> (16 * (i % 2)));
      out[i] = C == Chunk::kBf16 ? quant::bf16_to_float(h) : quant::f16_to_float(h);
    }
  }
}

// Rows per warp. Several rows per warp (more 16-byte loads in flight per lane) paid off for int4 at
// 1-4 tokens on the H200 (d84b71f: Qwen3 W4A16 1 token 81 -> 63 us) but slowed fp8 and mxfp4 down
// (fp8 Mixtral 1 token 884 -> 1236 us), whose per-element decoding dominates: they keep one row.
template <Chunk C, int kSlots>
constexpr int rows_per_warp() {
  if constexpr (C != Chunk::kInt4) return 1;
  return kSlots == 1 ? 4 : kSlots <= 4 ? 2 : 1;
}

// kSlots: slots multiplied per pass over the weights (the host picks it from the most slots an
// expert can get).
template <Chunk C, int kSlots>
__global__ void __launch_bounds__(kWarps * 32) grouped_gemv_kernel(GroupedGemmParams p) {
  chain_start();
  constexpr int kElems = elems_per_chunk<C>();
  constexpr int kRows = rows_per_warp<C, kSlots>();
  constexpr int kUnroll = kRows == 4 ? 1 : 2;  // kRows * kUnroll chunks in flight per lane
  int e, m0, m1;
  if (!block_expert(p, &e, &m0, &m1)) return;
  const WeightLayout& L = p.layout;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRows;
  if (n0 >= L.rows) return;
  const ExpertTensors w = p.experts[e];
  const int64_t K = L.cols;
  const int64_t chunks = K / kElems;
  const int64_t row_chunks = chunks;  // rows are whole 16-byte chunks (checked by chunk_of)
  const uint4* wbase = reinterpret_cast<const uint4*>(w.data);

  for (int s0 = m0; s0 < m1; s0 += kSlots) {
    const int count = min(kSlots, m1 - s0);
    int slots[kSlots];
    const float* rows[kSlots];  // (K) input rows of this tile's slots
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      slots[i] = p.sorted_slots[s0 + min(i, count - 1)];
      rows[i] = p.in + static_cast<int64_t>(p.in_by_token ? slots[i] / p.top_k : slots[i]) * K;
    }
    float acc[kRows][kSlots] = {};
    for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
      uint4 raw[kRows][kUnroll];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t c = c0 + 32 * u;
          raw[r][u] = (c < chunks && n0 + r < L.rows) ? __ldg(wbase + (n0 + r) * row_chunks + c) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t c = c0 + 32 * u;
          if (c >= chunks || n0 + r >= L.rows) continue;
          float wv[kElems];
          decode<C>(L, w, n0 + r, c * kElems, raw[r][u], wv);
#pragma unroll
          for (int i = 0; i < kSlots; ++i) {
            if (i >= count) break;
            const float4* x = reinterpret_cast<const float4*>(rows[i] + c * kElems);
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < kElems / 4; ++j) {
              const float4 v = __ldg(x + j);
              sum += wv[4 * j] * v.x + wv[4 * j + 1] * v.y + wv[4 * j + 2] * v.z + wv[4 * j + 3] * v.w;
            }
            acc[r][i] += sum;
          }
        }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int i = 0; i < kSlots; ++i)
        for (int o = 16; o > 0; o >>= 1) acc[r][i] += __shfl_xor_sync(0xffffffffu, acc[r][i], o);
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int64_t n = n0 + r;
        if (n >= L.rows) break;
        const float bias = w.bias ? w.bias[n] : 0.0f;
        for (int i = 0; i < count; ++i) p.out[static_cast<int64_t>(slots[i]) * L.rows + n] = acc[r][i] + bias;
      }
  }
}

template <Chunk C>
cudaError_t launch_chunk(const GroupedGemmParams& p, int max_slots_per_expert, cudaStream_t stream) {
  const int slots = max_slots_per_expert <= 1 ? 1 : max_slots_per_expert <= 4 ? 4 : 8;
  const int rows_per_block =
      kWarps * (slots == 1 ? rows_per_warp<C, 1>() : slots == 4 ? rows_per_warp<C, 4>() : rows_per_warp<C, 8>());
  const dim3 grid(static_cast<unsigned>((p.layout.rows + rows_per_block - 1) / rows_per_block),
                  static_cast<unsigned>(p.max_chunks));
  if (slots == 1) return launch_chained(grouped_gemv_kernel<C, 1>, grid, kWarps * 32, 0, stream, p);
  if (slots == 4) return launch_chained(grouped_gemv_kernel<C, 4>, grid, kWarps * 32, 0, stream, p);
  return launch_chained(grouped_gemv_kernel<C, 8>, grid, kWarps * 32, 0, stream, p);
}

// Which chunk decoder a layout takes, or false when the generic kernel must run it.
bool chunk_of(const WeightLayout& L, bool has_g_idx, Chunk* c) {
  if (has_g_idx) return false;
  switch (L.format) {
    case kIntPacked:
      if (L.bits != 4 && L.bits != 8) return false;
      *c = L.bits == 4 ? Chunk::kInt4 : Chunk::kInt8Packed;
      break;
    case kIntUnpacked: *c = Chunk::kInt8; break;
    case kFp8: *c = Chunk::kFp8; break;
    case kNvfp4: *c = Chunk::kNvfp4; break;
    case kMxfp4: *c = Chunk::kMxfp4; break;
    case kDense:
      if (L.data_kind == 2) return false;
      *c = L.data_kind == 0 ? Chunk::kBf16 : Chunk::kF16;
      break;
    default: return false;
  }
  const int elems = (*c == Chunk::kInt4 || *c == Chunk::kNvfp4 || *c == Chunk::kMxfp4) ? 32
                    : (*c == Chunk::kBf16 || *c == Chunk::kF16)                          ? 8
                                                                                         : 16;
  if (L.cols % elems != 0) return false;
  // A chunk must sit inside one scale group (or block column).
  if (L.strategy == kGroup && L.format != kNvfp4 && L.format != kMxfp4 && L.group_size % elems != 0) return false;
  if (L.strategy == kBlock && L.block_cols % elems != 0) return false;
  if ((L.format == kNvfp4 && L.group_size != 16) || (L.format == kMxfp4 && L.group_size != 32)) return false;
  return true;
}

}  // namespace

cudaError_t launch_grouped_gemv(const GroupedGemmParams& p, bool has_g_idx, int max_slots_per_expert,
                                cudaStream_t stream) {
  Chunk c;
  if (!chunk_of(p.layout, has_g_idx, &c)) return cudaErrorNotSupported;
  if (p.chunks == nullptr || p.num_chunks == nullptr) return cudaErrorInvalidValue;
  if (p.max_chunks == 0 || p.layout.rows == 0) return cudaSuccess;
  if (p.max_chunks > kMaxGridRows) return cudaErrorInvalidConfiguration;  // (mma_chunk_slots keeps it below)
  switch (c) {
    case Chunk::kInt4: return launch_chunk<Chunk::kInt4>(p, max_slots_per_expert, stream);
    case Chunk::kInt8Packed: return launch_chunk<Chunk::kInt8Packed>(p, max_slots_per_expert, stream);
    case Chunk::kInt8: return launch_chunk<Chunk::kInt8>(p, max_slots_per_expert, stream);
    case Chunk::kFp8: return launch_chunk<Chunk::kFp8>(p, max_slots_per_expert, stream);
    case Chunk::kNvfp4: return launch_chunk<Chunk::kNvfp4>(p, max_slots_per_expert, stream);
    case Chunk::kMxfp4: return launch_chunk<Chunk::kMxfp4>(p, max_slots_per_expert, stream);
    case Chunk::kBf16: return launch_chunk<Chunk::kBf16>(p, max_slots_per_expert, stream);
    case Chunk::kF16: return launch_chunk<Chunk::kF16>(p, max_slots_per_expert, stream);
  }
  return cudaErrorNotSupported;
}

}  // namespace qmoe::cuda
