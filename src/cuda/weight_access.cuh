// Device-side access to the canonical expert weights (qmoe::QuantWeight layout): scales, groups and
// zero points, shared by the grouped GEMM kernels. Mirrors src/quant/weights.cpp.
#pragma once

#include "cuda/moe_kernels.h"
#include "quant/formats.h"

namespace qmoe::cuda {

// Streaming 16-byte weight load (read once: keep it out of L1, which holds the inputs). Volatile, so
// the compiler keeps a kernel's weight loads in program order (ahead of the mmas that use them).
__device__ __forceinline__ uint4 load_weights(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// As qmoe::WeightFormat and qmoe::Strategy.
enum : int { kDense = 0, kIntPacked = 1, kIntUnpacked = 2, kFp8 = 3, kNvfp4 = 4, kMxfp4 = 5 };
enum : int { kTensor = 0, kChannel = 1, kGroup = 2, kBlock = 3, kTensorGroup = 5 };

__device__ __forceinline__ float load_scale(const WeightLayout& L, const void* scale, int64_t i) {
  switch (L.scale_kind) {
    case 0: return quant::bf16_to_float(static_cast<const uint16_t*>(scale)[i]);
    case 1: return quant::f16_to_float(static_cast<const uint16_t*>(scale)[i]);
    case 2: return static_cast<const float*>(scale)[i];
    case 3: return quant::fp8e4m3_to_float(static_cast<const uint8_t*>(scale)[i]);
    default: return quant::e8m0_to_float(static_cast<const uint8_t*>(scale)[i]);
  }
}

// Rounding of int/fp8 products: to the scale dtype (weight-only methods) or none (fp32 scaling).
__device__ __forceinline__ quant::ScaleKind kind_of(const WeightLayout& L) {
  if (!L.round_to_scale_dtype) return quant::ScaleKind::kF32;
  return L.scale_kind == 0 ? quant::ScaleKind::kBF16 : L.scale_kind == 1 ? quant::ScaleKind::kF16 : quant::ScaleKind::kF32;
}

__device__ __forceinline__ int64_t group_of(const WeightLayout& L, const ExpertTensors& w, int64_t col) {
  switch (L.strategy) {
    case kTensor:
    case kChannel: return 0;
    case kBlock: return col / L.block_cols;
    default: return w.g_idx ? w.g_idx[col] : col / L.group_size;
  }
}

__device__ __forceinline__ float scale_at(const WeightLayout& L, const ExpertTensors& w, int64_t row, int64_t group) {
  switch (L.strategy) {
    case kTensor: return load_scale(L, w.scale, 0);
    case kChannel: return load_scale(L, w.scale, row);
    case kBlock: return load_scale(L, w.scale, (row / L.block_rows) * L.scale_cols + group);
    default: return load_scale(L, w.scale, row * L.scale_cols + group);
  }
}

__device__ __forceinline__ int zero_point_at(const WeightLayout& L, const ExpertTensors& w, int64_t row, int64_t group) {
  if (!w.zero_point) return 0;
  if (L.strategy == kTensor) return w.zero_point[0];
  return w.zero_point[row * L.zp_cols + group];
}

// Element (row, col) of the expert's dequantized weight, exactly as qmoe::dequantize_row.
__device__ inline float dequant(const WeightLayout& L, const ExpertTensors& w, int64_t row, int64_t col) {
  switch (L.format) {
    case kDense: {
      const int64_t i = row * L.cols + col;
      if (L.data_kind == 0) return quant::bf16_to_float(static_cast<const uint16_t*>(w.data)[i]);
      if (L.data_kind == 1) return quant::f16_to_float(static_cast<const uint16_t*>(w.data)[i]);
      return static_cast<const float*>(w.data)[i];
    }
    case kIntPacked:
    case kIntUnpacked: {
      int q = L.format == kIntPacked
                  ? quant::unpack_int(static_cast<const int32_t*>(w.data) + row * L.words_per_row, col, L.bits)
                  : static_cast<const int8_t*>(w.data)[row * L.cols + col];
      // Device codes are u ^ 8 / u ^ 128 (launch_codes_to_signed), read here as if offset-binary.
      if (L.format == kIntPacked && (L.bits == 4 || L.bits == 8)) {
        const int half = 1 << (L.bits - 1);
        q = ((q + half) ^ half) - half;
      }
      const int64_t g = group_of(L, w, col);
      return quant::dequant_int(q, zero_point_at(L, w, row, g), scale_at(L, w, row, g), kind_of(L));
    }
    case kFp8: {
      const uint8_t q = static_cast<const uint8_t*>(w.data)[row * L.cols + col];
      return quant::dequant_fp8(q, scale_at(L, w, row, group_of(L, w, col)), kind_of(L));
    }
    default: {
      const uint8_t byte = static_cast<const uint8_t*>(w.data)[row * (L.cols / 2) + col / 2];
      const uint8_t nibble = (col % 2 == 0) ? (byte & 0xF) : (byte >> 4);
      const uint8_t s = static_cast<const uint8_t*>(w.scale)[row * L.scale_cols + col / L.group_size];
      if (L.format == kMxfp4) return quant::dequant_mxfp4(nibble, s);
      if (L.round_to_scale_dtype) return quant::dequant_nvfp4(nibble, s, w.global_scale);
      return quant::e2m1_to_float(nibble) * (quant::fp8e4m3_to_float(s) / w.global_scale);
    }
  }
}

// The expert of this block and its slot range (blockIdx.y indexes the grouping's chunks, as in the
// tensor-core kernel: a busy expert spreads over block rows); false when the block has nothing to do.
__device__ __forceinline__ bool block_expert(const GroupedGemmParams& p, int* expert, int* m0, int* m1) {
  if (static_cast<int>(blockIdx.y) >= *p.num_chunks) return false;
  *expert = p.chunks[2 * blockIdx.y];
  *m0 = p.chunks[2 * blockIdx.y + 1];
  *m1 = min(*m0 + p.chunk_slots, p.expert_offsets[*expert + 1]);
  return *m0 < *m1;
}

}  // namespace qmoe::cuda
