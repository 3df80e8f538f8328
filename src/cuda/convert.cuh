// Hardware conversions that give formats.h's results bit for bit (for every non-NaN input; the
// GPU test HardwareConversions checks all 2^32 floats), in one instruction instead of a software
// rounding: the activation and quantization kernels use them in their per-element loops.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace qmoe::cuda {

// quant::round_to_bf16 / round_to_f16 (round half to even; f16 overflow -> inf; NaN: canonical).
__device__ __forceinline__ float round_bf16_hw(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
__device__ __forceinline__ float round_f16_hw(float v) { return __half2float(__float2half_rn(v)); }

// quant::float_to_fp8e4m3_sat of a and b (clamp to +-448, round half to even): a in the low byte
// (the PTX instruction puts its first source in the upper byte, hence b first). NaN: canonical.
__device__ __forceinline__ uint32_t fp8x2_sat_hw(float a, float b) {
  uint16_t two;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(two) : "f"(b), "f"(a));
  return two;
}

// Four values' fp8 codes, x in the low byte.
__device__ __forceinline__ uint32_t fp8x4_sat_hw(float x, float y, float z, float w) {
  return fp8x2_sat_hw(x, y) | fp8x2_sat_hw(z, w) << 16;
}

}  // namespace qmoe::cuda
