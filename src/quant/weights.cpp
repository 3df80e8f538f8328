// Row dequantization of canonical expert weights: the one place that turns any on-disk weight
// format into floats, with compressed-tensors' numerics (see docs/numerics.md); and W4A8-FP8's
// conversion to the FP8 products vLLM's kernel multiplies.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QMOE_HAVE_AVX2_PATH 1
#endif

#include "qmoe/error.h"
#include "qmoe/moe.h"
#include "quant/element.h"
#include "quant/formats.h"

namespace qmoe {
namespace {

using quant::ScaleKind;

ScaleKind scale_kind_of(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return ScaleKind::kBF16;
    case DType::kF16:
      return ScaleKind::kF16;
    default:
      return ScaleKind::kF32;
  }
}

float load_float(const Tensor& t, int64_t i) { return static_cast<float>(quant::float_element(t, i)); }

// Scale of element (row, col) for int/fp8 formats; `group` is the scale column.
float scale_at(const QuantWeight& w, int64_t row, int64_t group) {
  switch (w.strategy) {
    case Strategy::kTensor:
      return load_float(w.scale, 0);
    case Strategy::kChannel:
      return load_float(w.scale, row);
    case Strategy::kBlock:
      return load_float(w.scale, (row / w.block_rows) * w.scale.dim(1) + group);
    default:
      return load_float(w.scale, row * w.scale.dim(1) + group);
  }
}

int64_t group_of(const QuantWeight& w, int64_t col) {
  switch (w.strategy) {
    case Strategy::kTensor:
    case Strategy::kChannel:
      return 0;
    case Strategy::kBlock:
      return col / w.block_cols;
    default:
      return w.g_idx.empty() ? col / w.group_size : w.g_idx.data<int32_t>()[col];
  }
}

int zero_point_at(const QuantWeight& w, int64_t row, int64_t group) {
  if (w.zero_point.empty()) return 0;
  if (w.strategy == Strategy::kTensor) return w.zero_point.data<int8_t>()[0];
  return w.zero_point.data<int8_t>()[row * w.zero_point.dim(1) + group];
}

// Expands 8 nibbles per word through a 16-entry float table: out[8w + j] = table[nibble j of w].
void expand_int4_scalar(const int32_t* words, int64_t num_words, const float* table, float* out) {
  for (int64_t w = 0; w < num_words; ++w) {
    const uint32_t word = static_cast<uint32_t>(words[w]);
    for (int j = 0; j < 8; ++j) out[8 * w + j] = table[(word >> (4 * j)) & 0xF];
  }
}

#if QMOE_HAVE_AVX2_PATH
// The same with two in-register permutes and a blend per 8 elements (the table's halves are
// selected by bit 3 of the nibble); about ten times faster than the scalar lookups.
__attribute__((target("avx2"))) void expand_int4_avx2(const int32_t* words, int64_t num_words, const float* table,
                                                      float* out) {
  const __m256 low = _mm256_loadu_ps(table), high = _mm256_loadu_ps(table + 8);
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i mask = _mm256_set1_epi32(0xF);
  for (int64_t w = 0; w < num_words; ++w) {
    const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(words[w]), shifts), mask);
    const __m256 a = _mm256_permutevar8x32_ps(low, idx);
    const __m256 b = _mm256_permutevar8x32_ps(high, idx);
    const __m256 pick_high = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28));
    _mm256_storeu_ps(out + 8 * w, _mm256_blendv_ps(a, b, pick_high));
  }
}
#endif

void expand_int4(const int32_t* words, int64_t num_words, const float* table, float* out) {
#if QMOE_HAVE_AVX2_PATH
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return expand_int4_avx2(words, num_words, table, out);
#endif
  expand_int4_scalar(words, num_words, table, out);
}

// Calls f(c0, c1, scale, zero_point) for each group [c0, c1) of row `row` of int weights whose
// groups are contiguous (channel-wise: one group, the row), the group's scale and zero point read
// once.
template <class F>
void for_each_contiguous_group(const QuantWeight& w, int64_t row, F&& f) {
  const int64_t group = w.strategy == Strategy::kGroup ? w.group_size : w.cols;
  for (int64_t c0 = 0; c0 < w.cols; c0 += group) {
    const int64_t g = c0 / group;
    f(c0, std::min(w.cols, c0 + group), scale_at(w, row, g), zero_point_at(w, row, g));
  }
}

// Every FP8 (e4m3) code's value and every e8m0 scale's value, decoded once (the decodes call
// ldexpf).
std::array<float, 256> decode_every_byte(float (*decode)(uint8_t)) {
  std::array<float, 256> t{};
  for (int b = 0; b < 256; ++b) t[b] = decode(static_cast<uint8_t>(b));
  return t;
}
const std::array<float, 256>& fp8_values() {
  static const std::array<float, 256> values = decode_every_byte(quant::fp8e4m3_to_float);
  return values;
}
const std::array<float, 256>& e8m0_values() {
  static const std::array<float, 256> values = decode_every_byte(quant::e8m0_to_float);
  return values;
}

// quant::round_to_bf16 of a value that is not NaN, without its NaN branch: round half to even on
// bit 16, a carry into the exponent giving infinity as float_to_bf16's does.
inline float round_to_bf16_not_nan(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// out[i] = round_to_scale_kind(value(i) * s, kind) for i < n: dequant_int / dequant_fp8 with the
// dtype switch hoisted. For f32 and for finite bf16 scales (nearly every checkpoint) the loop has
// no branch, so the compiler vectorizes it. kNanValues: value(i) may be NaN (FP8's NaN codes);
// those products take the exact rounding (integer codes times a finite scale never give NaN).
template <bool kNanValues, class Value>
void scaled_values(int64_t n, Value value, float s, ScaleKind kind, float* out) {
  if (kind == ScaleKind::kF32) {
    for (int64_t i = 0; i < n; ++i) out[i] = value(i) * s;
  } else if (kind == ScaleKind::kBF16 && std::isfinite(s)) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = value(i) * s;
      out[i] = kNanValues && std::isnan(v) ? quant::round_to_bf16(v) : round_to_bf16_not_nan(v);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = quant::round_to_scale_kind(quant::detail::mul_rn(value(i), s), kind);
  }
}

// Packed int rows with contiguous groups: one 16/256-entry table per group turns every element
// into a lookup, which keeps the CPU backend's dequantization cheap.
void dequantize_int_packed_grouped(const QuantWeight& w, int64_t row, ScaleKind kind,
                                   float* out) {
  const int64_t words_per_row = w.data.dim(1);
  const int32_t* words = w.data.data<int32_t>() + row * words_per_row;
  const int levels = 1 << w.bits;
  const int offset = levels / 2;
  float table[256];
  for_each_contiguous_group(w, row, [&](int64_t c0, int64_t c1, float s, int z) {
    if (c1 - c0 < levels) {  // fewer elements than table entries (8-bit groups): the formula directly
      if (w.bits == 8 && std::endian::native == std::endian::little) {
        // (byte c of the little-endian words, offset by 128, as unpack_int reads 8-bit codes)
        const uint8_t* bytes = reinterpret_cast<const uint8_t*>(words) + c0;
        scaled_values<false>(c1 - c0, [&](int64_t i) { return static_cast<float>(bytes[i] - 128 - z); }, s, kind, out + c0);
      } else {
        scaled_values<false>(c1 - c0, [&](int64_t i) { return static_cast<float>(quant::unpack_int(words, c0 + i, w.bits) - z); }, s,
                      kind, out + c0);
      }
      return;
    }
    scaled_values<false>(levels, [&](int64_t u) { return static_cast<float>(static_cast<int>(u) - offset - z); }, s, kind, table);
    if (w.bits == 4 && c0 % 8 == 0 && (c1 - c0) % 8 == 0) {
      expand_int4(words + c0 / 8, (c1 - c0) / 8, table, out + c0);
    } else {
      for (int64_t c = c0; c < c1; ++c) out[c] = table[quant::unpack_int(words, c, w.bits) + offset];
    }
  });
}

}  // namespace

std::string to_string(WeightFormat f) {
  switch (f) {
    case WeightFormat::kDense:
      return "dense";
    case WeightFormat::kIntPacked:
      return "int-packed";
    case WeightFormat::kIntUnpacked:
      return "int-unpacked";
    case WeightFormat::kFp8:
      return "fp8";
    case WeightFormat::kNvfp4:
      return "nvfp4";
    case WeightFormat::kMxfp4:
      return "mxfp4";
  }
  return "?";
}

int64_t QuantWeight::storage_bytes() const {
  return static_cast<int64_t>(data.size_bytes() + scale.size_bytes() + zero_point.size_bytes() +
                              g_idx.size_bytes());
}

void dequantize_row(const QuantWeight& w, int64_t row, bool round_to_scale_dtype, float* out) {
  const ScaleKind kind = round_to_scale_dtype ? scale_kind_of(w.scale.dtype()) : ScaleKind::kF32;
  switch (w.format) {
    case WeightFormat::kDense:
      if (w.data.dtype() == DType::kBF16) {  // (the common case, as a shift per element)
        const uint16_t* bits = w.data.data<uint16_t>() + row * w.cols;
        for (int64_t c = 0; c < w.cols; ++c) out[c] = quant::bf16_to_float(bits[c]);
        return;
      }
      for (int64_t c = 0; c < w.cols; ++c) out[c] = load_float(w.data, row * w.cols + c);
      return;
    case WeightFormat::kIntPacked:
      if (w.g_idx.empty()) return dequantize_int_packed_grouped(w, row, kind, out);
      {
        const int32_t* words = w.data.data<int32_t>() + row * w.data.dim(1);
        for (int64_t c = 0; c < w.cols; ++c) {
          const int64_t g = group_of(w, c);
          out[c] = quant::dequant_int(quant::unpack_int(words, c, w.bits), zero_point_at(w, row, g),
                                      scale_at(w, row, g), kind);
        }
      }
      return;
    case WeightFormat::kIntUnpacked: {
      const int8_t* q = w.data.data<int8_t>() + row * w.cols;
      if (!w.g_idx.empty() || w.strategy == Strategy::kBlock) {
        for (int64_t c = 0; c < w.cols; ++c) {
          const int64_t g = group_of(w, c);
          out[c] = quant::dequant_int(q[c], zero_point_at(w, row, g), scale_at(w, row, g), kind);
        }
        return;
      }
      for_each_contiguous_group(w, row, [&](int64_t c0, int64_t c1, float s, int z) {
        scaled_values<false>(c1 - c0, [&](int64_t i) { return static_cast<float>(q[c0 + i] - z); }, s, kind, out + c0);
      });
      return;
    }
    case WeightFormat::kFp8: {
      // quant::dequant_fp8 with the code's value from a table (its decode calls ldexpf per element).
      const std::array<float, 256>& kFp8Values = fp8_values();
      const uint8_t* q = w.data.data<uint8_t>() + row * w.cols;
      if (w.strategy == Strategy::kBlock) {  // one scale per block of columns
        for (int64_t c0 = 0; c0 < w.cols; c0 += w.block_cols)
          scaled_values<true>(std::min(w.cols, c0 + w.block_cols) - c0, [&](int64_t i) { return kFp8Values[q[c0 + i]]; },
                        scale_at(w, row, c0 / w.block_cols), kind, out + c0);
      } else if (w.strategy != Strategy::kTensor && w.strategy != Strategy::kChannel) {
        for (int64_t c = 0; c < w.cols; ++c)
          out[c] = quant::round_to_scale_kind(quant::detail::mul_rn(kFp8Values[q[c]], scale_at(w, row, group_of(w, c))), kind);
      } else {  // one scale for the row: every code's value once, then a lookup per element
        const float s = scale_at(w, row, 0);
        std::array<float, 256> table;
        scaled_values<true>(256, [&](int64_t b) { return kFp8Values[b]; }, s, kind, table.data());
        for (int64_t c = 0; c < w.cols; ++c) out[c] = table[q[c]];
      }
      return;
    }
    case WeightFormat::kNvfp4:
    case WeightFormat::kMxfp4: {
      // quant::dequant_mxfp4 / dequant_nvfp4 with the e2m1 values from a table and each block's
      // factor computed once (both decodes call ldexpf per element).
      static const std::array<float, 16> kE2m1Values = [] {
        std::array<float, 16> t{};
        for (int n = 0; n < 16; ++n) t[n] = quant::e2m1_to_float(static_cast<uint8_t>(n));
        return t;
      }();
      const bool mxfp4 = w.format == WeightFormat::kMxfp4;
      const uint8_t* bytes = w.data.data<uint8_t>() + row * (w.cols / 2);
      const uint8_t* scales = w.scale.data<uint8_t>() + row * w.scale.dim(1);
      for (int64_t c0 = 0; c0 < w.cols; c0 += w.group_size) {
        const uint8_t s = scales[c0 / w.group_size];
        // MXFP4: e2m1 times a power of two (exact), rounded to bf16 like dequant_mxfp4. NVFP4:
        // dequant_nvfp4's fp8(s) / global, its product rounded to bf16 unless the caller keeps the
        // GPU kernels' exact e2m1 * block scale (1 / global applied in fp32).
        const float factor = mxfp4 ? e8m0_values()[s] : quant::detail::div_rn(fp8_values()[s], w.global_scale);
        const bool round = mxfp4 || round_to_scale_dtype;
        const int64_t c1 = std::min(c0 + w.group_size, w.cols);
        if (std::isfinite(factor) && c0 % 8 == 0 && c1 - c0 >= 32 && c1 - c0 <= 64 && (c1 - c0) % 8 == 0 &&
            std::endian::native == std::endian::little) {
          // The block's 16 values once, then the int4 expansion (bytes in little-endian words hold
          // nibble j of word w at column 8w + j, as packed int4).
          float table[16];
          for (int n = 0; n < 16; ++n) {
            const float v = kE2m1Values[n] * factor;
            table[n] = round ? round_to_bf16_not_nan(v) : v;
          }
          int32_t words[8];
          std::memcpy(words, bytes + c0 / 2, static_cast<size_t>(c1 - c0) / 2);
          expand_int4(words, (c1 - c0) / 8, table, out + c0);
          continue;
        }
        if (std::isfinite(factor) && c0 % 2 == 0 && c1 % 2 == 0) {  // a byte (two columns) at a time
          for (int64_t i = c0 / 2; i < c1 / 2; ++i) {
            const uint8_t b = bytes[i];
            const float lo = kE2m1Values[b & 0xF] * factor, hi = kE2m1Values[b >> 4] * factor;
            out[2 * i] = round ? round_to_bf16_not_nan(lo) : lo;
            out[2 * i + 1] = round ? round_to_bf16_not_nan(hi) : hi;
          }
          continue;
        }
        for (int64_t c = c0; c < c1; ++c) {
          const uint8_t nibble = (c % 2 == 0) ? (bytes[c / 2] & 0xF) : (bytes[c / 2] >> 4);
          const float v = quant::detail::mul_rn(kE2m1Values[nibble], factor);
          out[c] = round ? quant::round_to_bf16(v) : v;
        }
      }
      return;
    }
  }
}

namespace {

// vLLM's W4A8-FP8 scale conversion (convert_bf16_scales_to_fp8) of row r of `w`: its groups' s8 and
// the row's chan * 8.
float w4a8_fp8_row_scales(const QuantWeight& w, int64_t r, int64_t groups, std::vector<float>& s8) {
  float amax = 0.0f;
  for (int64_t g = 0; g < groups; ++g) amax = std::max(amax, std::fabs(scale_at(w, r, g)));
  const float chan = quant::fp8_dynamic_scale(amax);  // amax / 448 with the 1 / (448 * 512) floor
  for (int64_t g = 0; g < groups; ++g) {
    const float scale_code = quant::fp8e4m3_to_float(quant::float_to_fp8e4m3_sat(scale_at(w, r, g) / chan));
    s8[g] = quant::fp8e4m3_to_float(quant::float_to_fp8e4m3_sat(scale_code / 8.0f));
  }
  return chan * 8.0f;
}

void check_w4a8_fp8_weights(const QuantWeight& w) {
  const bool int4 = (w.format == WeightFormat::kIntPacked || w.format == WeightFormat::kIntUnpacked) && w.bits == 4;
  if (!int4 || !w.zero_point.empty() || (w.strategy != Strategy::kGroup && w.strategy != Strategy::kChannel))
    throw Error("W4A8-FP8 weights must be symmetric 4-bit integers with group or channel scales");
}

int64_t scale_groups(const QuantWeight& w) { return w.strategy == Strategy::kChannel ? 1 : w.scale.dim(1); }

}  // namespace

QuantWeight w4a8_fp8_as_fp8_channel(const QuantWeight& w) {
  check_w4a8_fp8_weights(w);
  QuantWeight out;
  out.format = WeightFormat::kFp8;
  out.bits = 8;
  out.rows = w.rows;
  out.cols = w.cols;
  out.strategy = Strategy::kChannel;
  out.data = Tensor(DType::kF8E4M3, {w.rows, w.cols});
  out.scale = Tensor(DType::kF32, {w.rows, 1});
  const int64_t groups = scale_groups(w);
  std::vector<float> s8(static_cast<size_t>(groups));
  for (int64_t r = 0; r < w.rows; ++r) {
    out.scale.data<float>()[r] = w4a8_fp8_row_scales(w, r, groups, s8);
    uint8_t* dst = out.data.data<uint8_t>() + r * w.cols;
    for (int64_t c = 0; c < w.cols; ++c) {
      const int q = w.format == WeightFormat::kIntPacked
                        ? quant::unpack_int(w.data.data<int32_t>() + r * w.data.dim(1), c, 4)
                        : w.data.data<int8_t>()[r * w.cols + c];
      // q * s8 is exact in fp32 (at most 7 significant bits); |q * s8| <= 8 * 56 = 448.
      dst[c] = quant::float_to_fp8e4m3_sat(static_cast<float>(q) * s8[group_of(w, c)]);
    }
  }
  return out;
}

QuantWeight w4a8_fp8_exact_products(const QuantWeight& w) {
  check_w4a8_fp8_weights(w);
  QuantWeight out = w;
  const int64_t groups = scale_groups(w);
  out.scale = Tensor(DType::kF32, {w.rows, groups});
  std::vector<float> s8(static_cast<size_t>(groups));
  for (int64_t r = 0; r < w.rows; ++r) {
    const float row_scale = w4a8_fp8_row_scales(w, r, groups, s8);
    for (int64_t g = 0; g < groups; ++g) out.scale.data<float>()[r * groups + g] = s8[g] * row_scale;
  }
  return out;
}

}  // namespace qmoe
