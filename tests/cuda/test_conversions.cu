// The hardware conversions of src/cuda/convert.cuh against formats.h's software roundings, over
// every one of the 2^32 float bit patterns (NaN inputs excepted: both give a NaN, with different
// payloads), and every pair of fp8 e4m3 codes; DivideRn against __fdiv_rn; and the branch-free
// fast paths of the 4-bit kernel's epilogues (DivideRn::quick, silu_quick) against the exact ones.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/activation.cuh"
#include "cuda/convert.cuh"
#include "gpu_test_util.h"
#include "quant/formats.h"

namespace qmoe {
namespace {

struct Mismatches {
  unsigned long long checked, bf16, f16, fp8;
  uint32_t first_bf16, first_f16, first_fp8;  // an input bit pattern of each kind, if any
};

// kTruncateBf16: a deliberately wrong bf16 rounding (truncation), the control that shows the
// comparison sees a wrong conversion.
template <bool kTruncateBf16>
__global__ void compare_conversions(Mismatches* out) {
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  unsigned long long checked = 0;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32); i += stride) {
    const auto bits = static_cast<uint32_t>(i);
    const float x = __uint_as_float(bits);
    if (x != x) continue;  // NaN
    ++checked;
    const float bf16 = kTruncateBf16 ? __uint_as_float(bits & 0xFFFF0000u) : cuda::round_bf16_hw(x);
    if (__float_as_uint(bf16) != __float_as_uint(quant::round_to_bf16(x))) {
      atomicAdd(&out->bf16, 1ull);
      out->first_bf16 = bits;
    }
    if (__float_as_uint(cuda::round_f16_hw(x)) != __float_as_uint(quant::round_to_f16(x))) {
      atomicAdd(&out->f16, 1ull);
      out->first_f16 = bits;
    }
    // x in the low byte, -x in the high one (checks the operand order too).
    const uint32_t two = cuda::fp8x2_sat_hw(x, -x);
    if ((two & 0xFFu) != quant::float_to_fp8e4m3_sat(x) || (two >> 8) != quant::float_to_fp8e4m3_sat(-x)) {
      atomicAdd(&out->fp8, 1ull);
      out->first_fp8 = bits;
    }
  }
  atomicAdd(&out->checked, checked);
}

template <bool kTruncateBf16>
Mismatches run_comparison() {
  Mismatches* d = nullptr;
  Mismatches h{};
  EXPECT_EQ(cudaMalloc(&d, sizeof(Mismatches)), cudaSuccess);
  EXPECT_EQ(cudaMemset(d, 0, sizeof(Mismatches)), cudaSuccess);
  compare_conversions<kTruncateBf16><<<1024, 256>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  return h;
}

// Every float but the NaNs: 2^32 minus 2 * (2^23 - 1).
constexpr unsigned long long kNonNanFloats = (1ull << 32) - 2 * ((1ull << 23) - 1);

TEST(HardwareConversions, MatchFormatsForEveryFloat) {
  REQUIRE_GPU();
  const Mismatches h = run_comparison<false>();
  EXPECT_EQ(h.checked, kNonNanFloats);
  EXPECT_EQ(h.bf16, 0u) << "bf16, e.g. input bits " << std::hex << h.first_bf16;
  EXPECT_EQ(h.f16, 0u) << "f16, e.g. input bits " << std::hex << h.first_f16;
  EXPECT_EQ(h.fp8, 0u) << "fp8 e4m3 (saturating), e.g. input bits " << std::hex << h.first_fp8;
}

// The same kernel with a truncating bf16 conversion must report mismatches (about half the floats).
TEST(HardwareConversions, TheComparisonSeesAWrongRounding) {
  REQUIRE_GPU();
  const Mismatches h = run_comparison<true>();
  EXPECT_EQ(h.checked, kNonNanFloats);
  EXPECT_GT(h.bf16, kNonNanFloats / 4);
}

// Every pair of fp8 e4m3 codes through e4m3x2_to_bf16x2_hw.
__global__ void convert_e4m3_pairs(uint32_t* out) {
  const uint32_t two = blockIdx.x * blockDim.x + threadIdx.x;  // < 2^16
  out[two] = cuda::e4m3x2_to_bf16x2_hw(two);
}

TEST(HardwareConversions, Fp8PairsToBf16MatchFormats) {
  REQUIRE_GPU();
  uint32_t* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(uint32_t) << 16), cudaSuccess);
  convert_e4m3_pairs<<<256, 256>>>(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<uint32_t> got(1 << 16);
  ASSERT_EQ(cudaMemcpy(got.data(), d, sizeof(uint32_t) << 16, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  auto is_nan_bf16 = [](uint32_t b) { return (b & 0x7F80u) == 0x7F80u && (b & 0x7Fu) != 0; };
  int mismatches = 0, nans = 0;
  for (uint32_t two = 0; two < (1u << 16); ++two)
    for (int h = 0; h < 2; ++h) {  // low byte -> low half
      const auto code = static_cast<uint8_t>(two >> (8 * h));
      const uint32_t bf16 = (got[two] >> (16 * h)) & 0xFFFFu;
      const uint32_t want = quant::float_to_bf16(quant::fp8e4m3_to_float(code));
      if ((code & 0x7F) == 0x7F) {  // NaN: any NaN
        nans += is_nan_bf16(bf16);
        continue;
      }
      if (bf16 != want && mismatches++ < 5)
        ADD_FAILURE() << "code 0x" << std::hex << int{code} << " in pair 0x" << two << ": 0x" << bf16 << " want 0x" << want;
    }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(nans, 2 * 2 * 256);  // each NaN code in both halves, with each of 256 partners
}

// Every fp8 e4m3 code through e4m3_to_f16_hw (the byte above the code must not matter).
__global__ void convert_e4m3_codes(uint16_t* out) {
  const uint32_t code = threadIdx.x;  // < 256
  out[code] = cuda::e4m3_to_f16_hw(code | 0xA500u);
}

TEST(HardwareConversions, Fp8CodesToF16MatchFormats) {
  REQUIRE_GPU();
  uint16_t* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(uint16_t) * 256), cudaSuccess);
  convert_e4m3_codes<<<1, 256>>>(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<uint16_t> got(256);
  ASSERT_EQ(cudaMemcpy(got.data(), d, sizeof(uint16_t) * 256, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  int nans = 0;
  for (uint32_t code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) {  // NaN: any NaN
      nans += (got[code] & 0x7C00u) == 0x7C00u && (got[code] & 0x3FFu) != 0;
      continue;
    }
    EXPECT_EQ(got[code], quant::float_to_f16(quant::fp8e4m3_to_float(static_cast<uint8_t>(code)))) << "code " << code;
  }
  EXPECT_EQ(nans, 2);
}

// DivideRn against __fdiv_rn over every float x, for divisors spread over the fast path's range,
// its edges and past them (where it must fall back), hard significands and random ones.
// kUncorrected: the quotient without its remainder correction, the control that shows the
// comparison sees a misrounded division.
template <bool kUncorrected>
__global__ void compare_divisions(float d, unsigned long long* mismatches, uint32_t* first) {
  const cuda::DivideRn divide(d);
  float r0;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r0) : "f"(d));
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  unsigned long long count = 0;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32); i += stride) {
    const float x = __uint_as_float(static_cast<uint32_t>(i));
    const float got = kUncorrected ? __fmul_rn(x, r0) : divide(x), want = __fdiv_rn(x, d);
    if (got != got && want != want) continue;  // both NaN
    if (__float_as_uint(got) != __float_as_uint(want)) {
      ++count;
      *first = static_cast<uint32_t>(i);
    }
  }
  if (count != 0) atomicAdd(mismatches, count);
}

template <bool kUncorrected>
unsigned long long count_division_mismatches(float d, uint32_t& first) {
  unsigned long long* d_count = nullptr;
  uint32_t* d_first = nullptr;
  unsigned long long count = 0;
  EXPECT_EQ(cudaMalloc(&d_count, sizeof(count)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&d_first, sizeof(first)), cudaSuccess);
  EXPECT_EQ(cudaMemset(d_count, 0, sizeof(count)), cudaSuccess);
  compare_divisions<kUncorrected><<<1024, 256>>>(d, d_count, d_first);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(&count, d_count, sizeof(count), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(&first, d_first, sizeof(first), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_count);
  cudaFree(d_first);
  return count;
}

TEST(DivideRn, MatchesFdivRnForEveryFloat) {
  REQUIRE_GPU();
  // NVFP4's divisors are global scales * 2^-7 (about 2^-7 .. 2^16 in checkpoints); the rest probe
  // the fast path's edges, the fallback and special values.
  std::vector<float> divisors = {1.0f,      0.0078125f, 3.0f,      -7.0f,     448.0f * 6.0f, 0x1p-60f, 0x1p60f,
                                 0x1.fffffep-61f, 0x1.000002p60f, 0x1p-126f, 0x1p-140f, 0x1p127f, 0.0f, -0.0f,
                                 INFINITY,  NAN};
  // Significands whose reciprocal lies near a rounding midpoint (the Newton step's hardest cases,
  // from a CPU search), at a few exponents.
  for (const float hard : {0x1.fffffep0f, 0x1.fffffap0f, 0x1.0d3226p0f, 0x1.29e20ap0f, 0x1.f8c5c4p0f, 0x1.820182p0f})
    for (const float scale : {1.0f, 0x1p-20f, 0x1p17f}) divisors.push_back(hard * scale);
  uint32_t state = 12345;
  for (int i = 0; i < 16; ++i) {  // random significands, exponents -70 .. 69
    state = state * 1664525u + 1013904223u;
    const uint32_t exponent = 127 - 70 + (state >> 8) % 140;
    divisors.push_back(__builtin_bit_cast(float, exponent << 23 | (state * 2654435761u) >> 9));
  }
  for (const float d : divisors) {
    uint32_t first = 0;
    EXPECT_EQ(count_division_mismatches<false>(d, first), 0u)
        << "divisor " << d << ", e.g. x bits 0x" << std::hex << first;
  }
}

TEST(DivideRn, TheComparisonSeesAMisroundedDivision) {
  REQUIRE_GPU();
  uint32_t first = 0;
  EXPECT_GT(count_division_mismatches<true>(3.0f, first), 1000000u);
}

// The epilogues' branch-free fast paths over every float x: where they leave `exact` set they must
// give the exact path's bits (kSilu: silu_quick vs silu; else DivideRn::quick by d vs __fdiv_rn).
// `taken` counts those x, so a test can check the fast path is not vacuous.
struct QuickCounts {
  unsigned long long taken, mismatches;
  uint32_t first;
};

template <bool kSilu>
__global__ void compare_quick(float d, QuickCounts* out) {
  const cuda::DivideRn divide(d);
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  unsigned long long taken = 0, mismatches = 0;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32); i += stride) {
    const float x = __uint_as_float(static_cast<uint32_t>(i));
    bool exact = kSilu || divide.quick_ok();
    const float got = kSilu ? cuda::silu_quick(x, exact) : divide.quick(x, exact);
    if (!exact) continue;
    ++taken;
    const float want = kSilu ? cuda::silu(x) : __fdiv_rn(x, d);
    if (__float_as_uint(got) != __float_as_uint(want)) {
      ++mismatches;
      out->first = static_cast<uint32_t>(i);
    }
  }
  atomicAdd(&out->taken, taken);
  if (mismatches != 0) atomicAdd(&out->mismatches, mismatches);
}

// The counts a comparison kernel accumulates: `launch(d_counts)` launches it on zeroed device counts.
template <class Launch>
QuickCounts run_counting(Launch launch) {
  QuickCounts* d_counts = nullptr;
  QuickCounts counts{};
  if (cudaMalloc(&d_counts, sizeof(counts)) != cudaSuccess) {
    ADD_FAILURE() << "cudaMalloc failed";
    return counts;
  }
  EXPECT_EQ(cudaMemset(d_counts, 0, sizeof(counts)), cudaSuccess);
  launch(d_counts);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(&counts, d_counts, sizeof(counts), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_counts);
  return counts;
}

template <bool kSilu>
QuickCounts count_quick(float d) {
  return run_counting([&](QuickCounts* d_counts) { compare_quick<kSilu><<<1024, 256>>>(d, d_counts); });
}

TEST(DivideRn, QuickMatchesFdivRnWhereItClaimsTo) {
  REQUIRE_GPU();
  for (const float d : {1.0f, 0.0078125f, 3.0f, -7.0f, 0x1.fffffep0f * 0x1p17f, 0x1p-60f, 0x1p60f, 0x1p-70f, 0.0f, NAN}) {
    const QuickCounts c = count_quick<false>(d);
    EXPECT_EQ(c.mismatches, 0u) << "divisor " << d << ", e.g. x bits 0x" << std::hex << c.first;
    // Inside the range every x with |x| in [2^-60, 2^60] takes it: 2 signs x 120 binades x 2^23, and 2^60 itself.
    const bool in_range = std::fabs(d) >= 0x1p-60f && std::fabs(d) <= 0x1p60f;
    EXPECT_EQ(c.taken, in_range ? 2ull * (120ull << 23) + 2 : 0ull) << "divisor " << d;
  }
}

TEST(SiluQuick, MatchesSiluWhereItClaimsTo) {
  REQUIRE_GPU();
  const QuickCounts c = count_quick<true>(0.0f);
  EXPECT_EQ(c.mismatches, 0u) << "e.g. x bits 0x" << std::hex << c.first;
  // Positive x from 2^-60 to 2^60 (120 binades) and negative x from -2^-60 down to about -41.6
  // (where 1 + e^-x passes 2^60: 66 binades, the last partly) take the fast path.
  EXPECT_GT(c.taken, (120ull + 65ull) << 23);
  EXPECT_LT(c.taken, (120ull + 67ull) << 23);
}

// divide_quick and swiglu_oai_quick on pseudo-random inputs (a hash of the index): where they leave
// `in_range` set they must give `/` and activate(3, ...)'s bits. kPairs: divide_quick(a, y) with a
// any float bit pattern and y in [1, 2^62); else swiglu_oai_quick(g, up, 7) with g and up in
// [-24, 24] (gpt-oss's limit is 7).
__device__ __forceinline__ uint32_t hash32(uint64_t i) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

template <bool kPairs>
__global__ void compare_quick_pairs(uint64_t count, QuickCounts* out) {
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  unsigned long long taken = 0, mismatches = 0;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride) {
    const uint32_t h0 = hash32(2 * i), h1 = hash32(2 * i + 1);
    bool in_range = true;
    float got, want;
    if constexpr (kPairs) {
      const float a = __uint_as_float(h0);
      const float y = __uint_as_float((127u + h1 % 62u) << 23 | (h1 >> 9));  // [1, 2^62)
      got = cuda::divide_quick(a, y, in_range);
      want = a / y;
    } else {
      const float g = (static_cast<float>(h0) * 0x1p-32f - 0.5f) * 48.0f;
      const float up = (static_cast<float>(h1) * 0x1p-32f - 0.5f) * 48.0f;
      got = cuda::swiglu_oai_quick(g, up, 7.0f, in_range);
      want = cuda::activate(3, 7.0f, g, up);
    }
    if (!in_range) continue;
    ++taken;
    if (__float_as_uint(got) != __float_as_uint(want)) {
      ++mismatches;
      out->first = static_cast<uint32_t>(i);
    }
  }
  atomicAdd(&out->taken, taken);
  if (mismatches != 0) atomicAdd(&out->mismatches, mismatches);
}

template <bool kPairs>
QuickCounts count_quick_pairs(uint64_t count) {
  return run_counting([&](QuickCounts* d_counts) { compare_quick_pairs<kPairs><<<1024, 256>>>(count, d_counts); });
}

TEST(DivideQuick, MatchesDivisionWhereItClaimsTo) {
  REQUIRE_GPU();
  const uint64_t count = uint64_t{1} << 32;
  const QuickCounts c = count_quick_pairs<true>(count);
  EXPECT_EQ(c.mismatches, 0u) << "e.g. index " << c.first;
  // a's exponent field within 127 -+ 60 (120 of 256 binades, and 2^60) and y below 2^60 (60 of 62):
  // about 0.45 of the pairs.
  EXPECT_GT(c.taken, count / 100 * 43);
  EXPECT_LT(c.taken, count / 100 * 47);
}

TEST(SwigluOaiQuick, MatchesActivateWhereItClaimsTo) {
  REQUIRE_GPU();
  const uint64_t count = uint64_t{1} << 30;
  const QuickCounts c = count_quick_pairs<false>(count);
  EXPECT_EQ(c.mismatches, 0u) << "e.g. index " << c.first;
  // Out of range only where (v + 1) * gc is 0 or tiny (gc or v + 1 near 0) or 1 + e^(-1.702 gc)
  // passes 2^60 (gc below about -24.4, outside the inputs): a small fraction.
  EXPECT_GT(c.taken, count / 100 * 99);
}

}  // namespace
}  // namespace qmoe
