// Hardware conversions that give formats.h's results bit for bit (for every non-NaN input; the
// GPU test HardwareConversions checks all 2^32 floats and all fp8 code pairs), in one or a few
// instructions instead of a software rounding: the activation and quantization kernels use them in
// their per-element loops, the NVFP4 decode kernel for its block scales; and a division by one
// divisor that gives __fdiv_rn's results in fewer instructions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace qmoe::cuda {

// (a & b) ^ c in one instruction (ptxas splits the C form, with b and c both constants, in two).
__device__ __forceinline__ uint32_t lop3_and_xor(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

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

// An fp8 e4m3 code (the low byte) as f16 bits: quant::float_to_f16(quant::fp8e4m3_to_float(code)),
// exact (every e4m3 value is an f16 value). NaN codes: a NaN.
__device__ __forceinline__ uint16_t e4m3_to_f16_hw(uint32_t code) {
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(static_cast<uint16_t>(code & 0xFFu)));
  return static_cast<uint16_t>(h2 & 0xFFFFu);
}

// Two fp8 e4m3 codes (the low byte first) as bf16x2 bits (the low byte's value in the low half):
// exactly quant::float_to_bf16(quant::fp8e4m3_to_float(code)), as every e4m3 value is a bf16 value
// (3 mantissa bits, exponents 2^-9 .. 2^8). One hardware conversion to f16x2, each half widened to
// f32, whose upper 16 bits are the bf16 (the lower ones are zero). NaN codes: a NaN.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2_hw(uint32_t two) {
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(static_cast<uint16_t>(two)));
  const float lo = __half2float(__ushort_as_half(static_cast<unsigned short>(h2 & 0xFFFFu)));
  const float hi = __half2float(__ushort_as_half(static_cast<unsigned short>(h2 >> 16)));
  return __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632);
}

// x / d as __fdiv_rn(x, d) rounds it, bit for bit, for one divisor and many x: __fdiv_rn's fast
// path as nvcc 13 compiles it (approximate reciprocal, one Newton step, the quotient and one
// remainder correction: one suffices as the refined reciprocal is the correctly rounded 1 / d,
// Markstein) with the reciprocal refined once, taken where that path is exact (|x| and |d| within
// 2^+-60: no overflow or underflow in its steps); elsewhere (0, subnormals, inf, NaN, extremes)
// __fdiv_rn itself. 3 instructions per division instead of ~12 and a call (the GPU test DivideRn checks every
// float x against __fdiv_rn for a spread of divisors).
class DivideRn {
 public:
  __device__ explicit DivideRn(float d) : d_(d) {
    float r0;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r0) : "f"(d));
    r_ = __fmaf_rn(r0, __fmaf_rn(-d, r0, 1.0f), r0);
    const float ad = fabsf(d);
    fast_ = ad >= 0x1p-60f && ad <= 0x1p60f;
  }
  __device__ __forceinline__ float operator()(float x) const {
    const float ax = fabsf(x);
    if (fast_ && ax >= 0x1p-60f && ax <= 0x1p60f) {
      const float q = __fmul_rn(x, r_);
      return __fmaf_rn(r_, __fmaf_rn(-d_, q, x), q);
    }
    return slow(x, d_);
  }
  // Whether quick() can give operator()'s result for this divisor at all.
  __device__ __forceinline__ bool quick_ok() const { return fast_; }
  // __fdiv_rn(x, d) out of line: what quick() falls back to.
  __device__ __forceinline__ float exact(float x) const { return slow(x, d_); }
  // The fast path's quotient without its branch, for epilogues that divide many values: clears
  // `in_range` where it may differ from __fdiv_rn (the caller then divides those values again with
  // exact()), so a batch of divisions needs one branch instead of one each and can be scheduled
  // together.
  __device__ __forceinline__ float quick(float x, bool& in_range) const {
    const float ax = fabsf(x);
    in_range = in_range && ax >= 0x1p-60f && ax <= 0x1p60f;
    const float q = __fmul_rn(x, r_);
    return __fmaf_rn(r_, __fmaf_rn(-d_, q, x), q);
  }

 private:
  // (Out of line: a kernel that divides in an unrolled epilogue keeps one copy of the slow path
  // instead of one per output, which would multiply its code size.)
  static __device__ __noinline__ float slow(float x, float d) { return __fdiv_rn(x, d); }

  float d_, r_;
  bool fast_;
};

}  // namespace qmoe::cuda
