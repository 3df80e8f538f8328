// Numeric formats of compressed-tensors checkpoints: scalar encode/decode and bit packing.
//
// Header-only and free of host-only dependencies so the CUDA kernels can share the definitions
// (QMOE_HD marks functions usable on both sides). Rounding follows docs of the format exactly:
// round-half-to-even everywhere, fp8 casts do not saturate (callers clamp first, as CT does),
// FP4 keeps -0. Every function here has golden tests in tests/cpu/test_formats.cpp.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define QMOE_HD __host__ __device__ __forceinline__
#else
#define QMOE_HD inline
#endif

namespace qmoe::quant {

// ---- 16-bit floats ----------------------------------------------------------------------------
QMOE_HD float bf16_to_float(uint16_t bits);
QMOE_HD uint16_t float_to_bf16(float x);  // round half to even; NaN stays NaN (quiet)
QMOE_HD float round_to_bf16(float x);     // bf16_to_float(float_to_bf16(x))
QMOE_HD float f16_to_float(uint16_t bits);
QMOE_HD uint16_t float_to_f16(float x);   // round half to even; overflow -> inf
QMOE_HD float round_to_f16(float x);

// ---- 8-bit floats -----------------------------------------------------------------------------
inline constexpr float kFp8E4M3Max = 448.0f;
QMOE_HD float fp8e4m3_to_float(uint8_t bits);  // 0x7F/0xFF -> NaN, 0x80 -> -0
// Round half to even, NOT saturating (like torch): 464 is a tie and rounds to 448 (even
// mantissa); |x| > 464, inf and NaN -> NaN (0x7F|sign).
QMOE_HD uint8_t float_to_fp8e4m3(float x);
// Clamp to +-448 first, then round (what compressed-tensors and vLLM's quant kernels do).
QMOE_HD uint8_t float_to_fp8e4m3_sat(float x);
QMOE_HD float fp8e5m2_to_float(uint8_t bits);

// ---- FP4 E2M1 and E8M0 ------------------------------------------------------------------------
// nibble: bit 3 sign, bits 0-2 index into {0, .5, 1, 1.5, 2, 3, 4, 6}; 0x8 -> -0.0f.
QMOE_HD float e2m1_to_float(uint8_t nibble);
// Clamp to +-6, round by the threshold table (ties to even mantissa); negative values that round
// to zero give 0x8 (-0).
QMOE_HD uint8_t float_to_e2m1(float x);
// 2^(e - 127); e = 255 -> +inf (compressed-tensors' decoding), e = 0 -> 2^-127.
QMOE_HD float e8m0_to_float(uint8_t e);

// ---- integer packing (pack-quantized) ---------------------------------------------------------
// Offset-binary: u = q + 2^(bits-1). Element i of a row occupies bits [i*bits, (i+1)*bits) of the
// row's little-endian bit stream of int32 words (element 0 in the low bits of word 0).
QMOE_HD int packed_words_per_row(int64_t cols, int bits);  // ceil(cols * bits / 32)
// Signed value of element `i` of a packed row (`words`: [packed_words_per_row]).
QMOE_HD int unpack_int(const int32_t* words, int64_t i, int bits);
// Packs `n` signed values (each in [-2^(bits-1), 2^(bits-1)-1]) into `words` (zero-filled first).
void pack_int_row(const int8_t* q, int64_t n, int bits, int32_t* words);
// Zero points packed along dim 0: packed [ceil(rows*bits/32), cols] int32 -> signed [rows, cols].
void unpack_zero_points(const int32_t* packed, int64_t rows, int64_t cols, int bits, int8_t* out);
void pack_zero_points(const int8_t* zp, int64_t rows, int64_t cols, int bits, int32_t* packed);

// ---- dequantization (compressed-tensors reference numerics) -----------------------------------
// Result dtype of int/fp8 dequant: the scale's dtype. kF32 means no extra rounding.
enum class ScaleKind : uint8_t { kBF16, kF16, kF32 };
QMOE_HD float round_to_scale_kind(float x, ScaleKind kind);
// RNE_sdt((q - z) * s): exact single rounding (int formats).
QMOE_HD float dequant_int(int q, int z, float scale, ScaleKind kind);
// RNE_sdt(fp8(q) * s).
QMOE_HD float dequant_fp8(uint8_t q, float scale, ScaleKind kind);
// NVFP4: bf16( e2m1(nibble) * f32(fp8(scale_bits) / global_scale) ); global_scale is a divisor.
QMOE_HD float dequant_nvfp4(uint8_t nibble, uint8_t scale_fp8, float global_scale);
// MXFP4: bf16( e2m1(nibble) * 2^(e-127) ).
QMOE_HD float dequant_mxfp4(uint8_t nibble, uint8_t scale_e8m0);

// ---- quantization given qparams (encoder side; used by tests and activation quantization) -----
// int: t = RNE_sdt(x / s) (the quotient is rounded to the scale dtype first, as torch does for
// bf16), t += z, clamp to the signed range, round half to even.
QMOE_HD int quantize_int(float x, float scale, int z, int bits, ScaleKind kind);

// ---- activation quantization as vLLM's kernels do it ------------------------------------------
inline constexpr float kFp8MinScale = 1.0f / (448.0f * 512.0f);
// Dynamic per-token (or per-tensor) FP8 scale: max(amax / 448, 1 / (448 * 512)).
QMOE_HD float fp8_dynamic_scale(float amax);
// q = fp8_sat(x * (1 / scale)) (vLLM multiplies by the inverted scale).
QMOE_HD uint8_t quantize_fp8_act(float x, float inv_scale);
// Dynamic per-token symmetric INT8: scale = amax / 127, q = clamp(rint(x / scale), -128, 127).
QMOE_HD float int8_dynamic_scale(float amax);
QMOE_HD int quantize_int8_act(float x, float scale);
// NVFP4 activation block of 16: block scale sf = fp8_sat(gs * (amax / 6)) (gs = input global
// scale, a multiplier), q = e2m1(x * (gs / sf)) (all 0 when sf == 0), f32 throughout. Writes one
// code per byte to nibbles[0..n) (unpacked); returns the fp8 block-scale bits.
uint8_t quantize_nvfp4_block(const float* x, int n, float global_scale, uint8_t* nibbles);

}  // namespace qmoe::quant

#include "quant/formats_inl.h"
