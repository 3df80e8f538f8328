// The 4-bit weights' fragment order (fp4_gemm.h) turned into bf16 mma A registers: the scale
// formats' loads and conversions, shared by the register prefill kernel (fp4_gemm.cu, wgmma) and the
// decode kernel on the same repacked weights (fp4_decode.cu, mma.sync: a warp's A fragment of
// m16n8k16 is one warp's part of wgmma's m64 register fragment).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

namespace qmoe::cuda {

__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}

__device__ __forceinline__ __nv_bfloat162 as_bf16x2(uint32_t bits) {
  __nv_bfloat162 v;
  memcpy(&v, &bits, sizeof(v));
  return v;
}
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  const __nv_bfloat162 p = __hmul2_rn(as_bf16x2(a), as_bf16x2(b));
  uint32_t bits;
  memcpy(&bits, &p, sizeof(bits));
  return bits;
}

// The bit positions of register a_r's two codes in a k16 step's word (fp4_gemm.h), per 16-bit half
// (element j in half j): magnitude (3 bits) and sign. Chosen so that shifts move them onto a bf16's
// bits 6-8 (the exponent's two low bits and the mantissa's first) and 15 with 11 instructions per
// step: registers 0 and 1 need one shift, 2 one for the sign only.
__device__ constexpr int magnitude_bit(int r) { return r == 0 ? 0 : r == 1 ? 3 : r == 2 ? 6 : 13; }
__device__ constexpr int sign_bit(int r) { return r == 0 ? 9 : r == 1 ? 12 : r == 2 ? 10 : 11; }

// bf16 pairs (e2m1 * 2^-126, exact: code 0.5 is a bf16 subnormal) of one step's four registers.
__device__ __forceinline__ void unpack_step(uint32_t w, uint32_t (&a)[4]) {
  constexpr uint32_t kMagnitude = 0x01C001C0u, kSign = 0x80008000u;
  a[0] = (w << 6) & (kMagnitude | kSign);
  a[1] = (w << 3) & (kMagnitude | kSign);
  a[2] = (w & kMagnitude) | ((w << 5) & kSign);
  a[3] = ((w >> 7) & kMagnitude) | ((w << 4) & kSign);
}

// A k16 step's registers a[r] = bf16(e2m1 * 2^(e - 127)), formats.h's dequant_mxfp4 bit for bit: the
// product is exact but for overflow, so its one rounding matches the CPU's. e_m: the scale code of
// row m (a0, a2), e_m8 of row m + 8 (a1, a3). (Written so: with one branch per k-tile, or the
// multiply after the branch, ptxas serializes the wgmmas.)
__device__ __forceinline__ void convert_step(uint32_t word, uint32_t e_m, uint32_t e_m8, uint32_t (&a)[4]) {
  unpack_step(word, a);
  if (e_m < 128 && e_m8 < 128) {
    // One multiply by 2^(e - 1): exponent field e + 126.
    const uint32_t s_m = (e_m + 126) * 0x00800080u, s_m8 = (e_m8 + 126) * 0x00800080u;
#pragma unroll
    for (int r = 0; r < 4; ++r) a[r] = mul_bf16x2(a[r], r % 2 == 0 ? s_m : s_m8);
  } else {
    // 2^126 first, then 2^(e - 127) (code 0: the subnormal 2^-127; 255: infinity, as the CPU).
    const uint32_t s_m = (e_m ? e_m << 7 : 0x40u) * 0x00010001u, s_m8 = (e_m8 ? e_m8 << 7 : 0x40u) * 0x00010001u;
#pragma unroll
    for (int r = 0; r < 4; ++r) a[r] = mul_bf16x2(mul_bf16x2(a[r], 0x7E807E80u), r % 2 == 0 ? s_m : s_m8);
  }
}

// The scale formats: what a thread loads of a k-tile's scales and how its codes become bf16s.
// MXFP4: e8m0 scales per 32 columns, a word per thread quad (fp4_gemm.h); each weight the CPU's
// dequant_mxfp4.
struct Mxfp4Scales {
  static constexpr int kWords = 32;
  static constexpr bool kDividesByGlobal = false;
  static constexpr bool kLoopPerWidth = true;
  using Loaded = uint32_t;
  // `tile`: the shared address of the consumer's scale words; t: the thread in the warpgroup.
  static __device__ __forceinline__ Loaded load(uint32_t tile, int t) { return lds32(tile + 4 * (t / 4)); }
  // The same from global memory (`tile`: the tile's scale words).
  static __device__ __forceinline__ Loaded load_global(const uint32_t* tile, int t) { return __ldg(tile + t / 4); }
  static __device__ __forceinline__ void convert(const uint32_t (&w)[4], Loaded sw, uint32_t (&a)[4][4]) {
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      const uint32_t shift = step < 2 ? 0 : 16;  // steps 0-1: the tile's first group of 32 columns
      convert_step(w[step], (sw >> shift) & 0xFFu, (sw >> (shift + 8)) & 0xFFu, a[step]);
    }
  }
};
// NVFP4 as vLLM's weight-only layers scale it: e2m1 * fp8(s) (exactly a bf16) in the GEMM, the sum
// divided by the expert's global scale after it. The scales arrive as bf16(fp8(s) * 2^119), four
// words per thread quad (a k16 step's group of 16 for rows m and m + 8), so one multiply gives
// e2m1 * fp8(s) * 2^-7 exactly (a normal bf16: the 2^-7 keeps fp8's largest scale in range); the
// epilogue divides by global * 2^-7.
struct Nvfp4Scales {
  static constexpr int kWords = 128;
  static constexpr bool kDividesByGlobal = true;
  static constexpr bool kLoopPerWidth = false;
  using Loaded = uint4;
  static __device__ __forceinline__ Loaded load(uint32_t tile, int t) { return lds128(tile + 16 * (t / 4)); }
  static __device__ __forceinline__ Loaded load_global(const uint32_t* tile, int t) {
    return __ldg(reinterpret_cast<const uint4*>(tile) + t / 4);
  }
  static __device__ __forceinline__ void convert(const uint32_t (&w)[4], Loaded sw, uint32_t (&a)[4][4]) {
    const uint32_t s[4] = {sw.x, sw.y, sw.z, sw.w};
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      unpack_step(w[step], a[step]);
      const uint32_t s_m = __byte_perm(s[step], 0, 0x1010), s_m8 = __byte_perm(s[step], 0, 0x3232);
#pragma unroll
      for (int r = 0; r < 4; ++r) a[step][r] = mul_bf16x2(a[step][r], r % 2 == 0 ? s_m : s_m8);
    }
  }
};

// INT4 with bf16 scales: each register's two codes as bf16 128 + u (u = q + 8: or-ing the nibble
// into 128.0's mantissa), minus 136 + z (exact: q - z), times the scale (one rounding, as the CPU's).
// Four words of scales per thread quad, one per k16 step (rows m and m + 8); with zero points four
// more of offsets 136 + z, 512 bytes further.
template <bool kZeroPoints>
struct Int4Scales {
  static constexpr int kWords = kZeroPoints ? 256 : 128;
  static constexpr bool kDividesByGlobal = false;
  static constexpr bool kLoopPerWidth = false;
  struct Loaded {
    uint4 scales, offsets;
  };
  static __device__ __forceinline__ Loaded load(uint32_t tile, int t) {
    Loaded l;
    l.scales = lds128(tile + 16 * (t / 4));
    l.offsets = kZeroPoints ? lds128(tile + 512 + 16 * (t / 4)) : make_uint4(0, 0, 0, 0);
    return l;
  }
  static __device__ __forceinline__ Loaded load_global(const uint32_t* tile, int t) {
    const uint4* words = reinterpret_cast<const uint4*>(tile);
    return {__ldg(words + t / 4), kZeroPoints ? __ldg(words + 32 + t / 4) : make_uint4(0, 0, 0, 0)};
  }
  static __device__ __forceinline__ void convert(const uint32_t (&w)[4], Loaded l, uint32_t (&a)[4][4]) {
    const uint32_t s[4] = {l.scales.x, l.scales.y, l.scales.z, l.scales.w};
    const uint32_t o[4] = {l.offsets.x, l.offsets.y, l.offsets.z, l.offsets.w};
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      const uint32_t s_m = __byte_perm(s[step], 0, 0x1010), s_m8 = __byte_perm(s[step], 0, 0x3232);
      const uint32_t o_m = kZeroPoints ? __byte_perm(o[step], 0, 0x1010) : 0x43084308u;  // bf16 136
      const uint32_t o_m8 = kZeroPoints ? __byte_perm(o[step], 0, 0x3232) : 0x43084308u;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const uint32_t v = ((w[step] >> (4 * r)) & 0x000F000Fu) | 0x43004300u;
        const __nv_bfloat162 q = __hsub2_rn(as_bf16x2(v), as_bf16x2(r % 2 == 0 ? o_m : o_m8));
        uint32_t q_bits;
        memcpy(&q_bits, &q, sizeof(q_bits));
        a[step][r] = mul_bf16x2(q_bits, r % 2 == 0 ? s_m : s_m8);
      }
    }
  }
};

}  // namespace qmoe::cuda
