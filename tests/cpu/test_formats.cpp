// Golden tests of quant/formats.h. Every expected value is a literal taken from
// shared/reference/compressed-tensors-format.md (§5.2, §7, §9, §10) or computed by hand from the
// format definitions; the comment next to each says how.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "qmoe/error.h"
#include "quant/formats.h"

namespace qmoe::quant {
namespace {

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t to_bits(float x) { return std::bit_cast<uint32_t>(x); }

// Bit-exact float comparison (distinguishes -0 from +0).
#define EXPECT_FLOAT_BITS(actual, expected) EXPECT_EQ(to_bits(actual), to_bits(expected))

// ---- §10 golden vectors ---------------------------------------------------------------------------

TEST(FormatsGolden, Int4SymmetricBf16) {
  const float s = bf16_to_float(0x3DCD);  // bf16(0.1) = 0.10009765625
  EXPECT_FLOAT_BITS(s, 0.10009765625f);
  const int q[8] = {-8, -1, 0, 1, 7, 3, -4, 5};
  const uint16_t expected[8] = {0xBF4D, 0xBDCD, 0x0000, 0x3DCD, 0x3F33, 0x3E9A, 0xBECD, 0x3F00};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(float_to_bf16(dequant_int(q[i], 0, s, ScaleKind::kBF16)), expected[i]) << i;
  }
  // 7 * s = 0.70068359375 -> bf16 0.69921875 (spacing 2^-8 in [0.5, 1)).
  EXPECT_FLOAT_BITS(dequant_int(7, 0, s, ScaleKind::kBF16), 0.69921875f);
}

TEST(FormatsGolden, Int4AsymmetricBf16) {
  const float s = bf16_to_float(0x3C4A);  // bf16(0.0123)
  // z = -3 is stored as the packed nibble 5 (offset 8); one packed zp word for one row.
  const int32_t zp_word = 0x5;
  int8_t z = 0;
  unpack_zero_points(&zp_word, 1, 1, 4, &z);
  EXPECT_EQ(z, -3);
  const int q[8] = {-8, -1, 0, 1, 7, 3, -4, 5};
  const uint16_t expected[8] = {0xBD7C, 0x3CCA, 0x3D18, 0x3D4A, 0x3DFC, 0x3D98, 0xBC4A, 0x3DCA};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(float_to_bf16(dequant_int(q[i], z, s, ScaleKind::kBF16)), expected[i]) << i;
  }
}

TEST(FormatsGolden, Nvfp4) {
  const uint8_t packed[4] = {0x71, 0xF8, 0x3A, 0x65};
  // Low nibble first: 1,7,8,F,A,3,5,6 = .5, 6, -0, -6, -1, 1.5, 3, 4.
  const uint8_t nibbles[8] = {0x1, 0x7, 0x8, 0xF, 0xA, 0x3, 0x5, 0x6};
  for (int i = 0; i < 8; ++i) {
    const uint8_t nib = (i % 2 == 0) ? (packed[i / 2] & 0xF) : (packed[i / 2] >> 4);
    ASSERT_EQ(nib, nibbles[i]);
  }
  const float gs = from_bits(0x45700000);  // 3840.0
  EXPECT_EQ(gs, 3840.0f);
  // Effective scale 1.375 / 3840 in f32.
  EXPECT_EQ(to_bits(fp8e4m3_to_float(0x3B) / gs), 0x39BBBBBCu);
  const uint16_t expected[8] = {0x393C, 0x3B0D, 0x8000, 0xBB0D, 0xB9BC, 0x3A0D, 0x3A8D, 0x3ABC};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(float_to_bf16(dequant_nvfp4(nibbles[i], 0x3B, gs)), expected[i]) << i;
  }
}

TEST(FormatsGolden, Mxfp4) {
  const uint8_t nibbles[8] = {0x1, 0x7, 0x8, 0xF, 0xA, 0x3, 0x5, 0x6};
  // e = 124 -> 2^-3.
  const float expected[8] = {0.0625f, 0.75f, -0.0f, -0.75f, -0.125f, 0.1875f, 0.375f, 0.5f};
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_BITS(dequant_mxfp4(nibbles[i], 124), expected[i]) << i;
}

TEST(FormatsGolden, Mxfp4LibraryCase) {
  // Values [0.5, 1, 1.5, 2] (codes 1, 2, 3, 4), group size 2, scales [0.25, 0.5] -> U8 [125, 126].
  const uint8_t codes[4] = {0x1, 0x2, 0x3, 0x4};
  const uint8_t scales[2] = {125, 126};
  const float expected[4] = {0.125f, 0.25f, 0.75f, 1.0f};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_BITS(dequant_mxfp4(codes[i], scales[i / 2]), expected[i]);
  EXPECT_EQ(e8m0_to_float(125), 0.25f);
  EXPECT_EQ(e8m0_to_float(126), 0.5f);
}

TEST(FormatsGolden, Mxfp4Overflow) {
  // e = 255 decodes to +inf: nonzero values overflow, 0 * inf = NaN.
  EXPECT_EQ(dequant_mxfp4(0x2, 255), INFINITY);
  EXPECT_EQ(dequant_mxfp4(0xA, 255), -INFINITY);
  EXPECT_TRUE(std::isnan(dequant_mxfp4(0x0, 255)));
  // e = 254: 2 * 2^127 = 2^128 overflows bf16; 1 * 2^127 does not.
  EXPECT_EQ(dequant_mxfp4(0x4, 254), INFINITY);
  EXPECT_EQ(dequant_mxfp4(0x2, 254), 0x1p127f);
  // e = 0: 0.5 * 2^-127 = 2^-128 is a bf16 subnormal, exact.
  EXPECT_EQ(dequant_mxfp4(0x1, 0), 0x1p-128f);
}

TEST(FormatsGolden, Fp8Bf16Scale) {
  const uint8_t q[8] = {0x00, 0x01, 0x38, 0x40, 0x7E, 0xB8, 0x80, 0x47};
  const float s = bf16_to_float(0x3C4A);
  const uint16_t expected[8] = {0x0000, 0x37CA, 0x3C4A, 0x3CCA, 0x40B1, 0xBC4A, 0x8000, 0x3D3D};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(float_to_bf16(dequant_fp8(q[i], s, ScaleKind::kBF16)), expected[i]) << i;
  }
}

TEST(FormatsGolden, ScaleKindRounding) {
  // 3 * 0.1f = 0.3000000119 in f32: kF32 keeps it; bf16 rounds to 0x3E9A (0.30078125);
  // f16 rounds to 0x34CD (0.30004882812).
  const float s = 0.1f;
  EXPECT_EQ(dequant_int(3, 0, s, ScaleKind::kF32), 3.0f * 0.1f);
  EXPECT_EQ(dequant_int(3, 0, s, ScaleKind::kBF16), 0.30078125f);
  EXPECT_EQ(dequant_int(3, 0, s, ScaleKind::kF16), 0.300048828125f);
}

// ---- §5.2 packing -------------------------------------------------------------------------------

struct PackCase {
  int bits;
  std::vector<int8_t> q;
  std::vector<uint32_t> words;
};

std::vector<PackCase> pack_cases() {
  std::vector<PackCase> cases;
  cases.push_back({4, {1, 2, 3, 4, 5, 6, 7, 0}, {0x8FEDCBA9u}});
  cases.push_back({4, {-1, -2, -3, -4, -5, -6, -7, -8}, {0x01234567u}});
  cases.push_back({4, {-8, 7, 0, 1, 2, 3, 4, 5, 6}, {0xDCBA98F0u, 0x0000000Eu}});
  cases.push_back({8, {1, 2}, {0x00008281u}});
  {
    std::vector<int8_t> q = {-4, -3, -2, -1, 0, 1, 2, 3};
    q.resize(32, -4);
    cases.push_back({3, q, {0x00FAC688u, 0x0u, 0x0u}});
  }
  {
    std::vector<int8_t> q(32, -4);
    q[10] = 3;  // straddles words 0 and 1
    cases.push_back({3, q, {0xC0000000u, 0x00000001u, 0x0u}});
  }
  {
    std::vector<int8_t> q;
    for (int r = 0; r < 4; ++r)
      for (int v = -4; v <= 3; ++v) q.push_back(static_cast<int8_t>(v));
    cases.push_back({3, q, {0x88FAC688u, 0xC688FAC6u, 0xFAC688FAu}});
  }
  return cases;
}

TEST(FormatsPacking, WorkedExamplesPack) {
  for (const PackCase& c : pack_cases()) {
    const int n = packed_words_per_row(static_cast<int64_t>(c.q.size()), c.bits);
    ASSERT_EQ(n, static_cast<int>(c.words.size()));
    std::vector<int32_t> words(n, 0x5A5A5A5A);  // garbage: the packer must zero-fill
    pack_int_row(c.q.data(), static_cast<int64_t>(c.q.size()), c.bits, words.data());
    for (int w = 0; w < n; ++w) {
      EXPECT_EQ(static_cast<uint32_t>(words[w]), c.words[w]) << c.bits << "-bit word " << w;
    }
  }
}

TEST(FormatsPacking, WorkedExamplesUnpack) {
  for (const PackCase& c : pack_cases()) {
    std::vector<int32_t> words(c.words.begin(), c.words.end());
    for (size_t i = 0; i < c.q.size(); ++i) {
      EXPECT_EQ(unpack_int(words.data(), static_cast<int64_t>(i), c.bits), c.q[i])
          << c.bits << "-bit element " << i;
    }
  }
}

TEST(FormatsPacking, SignedInt32Values) {
  // The on-disk I32 values quoted in §5.2.
  int32_t w = 0;
  const int8_t a[8] = {1, 2, 3, 4, 5, 6, 7, 0};
  pack_int_row(a, 8, 4, &w);
  EXPECT_EQ(w, -1880241239);
  const int8_t b[8] = {-1, -2, -3, -4, -5, -6, -7, -8};
  pack_int_row(b, 8, 4, &w);
  EXPECT_EQ(w, 19088743);
  const int8_t c[2] = {1, 2};
  pack_int_row(c, 2, 8, &w);
  EXPECT_EQ(w, 33409);
}

TEST(FormatsPacking, WordsPerRow) {
  EXPECT_EQ(packed_words_per_row(8, 4), 1);
  EXPECT_EQ(packed_words_per_row(9, 4), 2);
  EXPECT_EQ(packed_words_per_row(32, 3), 3);
  EXPECT_EQ(packed_words_per_row(11, 3), 2);  // 33 bits
  EXPECT_EQ(packed_words_per_row(4096, 8), 1024);
  EXPECT_EQ(packed_words_per_row(1, 1), 1);
}

TEST(FormatsPacking, RoundTripAllWidths) {
  std::mt19937 rng(7);
  for (int bits = 1; bits <= 8; ++bits) {
    std::uniform_int_distribution<int> dist(-(1 << (bits - 1)), (1 << (bits - 1)) - 1);
    for (int n : {1, 7, 31, 32, 33, 100}) {
      std::vector<int8_t> q(n);
      for (auto& v : q) v = static_cast<int8_t>(dist(rng));
      std::vector<int32_t> words(packed_words_per_row(n, bits));
      pack_int_row(q.data(), n, bits, words.data());
      for (int i = 0; i < n; ++i) ASSERT_EQ(unpack_int(words.data(), i, bits), q[i]) << bits;
      // Unused trailing bits are zero.
      const int used = (n * bits) % 32;
      if (used != 0) {
        EXPECT_EQ(static_cast<uint32_t>(words.back()) >> used, 0u) << bits;
      }
    }
  }
}

TEST(FormatsPacking, RejectsOutOfRange) {
  int32_t w[1];
  const int8_t too_big[1] = {8};
  EXPECT_THROW(pack_int_row(too_big, 1, 4, w), Error);
  const int8_t too_small[1] = {-9};
  EXPECT_THROW(pack_int_row(too_small, 1, 4, w), Error);
  EXPECT_THROW(pack_int_row(too_big, 1, 9, w), Error);
}

TEST(FormatsPacking, ZeroPointsHandComputed4Bit) {
  // zp [3 rows, 2 cols]; packed [ceil(3*4/32)=1, 2].
  // col 0 = [-3, 0, 7] -> u = 5, 8, 15 -> 0xF85; col 1 = [-8, -1, 1] -> u = 0, 7, 9 -> 0x970.
  const int8_t zp[6] = {-3, -8, 0, -1, 7, 1};
  int32_t packed[2];
  pack_zero_points(zp, 3, 2, 4, packed);
  EXPECT_EQ(packed[0], 0xF85);
  EXPECT_EQ(packed[1], 0x970);
  int8_t back[6];
  unpack_zero_points(packed, 3, 2, 4, back);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(back[i], zp[i]);
}

TEST(FormatsPacking, ZeroPointsHandComputed8Bit) {
  // zp [5 rows, 1 col] = [1, 2, 3, 4, -128] -> u = 0x81, 0x82, 0x83, 0x84, 0x00; 2 words.
  const int8_t zp[5] = {1, 2, 3, 4, -128};
  int32_t packed[2];
  pack_zero_points(zp, 5, 1, 8, packed);
  EXPECT_EQ(static_cast<uint32_t>(packed[0]), 0x84838281u);
  EXPECT_EQ(packed[1], 0);
  int8_t back[5];
  unpack_zero_points(packed, 5, 1, 8, back);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(back[i], zp[i]);
}

TEST(FormatsPacking, ZeroPointsStraddle3Bit) {
  // zp [11 rows, 2 cols], 33 bits per column -> packed [2, 2] (row-major: word k of col g at
  // [k * 2 + g]). col 0: row 10 = 3, others -4 -> 0xC0000000, 0x1 (the §5.2 straddle example);
  // col 1: all 3 (u = 7) -> 33 one-bits -> 0xFFFFFFFF, 0x1.
  int8_t zp[22];
  for (int r = 0; r < 11; ++r) {
    zp[r * 2 + 0] = r == 10 ? 3 : -4;
    zp[r * 2 + 1] = 3;
  }
  int32_t packed[4];
  pack_zero_points(zp, 11, 2, 3, packed);
  EXPECT_EQ(static_cast<uint32_t>(packed[0]), 0xC0000000u);
  EXPECT_EQ(static_cast<uint32_t>(packed[1]), 0xFFFFFFFFu);
  EXPECT_EQ(packed[2], 1);
  EXPECT_EQ(packed[3], 1);
  int8_t back[22];
  unpack_zero_points(packed, 11, 2, 3, back);
  for (int i = 0; i < 22; ++i) EXPECT_EQ(back[i], zp[i]) << i;
}

TEST(FormatsPacking, ZeroPointsRoundTrip4And8) {
  std::mt19937 rng(11);
  for (int bits : {4, 8}) {
    std::uniform_int_distribution<int> dist(-(1 << (bits - 1)), (1 << (bits - 1)) - 1);
    // group-like (many cols) and channel-like (1 col), rows not a multiple of the pack factor.
    for (auto [rows, cols] : {std::pair<int, int>{1024, 8}, {37, 3}, {130, 1}}) {
      std::vector<int8_t> zp(static_cast<size_t>(rows) * cols);
      for (auto& v : zp) v = static_cast<int8_t>(dist(rng));
      const int words = packed_words_per_row(rows, bits);
      EXPECT_EQ(words, (rows * bits + 31) / 32);
      std::vector<int32_t> packed(static_cast<size_t>(words) * cols);
      pack_zero_points(zp.data(), rows, cols, bits, packed.data());
      // Column g is the same stream pack_int_row builds from that column.
      for (int g = 0; g < cols; ++g) {
        std::vector<int8_t> column(rows);
        for (int r = 0; r < rows; ++r) column[r] = zp[static_cast<size_t>(r) * cols + g];
        std::vector<int32_t> stream(words);
        pack_int_row(column.data(), rows, bits, stream.data());
        for (int k = 0; k < words; ++k) ASSERT_EQ(packed[static_cast<size_t>(k) * cols + g], stream[k]);
      }
      std::vector<int8_t> back(zp.size());
      unpack_zero_points(packed.data(), rows, cols, bits, back.data());
      EXPECT_EQ(back, zp) << bits << "-bit " << rows << "x" << cols;
    }
  }
}

// ---- §7.1 FP8 E4M3FN ----------------------------------------------------------------------------

TEST(FormatsFp8, DecodeExamples) {
  EXPECT_EQ(fp8e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8e4m3_to_float(0x40), 2.0f);
  EXPECT_EQ(fp8e4m3_to_float(0x3B), 1.375f);
  EXPECT_EQ(fp8e4m3_to_float(0x47), 3.75f);
  EXPECT_EQ(fp8e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_EQ(fp8e4m3_to_float(0x07), 7 * 0x1p-9f);  // largest subnormal
  EXPECT_EQ(fp8e4m3_to_float(0x08), 0x1p-6f);      // smallest normal
  EXPECT_EQ(fp8e4m3_to_float(0xB8), -1.0f);
  EXPECT_FLOAT_BITS(fp8e4m3_to_float(0x80), -0.0f);
  EXPECT_FLOAT_BITS(fp8e4m3_to_float(0x00), 0.0f);
  EXPECT_EQ(fp8e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8e4m3_to_float(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(fp8e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(fp8e4m3_to_float(0xFF)));
}

TEST(FormatsFp8, EncodeExamples) {
  EXPECT_EQ(float_to_fp8e4m3(1.0f), 0x38);
  EXPECT_EQ(float_to_fp8e4m3(2.0f), 0x40);
  EXPECT_EQ(float_to_fp8e4m3(1.375f), 0x3B);
  EXPECT_EQ(float_to_fp8e4m3(3.75f), 0x47);
  EXPECT_EQ(float_to_fp8e4m3(0x1p-9f), 0x01);
  EXPECT_EQ(float_to_fp8e4m3(-1.0f), 0xB8);
  EXPECT_EQ(float_to_fp8e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_fp8e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_fp8e4m3(448.0f), 0x7E);
}

TEST(FormatsFp8, EncodeNormalTies) {
  // 1.0625 is halfway between 1 (m=0) and 1.125 (m=1): even -> 0x38.
  EXPECT_EQ(float_to_fp8e4m3(1.0625f), 0x38);
  // 1.1875 is halfway between 1.125 (m=1) and 1.25 (m=2): even -> 0x3A.
  EXPECT_EQ(float_to_fp8e4m3(1.1875f), 0x3A);
  EXPECT_EQ(float_to_fp8e4m3(std::nextafter(1.0625f, 2.0f)), 0x39);
  // 15.5 is halfway between 15 (0x57: e=10, m=7) and 16 (0x58): even -> 16 via the exponent carry.
  EXPECT_EQ(float_to_fp8e4m3(15.5f), 0x58);
}

TEST(FormatsFp8, EncodeOverflowNotSaturating) {
  // 448 = 0x7E (m=6); the next step would be 480 (m=7, the NaN code). 464 is the midpoint: ties go
  // to the even mantissa, 448. Anything above 464 rounds to the NaN code (PyTorch behaviour, §7.1).
  EXPECT_EQ(float_to_fp8e4m3(450.0f), 0x7E);
  EXPECT_EQ(float_to_fp8e4m3(463.9f), 0x7E);
  EXPECT_EQ(float_to_fp8e4m3(464.0f), 0x7E);
  EXPECT_EQ(float_to_fp8e4m3(std::nextafter(464.0f, 1000.0f)), 0x7F);
  EXPECT_EQ(float_to_fp8e4m3(465.0f), 0x7F);
  EXPECT_EQ(float_to_fp8e4m3(479.0f), 0x7F);
  EXPECT_EQ(float_to_fp8e4m3(480.0f), 0x7F);
  EXPECT_EQ(float_to_fp8e4m3(1e30f), 0x7F);
  EXPECT_EQ(float_to_fp8e4m3(-464.0f), 0xFE);
  EXPECT_EQ(float_to_fp8e4m3(-465.0f), 0xFF);
  EXPECT_EQ(float_to_fp8e4m3(INFINITY), 0x7F);
  EXPECT_EQ(float_to_fp8e4m3(-INFINITY), 0xFF);
  EXPECT_EQ(float_to_fp8e4m3(NAN) & 0x7F, 0x7F);
}

TEST(FormatsFp8, EncodeSubnormalTies) {
  EXPECT_EQ(float_to_fp8e4m3(0x1p-10f), 0x00);               // 0.5 * 2^-9: tie -> 0 (even)
  EXPECT_EQ(float_to_fp8e4m3(-0x1p-10f), 0x80);              // keeps the sign
  EXPECT_EQ(float_to_fp8e4m3(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(float_to_fp8e4m3(1.5f * 0x1p-9f), 0x02);         // tie between 1 and 2 -> 2 = 2^-8
  EXPECT_EQ(float_to_fp8e4m3(2.5f * 0x1p-9f), 0x02);         // tie between 2 and 3 -> 2
  EXPECT_EQ(float_to_fp8e4m3(3.5f * 0x1p-9f), 0x04);         // tie between 3 and 4 -> 4
  EXPECT_EQ(float_to_fp8e4m3(7.5f * 0x1p-9f), 0x08);         // tie -> 8 * 2^-9 = 2^-6 (0x08)
  EXPECT_EQ(float_to_fp8e4m3(6.5f * 0x1p-9f), 0x06);         // tie between 6 and 7 -> 6
  EXPECT_EQ(float_to_fp8e4m3(0x1p-149f), 0x00);              // f32 subnormal input
}

TEST(FormatsFp8, EncodeSaturating) {
  EXPECT_EQ(float_to_fp8e4m3_sat(464.0f), 0x7E);
  EXPECT_EQ(float_to_fp8e4m3_sat(465.0f), 0x7E);
  EXPECT_EQ(float_to_fp8e4m3_sat(1e9f), 0x7E);
  EXPECT_EQ(float_to_fp8e4m3_sat(-1e9f), 0xFE);
  EXPECT_EQ(float_to_fp8e4m3_sat(INFINITY), 0x7E);
  EXPECT_EQ(float_to_fp8e4m3_sat(-INFINITY), 0xFE);
  EXPECT_EQ(float_to_fp8e4m3_sat(1.375f), 0x3B);
  EXPECT_TRUE(std::isnan(fp8e4m3_to_float(float_to_fp8e4m3_sat(NAN))));
}

TEST(FormatsFp8, ExhaustiveRoundTrip) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;  // NaN codes
    const float v = fp8e4m3_to_float(static_cast<uint8_t>(b));
    EXPECT_EQ(float_to_fp8e4m3(v), b) << b;
    EXPECT_EQ(float_to_fp8e4m3_sat(v), b) << b;
    EXPECT_FLOAT_BITS(fp8e4m3_to_float(float_to_fp8e4m3(v)), v);
  }
}

TEST(FormatsFp8, ExhaustiveMonotoneAndMidpoints) {
  // For consecutive positive codes a < b, the midpoint rounds to the even code, and values just
  // either side round to their neighbours.
  for (int a = 0; a < 0x7E; ++a) {
    const float lo = fp8e4m3_to_float(static_cast<uint8_t>(a));
    const float hi = fp8e4m3_to_float(static_cast<uint8_t>(a + 1));
    ASSERT_LT(lo, hi);
    const float mid = 0.5f * (lo + hi);  // exact: both are short binary fractions
    const int even = (a % 2 == 0) ? a : a + 1;
    EXPECT_EQ(float_to_fp8e4m3(mid), even) << a;
    EXPECT_EQ(float_to_fp8e4m3(std::nextafter(mid, 0.0f)), a) << a;
    EXPECT_EQ(float_to_fp8e4m3(std::nextafter(mid, 1000.0f)), a + 1) << a;
  }
}

TEST(FormatsFp8, E5M2Decode) {
  EXPECT_EQ(fp8e5m2_to_float(0x3C), 1.0f);        // e=15, m=0
  EXPECT_EQ(fp8e5m2_to_float(0x3D), 1.25f);       // m=1 -> 1 + 1/4
  EXPECT_EQ(fp8e5m2_to_float(0xC0), -2.0f);
  EXPECT_EQ(fp8e5m2_to_float(0x7B), 57344.0f);    // e=30, m=3: 1.75 * 2^15
  EXPECT_EQ(fp8e5m2_to_float(0x01), 0x1p-16f);    // smallest subnormal
  EXPECT_EQ(fp8e5m2_to_float(0x03), 3 * 0x1p-16f);
  EXPECT_EQ(fp8e5m2_to_float(0x04), 0x1p-14f);    // smallest normal
  EXPECT_FLOAT_BITS(fp8e5m2_to_float(0x80), -0.0f);
  EXPECT_EQ(fp8e5m2_to_float(0x7C), INFINITY);
  EXPECT_EQ(fp8e5m2_to_float(0xFC), -INFINITY);
  EXPECT_TRUE(std::isnan(fp8e5m2_to_float(0x7D)));
  EXPECT_TRUE(std::isnan(fp8e5m2_to_float(0xFF)));
}

// ---- §7.2 E2M1, §7.3 E8M0 -----------------------------------------------------------------------

TEST(FormatsFp4, DecodeTable) {
  const float expected[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                              -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (int c = 0; c < 16; ++c) EXPECT_FLOAT_BITS(e2m1_to_float(static_cast<uint8_t>(c)), expected[c]);
}

TEST(FormatsFp4, ExhaustiveRoundTrip) {
  for (int c = 0; c < 16; ++c) {
    const float v = e2m1_to_float(static_cast<uint8_t>(c));
    EXPECT_EQ(float_to_e2m1(v), c) << c;  // incl. -0 -> 0x8
  }
}

TEST(FormatsFp4, TieTable) {
  // §9.1: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4 (codes 0, 2, 2, 4, 4, 6, 6).
  EXPECT_EQ(float_to_e2m1(0.25f), 0x0);
  EXPECT_EQ(float_to_e2m1(0.75f), 0x2);
  EXPECT_EQ(float_to_e2m1(1.25f), 0x2);
  EXPECT_EQ(float_to_e2m1(1.75f), 0x4);
  EXPECT_EQ(float_to_e2m1(2.5f), 0x4);
  EXPECT_EQ(float_to_e2m1(3.5f), 0x6);
  EXPECT_EQ(float_to_e2m1(5.0f), 0x6);
  EXPECT_EQ(float_to_e2m1(-0.75f), 0xA);
  EXPECT_EQ(float_to_e2m1(-5.0f), 0xE);
  // Just past each tie goes to the odd neighbour (or up).
  EXPECT_EQ(float_to_e2m1(std::nextafter(0.25f, 1.0f)), 0x1);
  EXPECT_EQ(float_to_e2m1(std::nextafter(0.75f, 0.0f)), 0x1);
  EXPECT_EQ(float_to_e2m1(std::nextafter(1.25f, 2.0f)), 0x3);
  EXPECT_EQ(float_to_e2m1(std::nextafter(1.75f, 0.0f)), 0x3);
  EXPECT_EQ(float_to_e2m1(std::nextafter(2.5f, 3.0f)), 0x5);
  EXPECT_EQ(float_to_e2m1(std::nextafter(3.5f, 0.0f)), 0x5);
  EXPECT_EQ(float_to_e2m1(std::nextafter(5.0f, 6.0f)), 0x7);
  // Interior points.
  EXPECT_EQ(float_to_e2m1(0.6f), 0x1);
  EXPECT_EQ(float_to_e2m1(2.9f), 0x5);
  EXPECT_EQ(float_to_e2m1(4.4f), 0x6);
}

TEST(FormatsFp4, ClampAndNegativeZero) {
  EXPECT_EQ(float_to_e2m1(7.0f), 0x7);
  EXPECT_EQ(float_to_e2m1(1e30f), 0x7);
  EXPECT_EQ(float_to_e2m1(INFINITY), 0x7);
  EXPECT_EQ(float_to_e2m1(-100.0f), 0xF);
  EXPECT_EQ(float_to_e2m1(-0.1f), 0x8);   // rounds to zero, keeps the sign
  EXPECT_EQ(float_to_e2m1(-0.25f), 0x8);
  EXPECT_EQ(float_to_e2m1(-0.0f), 0x8);
  EXPECT_EQ(float_to_e2m1(0.0f), 0x0);
  EXPECT_EQ(float_to_e2m1(0.1f), 0x0);
}

TEST(FormatsE8m0, Decode) {
  EXPECT_EQ(e8m0_to_float(127), 1.0f);
  EXPECT_EQ(e8m0_to_float(128), 2.0f);
  EXPECT_EQ(e8m0_to_float(124), 0.125f);
  EXPECT_EQ(e8m0_to_float(254), 0x1p127f);
  EXPECT_EQ(e8m0_to_float(255), INFINITY);
  // 2^-127 is an f32 subnormal: only the top mantissa bit set, 0x00400000.
  EXPECT_EQ(to_bits(e8m0_to_float(0)), 0x00400000u);
  EXPECT_EQ(to_bits(e8m0_to_float(1)), 0x00800000u);  // 2^-126: exponent field 1, the smallest normal
}

// ---- 16-bit floats --------------------------------------------------------------------------------

TEST(FormatsBf16, RoundHalfEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808000)), 0x3F80);  // 1 + 2^-8: tie, 0x3F80 is even
  EXPECT_EQ(float_to_bf16(from_bits(0x3F818000)), 0x3F82);  // tie between 0x3F81 and 0x3F82
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808001)), 0x3F81);  // just above the tie
  EXPECT_EQ(float_to_bf16(from_bits(0x3F817FFF)), 0x3F81);  // just below the next tie
  EXPECT_EQ(float_to_bf16(-1.0f), 0xBF80);
  EXPECT_EQ(float_to_bf16(from_bits(0xBF818000)), 0xBF82);  // sign-symmetric
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(0.1f), 0x3DCD);                   // 0x3DCCCCCD rounds up
}

TEST(FormatsBf16, InfNanOverflowSubnormal) {
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(float_to_bf16(-INFINITY), 0xFF80);
  EXPECT_EQ(float_to_bf16(from_bits(0x7F7FFFFF)), 0x7F80);  // FLT_MAX rounds up to inf
  EXPECT_EQ(float_to_bf16(from_bits(0x7F7F7FFF)), 0x7F7F);  // below the tie: bf16 max
  EXPECT_EQ(float_to_bf16(from_bits(0x7F7F8000)), 0x7F80);  // tie, 0x7F7F odd -> inf
  // NaN stays NaN, even a signalling one whose payload sits in the dropped low bits.
  for (uint32_t nan_bits : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0xFFFFFFFFu}) {
    const uint16_t h = float_to_bf16(from_bits(nan_bits));
    EXPECT_EQ(h & 0x7F80, 0x7F80) << nan_bits;
    EXPECT_NE(h & 0x007F, 0) << nan_bits;
    EXPECT_TRUE(std::isnan(bf16_to_float(h)));
  }
  // f32 subnormals: bf16 keeps the top 7 mantissa bits.
  EXPECT_EQ(float_to_bf16(from_bits(0x00010000)), 0x0001);
  EXPECT_EQ(float_to_bf16(from_bits(0x00008000)), 0x0000);  // tie -> even 0
  EXPECT_EQ(float_to_bf16(from_bits(0x00018000)), 0x0002);  // tie -> even 2
  EXPECT_EQ(float_to_bf16(from_bits(0x007FFFFF)), 0x0080);  // carries into the smallest normal
}

TEST(FormatsBf16, Decode) {
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xC000), -2.0f);
  EXPECT_EQ(bf16_to_float(0x3DCD), 0.10009765625f);
  EXPECT_FLOAT_BITS(bf16_to_float(0x8000), -0.0f);
  EXPECT_EQ(bf16_to_float(0x7F80), INFINITY);
  EXPECT_EQ(to_bits(bf16_to_float(0x0001)), 0x00010000u);
  EXPECT_EQ(round_to_bf16(from_bits(0x3F818000)), from_bits(0x3F820000));
}

TEST(FormatsF16, RoundHalfEven) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16(1.0f + 0x1p-11f), 0x3C00);        // tie -> even
  EXPECT_EQ(float_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);    // tie between 0x3C01, 0x3C02
  EXPECT_EQ(float_to_f16(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3C01);
  EXPECT_EQ(float_to_f16(0.1f), 0x2E66);                   // 0.0999755859375 (below the tie)
  EXPECT_EQ(float_to_f16(2047.0f * 0x1p-11f * 2.0f), 0x3FFF);  // 1.9990234375 exactly
  EXPECT_EQ(float_to_f16(1.99951171875f), 0x4000);         // tie 0x3FFF/0x4000 -> even 0x4000
}

TEST(FormatsF16, OverflowInfNan) {
  EXPECT_EQ(float_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7C00);  // tie with odd 0x7BFF -> inf
  EXPECT_EQ(float_to_f16(1e6f), 0x7C00);
  EXPECT_EQ(float_to_f16(-1e6f), 0xFC00);
  EXPECT_EQ(float_to_f16(INFINITY), 0x7C00);
  EXPECT_EQ(float_to_f16(-INFINITY), 0xFC00);
  for (uint32_t nan_bits : {0x7FC00000u, 0x7F800001u, 0xFFC00000u}) {
    const uint16_t h = float_to_f16(from_bits(nan_bits));
    EXPECT_EQ(h & 0x7C00, 0x7C00);
    EXPECT_NE(h & 0x03FF, 0);
    EXPECT_TRUE(std::isnan(f16_to_float(h)));
  }
}

TEST(FormatsF16, Subnormals) {
  EXPECT_EQ(float_to_f16(0x1p-24f), 0x0001);                        // smallest subnormal
  EXPECT_EQ(float_to_f16(0x1p-25f), 0x0000);                        // tie -> 0
  EXPECT_EQ(float_to_f16(-0x1p-25f), 0x8000);
  EXPECT_EQ(float_to_f16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(float_to_f16(1.5f * 0x1p-24f), 0x0002);                 // tie -> even 2
  EXPECT_EQ(float_to_f16(2.5f * 0x1p-24f), 0x0002);                 // tie -> even 2
  EXPECT_EQ(float_to_f16(1023.0f * 0x1p-24f), 0x03FF);              // largest subnormal
  EXPECT_EQ(float_to_f16(1023.5f * 0x1p-24f), 0x0400);              // tie -> 2^-14
  EXPECT_EQ(float_to_f16(0x1p-14f), 0x0400);                        // smallest normal
  EXPECT_EQ(float_to_f16(0x1p-30f), 0x0000);
  EXPECT_EQ(float_to_f16(0x1p-149f), 0x0000);
  EXPECT_EQ(f16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_float(0x03FF), 1023.0f * 0x1p-24f);
  EXPECT_EQ(f16_to_float(0x8001), -0x1p-24f);
}

TEST(FormatsF16, Decode) {
  EXPECT_EQ(f16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_float(0x3555), 0.333251953125f);  // 1.0101010101b * 2^-2
  EXPECT_EQ(f16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_float(0x0400), 0x1p-14f);
  EXPECT_FLOAT_BITS(f16_to_float(0x8000), -0.0f);
  EXPECT_EQ(f16_to_float(0x7C00), INFINITY);
  EXPECT_EQ(f16_to_float(0xFC00), -INFINITY);
  EXPECT_TRUE(std::isnan(f16_to_float(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7C01)));
  EXPECT_EQ(round_to_f16(0.1f), 0.0999755859375f);
}

TEST(FormatsF16, ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float v = f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(v)) continue;
    ASSERT_EQ(float_to_f16(v), h) << h;
  }
}

// ---- §9.1 quantize_int --------------------------------------------------------------------------

TEST(FormatsQuantize, HalfEven) {
  EXPECT_EQ(quantize_int(0.5f, 1.0f, 0, 4, ScaleKind::kF32), 0);
  EXPECT_EQ(quantize_int(1.5f, 1.0f, 0, 4, ScaleKind::kF32), 2);
  EXPECT_EQ(quantize_int(2.5f, 1.0f, 0, 4, ScaleKind::kF32), 2);
  EXPECT_EQ(quantize_int(-2.5f, 1.0f, 0, 4, ScaleKind::kF32), -2);
  EXPECT_EQ(quantize_int(-0.5f, 1.0f, 0, 4, ScaleKind::kBF16), 0);
  EXPECT_EQ(quantize_int(2.6f, 1.0f, 0, 4, ScaleKind::kF32), 3);
  // x / s = 1.25 / 0.5 = 2.5 -> 2.
  EXPECT_EQ(quantize_int(1.25f, 0.5f, 0, 4, ScaleKind::kBF16), 2);
}

TEST(FormatsQuantize, ClampAndZeroPoint) {
  EXPECT_EQ(quantize_int(100.0f, 1.0f, 0, 4, ScaleKind::kF32), 7);
  EXPECT_EQ(quantize_int(-100.0f, 1.0f, 0, 4, ScaleKind::kF32), -8);
  EXPECT_EQ(quantize_int(7.5f, 1.0f, 0, 4, ScaleKind::kF32), 7);    // symmetric amax/7.5 quirk
  EXPECT_EQ(quantize_int(-8.4f, 1.0f, 0, 4, ScaleKind::kF32), -8);
  EXPECT_EQ(quantize_int(200.0f, 1.0f, 0, 8, ScaleKind::kF32), 127);
  EXPECT_EQ(quantize_int(-200.0f, 1.0f, 0, 8, ScaleKind::kF32), -128);
  EXPECT_EQ(quantize_int(0.5f, 1.0f, 3, 4, ScaleKind::kF32), 4);    // 3.5 -> 4
  EXPECT_EQ(quantize_int(1.5f, 1.0f, -3, 4, ScaleKind::kF32), -2);  // -1.5 -> -2
  EXPECT_EQ(quantize_int(6.0f, 1.0f, 3, 4, ScaleKind::kF32), 7);    // 9 clamps to 7
  EXPECT_EQ(quantize_int(2.0f, 1.0f, 1, 3, ScaleKind::kF32), 3);    // 3-bit range [-4, 3]
}

TEST(FormatsQuantize, Bf16Quotient) {
  // s = bf16(0.1) = 0.10009765625 = 205/2048; x = bf16 0x3EB3 = 0.349609375 = 179/512.
  // x / s = 716/205 = 3.49268...: f32 keeps it (-> 3), but bf16 (spacing 1/64 in [2, 4)) rounds it
  // to 3.5 because 3.5 - 716/205 = 1.5/205 = 0.0073 < 1/128; 3.5 then rounds half-even to 4.
  const float s = bf16_to_float(0x3DCD);
  const float x1 = bf16_to_float(0x3EB3);
  EXPECT_EQ(x1, 0.349609375f);
  EXPECT_EQ(quantize_int(x1, s, 0, 4, ScaleKind::kBF16), 4);
  EXPECT_EQ(quantize_int(x1, s, 0, 4, ScaleKind::kF32), 3);
  // x = bf16 0x3EE7 = 0.451171875 = 231/512: x / s = 924/205 = 4.50731... bf16 (spacing 1/32 in
  // [4, 8)) gives 4.5 -> 4 (half even); f32 gives 5.
  const float x2 = bf16_to_float(0x3EE7);
  EXPECT_EQ(x2, 0.451171875f);
  EXPECT_EQ(quantize_int(x2, s, 0, 8, ScaleKind::kBF16), 4);
  EXPECT_EQ(quantize_int(x2, s, 0, 8, ScaleKind::kF32), 5);
}

TEST(FormatsQuantize, Bf16ZeroPointAdd) {
  // t = 1.4921875 (bf16: 1 + 63/128) + z = 100 -> 101.4921875, which bf16 (spacing 0.5 in
  // [64, 128)) rounds to 101.5 -> 102 (half even). In f32 it stays 101.49... -> 101.
  EXPECT_EQ(quantize_int(1.4921875f, 1.0f, 100, 8, ScaleKind::kBF16), 102);
  EXPECT_EQ(quantize_int(1.4921875f, 1.0f, 100, 8, ScaleKind::kF32), 101);
}

TEST(FormatsQuantize, Bf16QuotientBruteForce) {
  // Search bf16 inputs in [0.25, 2) with s = bf16(0.1) for quotients where the bf16 and f32
  // roundings pick different integers, and check each against a reference written here in double
  // arithmetic: bf16 rounding by ties-to-even on the exact quotient's f32 image.
  const float s = bf16_to_float(0x3DCD);
  int differing = 0;
  for (uint32_t xb = 0x3E80; xb < 0x4000; ++xb) {
    const float x = bf16_to_float(static_cast<uint16_t>(xb));
    const float q32 = static_cast<float>(static_cast<double>(x) / static_cast<double>(s));
    // bf16 of a float in [2, 32): spacing 2^(floor(log2 q) - 7), ties to even.
    const double ulp = std::ldexp(1.0, std::ilogb(q32) - 7);
    const double qb = std::nearbyint(static_cast<double>(q32) / ulp) * ulp;
    const int ref_b = std::clamp(static_cast<int>(std::nearbyint(qb)), -128, 127);
    const int ref_f = std::clamp(static_cast<int>(std::nearbyint(q32)), -128, 127);
    EXPECT_EQ(quantize_int(x, s, 0, 8, ScaleKind::kBF16), ref_b) << xb;
    EXPECT_EQ(quantize_int(x, s, 0, 8, ScaleKind::kF32), ref_f) << xb;
    if (ref_b != ref_f) ++differing;
  }
  EXPECT_GT(differing, 0);
}

// ---- activation quantization (vllm-moe-system.md §5) -------------------------------------------

TEST(FormatsActivation, Fp8DynamicScale) {
  EXPECT_EQ(fp8_dynamic_scale(448.0f), 1.0f);
  EXPECT_EQ(fp8_dynamic_scale(896.0f), 2.0f);
  EXPECT_EQ(fp8_dynamic_scale(1.0f), 1.0f / 448.0f);
  // amax = 0 (and anything below 1/512) gives the floor 1/(448*512) = 1/229376.
  EXPECT_EQ(fp8_dynamic_scale(0.0f), 1.0f / 229376.0f);
  EXPECT_EQ(fp8_dynamic_scale(1.0f / 1024.0f), 1.0f / 229376.0f);
  EXPECT_EQ(kFp8MinScale, 1.0f / 229376.0f);
}

TEST(FormatsActivation, Fp8Quantize) {
  EXPECT_EQ(quantize_fp8_act(3.0f, 0.5f), 0x3C);      // 1.5 = 1.1b * 2^0 -> e=7, m=4
  EXPECT_EQ(quantize_fp8_act(-3.0f, 0.5f), 0xBC);
  EXPECT_EQ(quantize_fp8_act(1000.0f, 1.0f), 0x7E);   // saturates, never NaN
  EXPECT_EQ(quantize_fp8_act(465.0f, 1.0f), 0x7E);
  EXPECT_EQ(quantize_fp8_act(-500.0f, 1.0f), 0xFE);
  EXPECT_EQ(quantize_fp8_act(0.0f, 229376.0f), 0x00);
  // amax = 896 -> scale 2, inv 0.5: the amax element maps to 448.
  EXPECT_EQ(quantize_fp8_act(896.0f, 1.0f / fp8_dynamic_scale(896.0f)), 0x7E);
}

TEST(FormatsActivation, Int8) {
  EXPECT_EQ(int8_dynamic_scale(127.0f), 1.0f);
  EXPECT_EQ(int8_dynamic_scale(254.0f), 2.0f);
  EXPECT_EQ(int8_dynamic_scale(0.0f), 0.0f);
  EXPECT_EQ(quantize_int8_act(2.5f, 1.0f), 2);    // half even
  EXPECT_EQ(quantize_int8_act(3.5f, 1.0f), 4);
  EXPECT_EQ(quantize_int8_act(-2.5f, 1.0f), -2);
  EXPECT_EQ(quantize_int8_act(300.0f, 1.0f), 127);
  EXPECT_EQ(quantize_int8_act(-300.0f, 1.0f), -128);
  EXPECT_EQ(quantize_int8_act(-254.0f, 2.0f), -127);
  EXPECT_EQ(quantize_int8_act(5.0f, 2.0f), 2);     // 2.5 -> 2
  EXPECT_EQ(quantize_int8_act(0.0f, 0.0f), 0);     // all-zero token
  EXPECT_EQ(quantize_int8_act(5.0f, 0.0f), 0);
}

TEST(FormatsActivation, Nvfp4BlockUnitScale) {
  // gs = 1, amax = 6 -> sf = fp8(1 * 6 / 6) = 1.0 = 0x38; q = e2m1(x).
  const float x[16] = {0.0f,   0.5f,   1.0f,   1.5f,   2.0f,  3.0f,  4.0f, 6.0f,
                       -0.25f, -0.75f, -1.25f, -1.75f, -2.5f, -3.5f, -5.0f, -6.0f};
  const uint8_t expected[16] = {0x0, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7,
                                0x8, 0xA, 0xA, 0xC, 0xC, 0xE, 0xE, 0xF};
  uint8_t q[16];
  EXPECT_EQ(quantize_nvfp4_block(x, 16, 1.0f, q), 0x38);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(q[i], expected[i]) << i;
}

TEST(FormatsActivation, Nvfp4BlockScaled) {
  // gs = 2, amax = 3 -> sf = fp8(2 * 0.5) = 1 (0x38); each x is multiplied by gs / sf = 2.
  float x[16] = {3.0f, 1.0f, -0.5f, 0.1f, 0.2f, 0.6f};
  uint8_t q[16];
  EXPECT_EQ(quantize_nvfp4_block(x, 16, 2.0f, q), 0x38);
  // 6 -> 0x7, 2 -> 0x4, -1 -> 0xA, 0.2 -> 0x0, 0.4 -> 0x1, 1.2 -> 0x2, zeros -> 0x0.
  const uint8_t expected[6] = {0x7, 0x4, 0xA, 0x0, 0x1, 0x2};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(q[i], expected[i]) << i;
  for (int i = 6; i < 16; ++i) EXPECT_EQ(q[i], 0x0) << i;
}

TEST(FormatsActivation, Nvfp4BlockSaturatedScale) {
  // gs = 448, amax = 12 -> gs * amax / 6 = 896 clamps to 448 (0x7E); gs / sf = 1, so 12 clamps
  // to 6 (0x7), 3 -> 0x5, 0.3 -> 0x1.
  float x[16] = {12.0f, 3.0f, 0.3f};
  uint8_t q[16];
  EXPECT_EQ(quantize_nvfp4_block(x, 16, 448.0f, q), 0x7E);
  EXPECT_EQ(q[0], 0x7);
  EXPECT_EQ(q[1], 0x5);
  EXPECT_EQ(q[2], 0x1);
}

TEST(FormatsActivation, Nvfp4BlockNonPowerOfTwoScale) {
  // gs = 1, amax = 4.5 -> sf = 0.75 = 1.5 * 2^-1 -> e=6, m=4 -> 0x34; gs / sf = 4/3.
  // 4.5 * 4/3 ~ 6 -> 0x7; 1.5 -> ~2 -> 0x4; -0.9 -> -1.2 -> 0xA; 0.15 -> 0.2 -> 0x0.
  float x[16] = {4.5f, 1.5f, -0.9f, 0.15f};
  uint8_t q[16];
  EXPECT_EQ(quantize_nvfp4_block(x, 16, 1.0f, q), 0x34);
  EXPECT_EQ(q[0], 0x7);
  EXPECT_EQ(q[1], 0x4);
  EXPECT_EQ(q[2], 0xA);
  EXPECT_EQ(q[3], 0x0);
}

TEST(FormatsActivation, Nvfp4BlockZeroScale) {
  uint8_t q[16];
  float zeros[16] = {};
  std::fill(q, q + 16, 0xFF);
  EXPECT_EQ(quantize_nvfp4_block(zeros, 16, 1.0f, q), 0x00);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(q[i], 0x0) << i;
  // amax = 6 * 2^-11 -> gs * amax / 6 = 2^-11 = 0.25 * 2^-9, which rounds to fp8 0: all zero, even
  // though the block is not.
  float tiny[16] = {6.0f * 0x1p-11f, -3.0f * 0x1p-11f};
  std::fill(q, q + 16, 0xFF);
  EXPECT_EQ(quantize_nvfp4_block(tiny, 16, 1.0f, q), 0x00);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(q[i], 0x0) << i;
}

}  // namespace
}  // namespace qmoe::quant
