// Inline definitions of the QMOE_HD functions declared in quant/formats.h. Included from there only.
//
// Everything is plain integer/float arithmetic so the same code runs on host (g++) and device
// (nvcc). Float operations whose rounding matters go through detail::{mul,div,add}_rn, which pin
// IEEE round-to-nearest on the device even under --use_fast_math and keep nvcc from contracting a
// multiply and an add into one FMA.
#pragma once

#include <cmath>
#include <cstdint>

#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

namespace qmoe::quant {

namespace detail {

QMOE_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}

QMOE_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

QMOE_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

QMOE_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

QMOE_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// Bit test instead of isnan(): immune to -ffast-math and identical on both sides.
QMOE_HD bool is_nan(float x) { return (float_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }

QMOE_HD float with_sign(float magnitude, bool negative) { return negative ? -magnitude : magnitude; }

// Bit patterns of the fp8 e4m3 overflow boundary: 480 is the first magnitude that does not round
// to a finite value in any case ((464, 480) round to the NaN code via the mantissa carry, as in
// PyTorch's converter), and 2^-6 is the smallest normal.
inline constexpr uint32_t kF32Bits480 = 0x43F00000u;
inline constexpr uint32_t kF32BitsTwoPowMinus6 = 0x3C800000u;
// 65520 = 65504 + half an ulp: 65504 has an odd mantissa, so the tie rounds up to inf.
inline constexpr uint32_t kF32Bits65520 = 0x477FF000u;
// 2^-14, the smallest f16 normal.
inline constexpr uint32_t kF32BitsTwoPowMinus14 = 0x38800000u;

}  // namespace detail

// ---- 16-bit floats ----------------------------------------------------------------------------

QMOE_HD float bf16_to_float(uint16_t bits) {
  return detail::bits_float(static_cast<uint32_t>(bits) << 16);
}

QMOE_HD uint16_t float_to_bf16(float x) {
  uint32_t u = detail::float_bits(x);
  if (detail::is_nan(x)) {
    // Keep sign and top payload bits; force the quiet bit so truncation cannot yield inf.
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  // Round half to even on bit 16; a carry into the exponent gives the right result, incl. inf.
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

QMOE_HD float round_to_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

QMOE_HD float f16_to_float(uint16_t bits) {
  const bool negative = (bits & 0x8000u) != 0;
  const uint32_t e = (bits >> 10) & 0x1Fu;
  const uint32_t m = bits & 0x3FFu;
  if (e == 0) {
    // Zero or subnormal: m * 2^-24, exact in f32.
    return detail::with_sign(detail::mul_rn(static_cast<float>(m), 0x1p-24f), negative);
  }
  const uint32_t sign = negative ? 0x80000000u : 0u;
  if (e == 31) {
    return detail::bits_float(sign | 0x7F800000u | (m << 13));
  }
  return detail::bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

QMOE_HD uint16_t float_to_f16(float x) {
  const uint32_t u = detail::float_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) {
    return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  }
  if (a >= detail::kF32Bits65520) {
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (a < detail::kF32BitsTwoPowMinus14) {
    // Subnormal range: scaling by 2^24 is exact, so one rintf gives the RNE code (1024 is the
    // smallest normal's code, which is also right).
    const float scaled = detail::mul_rn(detail::bits_float(a), 0x1p24f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(rintf(scaled)));
  }
  // Normal: rebias the exponent (127 -> 15) and round half to even on bit 13.
  uint32_t r = a - (112u << 23);
  r += 0xFFFu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(r >> 13));
}

QMOE_HD float round_to_f16(float x) { return f16_to_float(float_to_f16(x)); }

// ---- 8-bit floats -----------------------------------------------------------------------------

QMOE_HD float fp8e4m3_to_float(uint8_t bits) {
  const bool negative = (bits & 0x80u) != 0;
  if ((bits & 0x7Fu) == 0x7Fu) {
    return detail::bits_float(negative ? 0xFFC00000u : 0x7FC00000u);
  }
  const int e = (bits >> 3) & 0xF;
  const int m = bits & 0x7;
  const float mag = e == 0 ? ldexpf(static_cast<float>(m), -9)
                           : ldexpf(static_cast<float>(8 + m), e - 10);
  return detail::with_sign(mag, negative);
}

QMOE_HD uint8_t float_to_fp8e4m3(float x) {
  const uint32_t u = detail::float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a >= detail::kF32Bits480) {  // also inf and NaN
    return static_cast<uint8_t>(sign | 0x7Fu);
  }
  if (a < detail::kF32BitsTwoPowMinus6) {
    // Subnormal range (spacing 2^-9): exact scaling, then RNE; 8 encodes 2^-6 correctly.
    const float scaled = detail::mul_rn(detail::bits_float(a), 0x1p9f);
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(rintf(scaled)));
  }
  // Normal: rebias (127 -> 7) and round half to even on bit 20. (464, 480) carries into 0x7F.
  uint32_t r = a - (120u << 23);
  r += 0x7FFFFu + ((r >> 20) & 1u);
  return static_cast<uint8_t>(sign | static_cast<uint8_t>(r >> 20));
}

QMOE_HD uint8_t float_to_fp8e4m3_sat(float x) {
  // NaN stays NaN (torch.clamp keeps it). Handled up front because nvcc may turn the clamps
  // below into min/max instructions, which would drop the NaN's sign.
  if (detail::is_nan(x)) return float_to_fp8e4m3(x);
  if (x > kFp8E4M3Max) x = kFp8E4M3Max;
  if (x < -kFp8E4M3Max) x = -kFp8E4M3Max;
  return float_to_fp8e4m3(x);
}

QMOE_HD float fp8e5m2_to_float(uint8_t bits) {
  const bool negative = (bits & 0x80u) != 0;
  const int e = (bits >> 2) & 0x1F;
  const int m = bits & 0x3;
  if (e == 31) {
    const uint32_t sign = negative ? 0x80000000u : 0u;
    return detail::bits_float(sign | (m == 0 ? 0x7F800000u : 0x7FC00000u));
  }
  const float mag = e == 0 ? ldexpf(static_cast<float>(m), -16)
                           : ldexpf(static_cast<float>(4 + m), e - 17);
  return detail::with_sign(mag, negative);
}

// ---- FP4 E2M1 and E8M0 ------------------------------------------------------------------------

QMOE_HD float e2m1_to_float(uint8_t nibble) {
  const int e = (nibble >> 1) & 0x3;
  const int m = nibble & 0x1;
  // e == 0: subnormal m * 0.5; else (1 + m/2) * 2^(e-1) = (2 + m) * 2^(e-2).
  const float mag = e == 0 ? 0.5f * static_cast<float>(m) : ldexpf(static_cast<float>(2 + m), e - 2);
  return detail::with_sign(mag, (nibble & 0x8u) != 0);
}

QMOE_HD uint8_t float_to_e2m1(float x) {
  const uint8_t sign = (detail::float_bits(x) & 0x80000000u) ? 0x8u : 0x0u;
  // NaN has no E2M1 code; like PTX's satfinite conversion it becomes the largest magnitude.
  if (detail::is_nan(x)) return static_cast<uint8_t>(sign | 0x7u);
  const float a = fabsf(x);
  // Threshold table of the reference; the boundaries alternate <= / < so ties go to the even
  // mantissa (codes 0, 2, 4, 6). Values above 6 clamp to 6.
  uint8_t code;
  if (a <= 0.25f) {
    code = 0;
  } else if (a < 0.75f) {
    code = 1;
  } else if (a <= 1.25f) {
    code = 2;
  } else if (a < 1.75f) {
    code = 3;
  } else if (a <= 2.5f) {
    code = 4;
  } else if (a < 3.5f) {
    code = 5;
  } else if (a <= 5.0f) {
    code = 6;
  } else {
    code = 7;
  }
  return static_cast<uint8_t>(sign | code);
}

QMOE_HD float e8m0_to_float(uint8_t e) {
  if (e == 255) return detail::bits_float(0x7F800000u);
  return ldexpf(1.0f, static_cast<int>(e) - 127);
}

// ---- integer packing ----------------------------------------------------------------------------

QMOE_HD int packed_words_per_row(int64_t cols, int bits) {
  return static_cast<int>((cols * bits + 31) / 32);
}

namespace detail {

// Signed value of the `bits`-bit offset-binary field at bit `off` of the 64-bit stream hi:lo.
QMOE_HD int extract_offset_field(uint32_t lo, uint32_t hi, int off, int bits) {
  const uint64_t stream = (static_cast<uint64_t>(hi) << 32) | lo;
  const uint32_t u = static_cast<uint32_t>(stream >> off) & ((1u << bits) - 1u);
  return static_cast<int>(u) - (1 << (bits - 1));
}

}  // namespace detail

QMOE_HD int unpack_int(const int32_t* words, int64_t i, int bits) {
  const int64_t pos = i * bits;
  const int64_t w = pos >> 5;
  const int off = static_cast<int>(pos & 31);
  // Only touch the next word when the element straddles into it (it may not exist otherwise).
  const uint32_t hi = off + bits > 32 ? static_cast<uint32_t>(words[w + 1]) : 0u;
  return detail::extract_offset_field(static_cast<uint32_t>(words[w]), hi, off, bits);
}

// ---- dequantization -----------------------------------------------------------------------------

QMOE_HD float round_to_scale_kind(float x, ScaleKind kind) {
  switch (kind) {
    case ScaleKind::kBF16:
      return round_to_bf16(x);
    case ScaleKind::kF16:
      return round_to_f16(x);
    case ScaleKind::kF32:
      break;
  }
  return x;
}

QMOE_HD float dequant_int(int q, int z, float scale, ScaleKind kind) {
  // |q - z| <= 255 and the scale has <= 24 significant bits, so the f32 product is exact for
  // bf16/f16 scales and the only rounding is the final one (or the f32 multiply for kF32).
  return round_to_scale_kind(detail::mul_rn(static_cast<float>(q - z), scale), kind);
}

QMOE_HD float dequant_fp8(uint8_t q, float scale, ScaleKind kind) {
  return round_to_scale_kind(detail::mul_rn(fp8e4m3_to_float(q), scale), kind);
}

QMOE_HD float dequant_nvfp4(uint8_t nibble, uint8_t scale_fp8, float global_scale) {
  // Order matters for bit-exactness: divide first (f32), then multiply (f32), then bf16.
  const float eff = detail::div_rn(fp8e4m3_to_float(scale_fp8), global_scale);
  return round_to_bf16(detail::mul_rn(e2m1_to_float(nibble), eff));
}

QMOE_HD float dequant_mxfp4(uint8_t nibble, uint8_t scale_e8m0) {
  return round_to_bf16(detail::mul_rn(e2m1_to_float(nibble), e8m0_to_float(scale_e8m0)));
}

// ---- quantization given qparams -----------------------------------------------------------------

QMOE_HD int quantize_int(float x, float scale, int z, int bits, ScaleKind kind) {
  // torch computes x / s and then + z in the promoted dtype, so both results round to it.
  float t = round_to_scale_kind(detail::div_rn(x, scale), kind);
  t = round_to_scale_kind(detail::add_rn(t, static_cast<float>(z)), kind);
  // NaN has no integer image; 0 keeps the result defined.
  if (detail::is_nan(t)) return 0;
  const float qmin = static_cast<float>(-(1 << (bits - 1)));
  const float qmax = static_cast<float>((1 << (bits - 1)) - 1);
  if (t < qmin) t = qmin;
  if (t > qmax) t = qmax;
  return static_cast<int>(rintf(t));
}

// ---- activation quantization --------------------------------------------------------------------

QMOE_HD float fp8_dynamic_scale(float amax) {
  const float s = detail::div_rn(amax, kFp8E4M3Max);
  return s > kFp8MinScale ? s : kFp8MinScale;
}

QMOE_HD uint8_t quantize_fp8_act(float x, float inv_scale) {
  return float_to_fp8e4m3_sat(detail::mul_rn(x, inv_scale));
}

QMOE_HD float int8_dynamic_scale(float amax) { return detail::div_rn(amax, 127.0f); }

QMOE_HD int quantize_int8_act(float x, float scale) {
  if (scale == 0.0f) return 0;  // all-zero token: x / 0 would be NaN or inf
  float t = detail::div_rn(x, scale);
  if (detail::is_nan(t)) return 0;
  if (t < -128.0f) t = -128.0f;
  if (t > 127.0f) t = 127.0f;
  return static_cast<int>(rintf(t));
}

}  // namespace qmoe::quant
