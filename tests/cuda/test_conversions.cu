// The hardware conversions of src/cuda/convert.cuh against formats.h's software roundings, over
// every one of the 2^32 float bit patterns (NaN inputs excepted: both give a NaN, with different
// payloads).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "cuda/convert.cuh"
#include "quant/formats.h"

namespace qmoe {
namespace {

#define REQUIRE_GPU()                                                     \
  do {                                                                    \
    int devices = 0;                                                      \
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {    \
      cudaGetLastError();                                                 \
      GTEST_SKIP() << "no CUDA device";                                   \
    }                                                                     \
  } while (0)

struct Mismatches {
  unsigned long long bf16, f16, fp8;
  uint32_t first_bf16, first_f16, first_fp8;  // an input bit pattern of each kind, if any
};

__global__ void compare_conversions(Mismatches* out) {
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32); i += stride) {
    const auto bits = static_cast<uint32_t>(i);
    const float x = __uint_as_float(bits);
    if (x != x) continue;  // NaN
    if (__float_as_uint(cuda::round_bf16_hw(x)) != __float_as_uint(quant::round_to_bf16(x))) {
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
}

TEST(HardwareConversions, MatchFormatsForEveryFloat) {
  REQUIRE_GPU();
  Mismatches* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(Mismatches)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, sizeof(Mismatches)), cudaSuccess);
  compare_conversions<<<1024, 256>>>(d);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Mismatches h{};
  ASSERT_EQ(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  EXPECT_EQ(h.bf16, 0u) << "bf16, e.g. input bits " << std::hex << h.first_bf16;
  EXPECT_EQ(h.f16, 0u) << "f16, e.g. input bits " << std::hex << h.first_f16;
  EXPECT_EQ(h.fp8, 0u) << "fp8 e4m3 (saturating), e.g. input bits " << std::hex << h.first_fp8;
}

// The same check must fail on a wrong conversion: a truncating bf16 differs from round-to-even.
__global__ void count_truncation_mismatches(unsigned long long* out) {
  const uint32_t bits = 0x3F808001u + blockIdx.x * blockDim.x + threadIdx.x;  // 1.0039... and up
  const float x = __uint_as_float(bits);
  const float truncated = __uint_as_float(bits & 0xFFFF0000u);
  if (__float_as_uint(truncated) != __float_as_uint(quant::round_to_bf16(x))) atomicAdd(out, 1ull);
}

TEST(HardwareConversions, TheComparisonSeesAWrongRounding) {
  REQUIRE_GPU();
  unsigned long long* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(*d)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, sizeof(*d)), cudaSuccess);
  count_truncation_mismatches<<<64, 256>>>(d);
  unsigned long long h = 0;
  ASSERT_EQ(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  EXPECT_GT(h, 0u);
}

}  // namespace
}  // namespace qmoe
