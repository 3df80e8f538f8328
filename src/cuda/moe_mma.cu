// The tensor-core decode path of the grouped GEMM, for schemes whose GEMM input stays 16-bit (weight-
// only methods, unquantized): weights as the A operand of mma.sync m16n8k16 (16 output rows), the
// expert's slots as B (8 per n-tile), fp32 accumulation. One weight read serves up to 8 * kN slots,
// and each weight costs ~1.5 instructions to decode instead of a decode plus one FMA per slot.
//
// No repacking: the mma sums over k, so any k permutation applied to both operands is allowed. A lane
// loads 16 contiguous bytes of a canonical row (kElems elements) and decodes each 8-element group
// into the pairs (t0,t4) (t1,t5) (t2,t6) (t3,t7), which is what a 4-bit word gives with one
// mask-and-or per pair. The activations are stored with the same permutation (each 8-group as
// t0 t4 t1 t5 t2 t6 t3 t7, see `permuted_col`), so a lane's B fragment is 16 contiguous bytes too.
//
// Decoding reproduces formats.h bit for bit (each weight is the CPU's rounded value); only the fp32
// summation order differs from the CPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cuda/convert.cuh"
#include "cuda/launch.cuh"
#include "cuda/moe_kernels.h"
#include "cuda/weight_access.cuh"
#include "quant/formats.h"

namespace qmoe::cuda {
namespace {

constexpr int kWarps = kMmaWarps;

// ---- operand helpers ------------------------------------------------------------------------------

// c (16 rows x 8 slots, this lane's 4 values) += A (16 x 16) * B (16 x 8).
template <bool kBf16>
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  if constexpr (kBf16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <bool kBf16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kBf16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// op(a, b) on two 16-bit lanes (bf16x2 or f16x2) held as raw bits.
template <bool kBf16, class Op>
__device__ __forceinline__ uint32_t lanes2(uint32_t a, uint32_t b, Op op) {
  using T2 = std::conditional_t<kBf16, __nv_bfloat162, __half2>;
  const T2 r = op(*reinterpret_cast<const T2*>(&a), *reinterpret_cast<const T2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}
template <bool kBf16>
__device__ __forceinline__ uint32_t sub2(uint32_t a, uint32_t b) {
  return lanes2<kBf16>(a, b, [](auto x, auto y) { return __hsub2(x, y); });
}
template <bool kBf16>
__device__ __forceinline__ uint32_t mul2(uint32_t a, uint32_t b) {
  return lanes2<kBf16>(a, b, [](auto x, auto y) { return __hmul2(x, y); });
}

// Where the scale and zero point of (row, k) live: element row_offset + (k >> group_shift) of the
// expert's scale and zero-point tensors (channel and tensor: shift past any k; tensor: row 0).
struct ScaleRow {
  int scale_offset, zero_offset;  // elements (< 2^31 per expert)
};
__device__ __forceinline__ int group_shift_of(const WeightLayout& L) {
  int shift = 31;
  if (L.strategy == kGroup || L.strategy == kTensorGroup)  // a power of two (plan_gemm_kernel)
    for (shift = 0; (int64_t{1} << shift) < L.group_size;) ++shift;
  return shift;
}
__device__ __forceinline__ ScaleRow scale_row(const WeightLayout& L, int64_t row) {
  const int64_t r = L.strategy == kTensor ? 0 : row;
  return {static_cast<int>(r * L.scale_cols), static_cast<int>(r * L.zp_cols)};
}

// ---- weight traits: one 16-byte chunk of a row -> pairs in the permuted k order ------------------
// Each traits type has kElems (elements per chunk), kScaleBytes (bytes of one stored scale, 0 for
// none), a per-(row, chunk) parameter struct `Row` made from the chunk's scale bits and zero point,
// and group(raw, g, row, pairs) that writes the pairs (t0,t4) (t1,t5) (t2,t6) (t3,t7) of the
// chunk's g-th 8-element group.

// Packed INT4 with bf16/f16 scales, rounded per weight to the scale dtype (WNA16).
template <bool kBf16>
struct Int4 {
  static constexpr int kElems = 32;
  struct Row {
    uint32_t scale2, offset2;
  };
  static constexpr int kScaleBytes = 2;
  __device__ static Row row(uint32_t scale_bits, int zero) {
    // The scale is stored in the activation dtype: its bits are the multiplier. A device nibble
    // t = u ^ 8 (launch_codes_to_signed) xor-ed with 8 into the mantissa of 128.0 (bf16 0x4300) or
    // 1024.0 (f16 0x6400) gives base + u exactly; subtracting base + 8 + z (bits base + 8 + z, as z
    // is in [-8, 7]) gives q - z exactly; the multiply by the scale rounds once, i.e.
    // RNE((q - z) * s) as formats.h.
    const uint32_t offset = (kBf16 ? 0x4308u : 0x6408u) + zero;
    return {scale_bits * 0x10001u, offset * 0x10001u};
  }
  __device__ static void group(const uint4& raw, int g, const Row& p, uint32_t (&pairs)[4]) {
    const uint32_t word = g == 0 ? raw.x : g == 1 ? raw.y : g == 2 ? raw.z : raw.w;
    constexpr uint32_t kBase = kBf16 ? 0x43084308u : 0x64086408u;  // base with the nibbles' 8 flipped
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t bits = lop3_and_xor(word >> (4 * j), 0x000F000Fu, kBase);  // nibbles j and j + 4
      pairs[j] = mul2<kBf16>(sub2<kBf16>(bits, p.offset2), p.scale2);
    }
  }
};

// INT8 (int8 storage, or packed in int32 words and made signed at load: launch_codes_to_signed) with
// bf16/f16 scales, rounded to the scale dtype. (q - z) * s is exact in f32 (<= 17 significant bits),
// so one rounding to 16 bits.
template <bool kBf16>
struct Int8 {
  static constexpr int kElems = 16;
  struct Row {
    float scale, offset;
  };
  static constexpr int kScaleBytes = 2;
  __device__ static Row row(uint32_t scale_bits, int zero) {
    // 0x4B0000uu is 2^23 + u as a float; subtracting 2^23 + 128 + z gives q - z exactly.
    const uint16_t s = static_cast<uint16_t>(scale_bits);
    // (f16: the hardware widening, exact, where formats.h decodes in software)
    return {kBf16 ? quant::bf16_to_float(s) : __half2float(__ushort_as_half(s)), 8388608.0f + 128.0f + static_cast<float>(zero)};
  }
  __device__ static void group(const uint4& raw, int g, const Row& p, uint32_t (&pairs)[4]) {
    // t0..t3, t4..t7, int8 q -> q + 128 (offset binary, for the float trick below)
    const uint32_t lo = (g == 0 ? raw.x : raw.z) ^ 0x80808080u, hi = (g == 0 ? raw.y : raw.w) ^ 0x80808080u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float a = __uint_as_float(__byte_perm(lo, 0x4B000000u, 0x7440 + j)) - p.offset;
      const float b = __uint_as_float(__byte_perm(hi, 0x4B000000u, 0x7440 + j)) - p.offset;
      pairs[j] = pack2<kBf16>(a * p.scale, b * p.scale);
    }
  }
};

// MXFP4: e2m1 nibbles with an E8M0 scale per 32 elements (one chunk), rounded to bf16.
struct Mxfp4 {
  static constexpr int kElems = 32;
  struct Row {
    uint32_t scale2;
  };
  static constexpr int kScaleBytes = 1;
  __device__ static Row row(uint32_t e, int) {
    const uint32_t bits = e == 0 ? 0x0040u : e << 7;  // 2^(e - 127) as bf16 (2^-127 is subnormal)
    return {bits | (bits << 16)};
  }
  __device__ static void group(const uint4& raw, int g, const Row& p, uint32_t (&pairs)[4]) {
    const uint32_t word = g == 0 ? raw.x : g == 1 ? raw.y : g == 2 ? raw.z : raw.w;
    constexpr uint32_t kTwo126 = 0x7E807E80u;  // bf16x2 2^126
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // e2m1 s|ee|m placed as bf16 s|0..0ee|m000000 is the value times 2^-126 (exact, subnormal for
      // ee = 0); the first multiply restores it exactly, the second rounds once to bf16.
      const uint32_t t = word >> (4 * j);
      const uint32_t bits = ((t & 0x00070007u) << 6) | ((t & 0x00080008u) << 12);
      pairs[j] = mul2<true>(mul2<true>(bits, kTwo126), p.scale2);
    }
  }
};

// NVFP4 (weight-only, weights kept unrounded): e2m1 times its fp8 block scale (one per 16 elements,
// two per chunk) is exact in bf16 (<= 6 significant bits), so the mma sums exact products and the
// epilogue divides by the expert's global scale: e2m1 * (s / g) of formats.h up to fp32 rounding.
struct Nvfp4 {
  static constexpr int kElems = 32;
  static constexpr int kScaleBytes = 1;
  static constexpr bool kDividesByGlobal = true;
  struct Row {
    uint32_t scale2[2];
  };
  // Both block scales of the chunk (element i is even: the 2 bytes are one aligned u16).
  __device__ static uint32_t load_scale(const void* scale, int i) {
    return __ldg(reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(scale) + i));
  }
  __device__ static Row row(uint32_t two, int) {
    // Both scales as bf16, exact (hardware conversion: the software one took ~50 instructions per
    // row and step), each duplicated into both halves.
    const uint32_t both = e4m3x2_to_bf16x2_hw(two);
    return {{__byte_perm(both, 0, 0x1010), __byte_perm(both, 0, 0x3232)}};
  }
  __device__ static void group(const uint4& raw, int g, const Row& p, uint32_t (&pairs)[4]) {
    Mxfp4::group(raw, g, Mxfp4::Row{p.scale2[g / 2]}, pairs);  // words 0-1: block 0, words 2-3: block 1
  }
};

// Unquantized bf16/f16 weights: 8 elements per chunk, pairs by byte permutes.
template <bool kBf16>
struct Dense {
  static constexpr int kElems = 8;
  struct Row {};
  static constexpr int kScaleBytes = 0;
  __device__ static Row row(uint32_t, int) { return {}; }
  __device__ static void group(const uint4& raw, int, const Row&, uint32_t (&pairs)[4]) {
    pairs[0] = __byte_perm(raw.x, raw.z, 0x5410);
    pairs[1] = __byte_perm(raw.x, raw.z, 0x7632);
    pairs[2] = __byte_perm(raw.y, raw.w, 0x5410);
    pairs[3] = __byte_perm(raw.y, raw.w, 0x7632);
  }
};

// Activation-quantizing schemes run on codes: the mma multiplies weight codes by input codes (both
// exact in f16) and the epilogue applies the weight scale (channel or tensor) and the input row's
// scale. kCodes marks these traits; their Row is empty.

// FP8 E4M3 weights: bytes j and j + 4 of a group into one e4m3x2, converted exactly in one cvt.
struct Fp8Codes {
  static constexpr int kElems = 16;
  static constexpr int kScaleBytes = 0;
  static constexpr bool kCodes = true;
  struct Row {};
  __device__ static Row row(uint32_t, int) { return {}; }
  __device__ static void group(const uint4& raw, int g, const Row&, uint32_t (&pairs)[4]) {
    const uint32_t lo = g == 0 ? raw.x : raw.z, hi = g == 0 ? raw.y : raw.w;  // t0..t3, t4..t7
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint16_t two = static_cast<uint16_t>(__byte_perm(lo, hi, j | ((4 + j) << 4)));
      asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(pairs[j]) : "h"(two));
    }
  }
};

// INT8 weights (int8 storage): 0x6400 | (q + 128) is f16 1024 + q + 128; subtracting 1152 gives q.
struct Int8Codes {
  static constexpr int kElems = 16;
  static constexpr int kScaleBytes = 0;
  static constexpr bool kCodes = true;
  struct Row {};
  __device__ static Row row(uint32_t, int) { return {}; }
  __device__ static void group(const uint4& raw, int g, const Row&, uint32_t (&pairs)[4]) {
    const uint32_t lo = g == 0 ? raw.x : raw.z, hi = g == 0 ? raw.y : raw.w;
    constexpr uint32_t k1152 = 0x64806480u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t two = __byte_perm(lo, hi, j | ((4 + j) << 8));  // bytes j, j + 4 in the halves
      uint32_t bits;  // (two & 0x00FF00FF) ^ 0x64806480: the f16 bits of 1024 + (q + 128)
      asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(bits) : "r"(two), "r"(0x00FF00FFu), "r"(k1152));
      pairs[j] = sub2<false>(bits, k1152);
    }
  }
};

// The stored scale bits of element i of the scale tensor (2 bytes: bf16/f16, 1: E8M0), unless the
// traits type reads its own (load_scale).
template <class T>
__device__ __forceinline__ uint32_t load_scale_of(const void* scale, int i, ...) {
  if constexpr (T::kScaleBytes == 2) return __ldg(static_cast<const uint16_t*>(scale) + i);
  return __ldg(static_cast<const uint8_t*>(scale) + i);
}
template <class T>
__device__ __forceinline__ uint32_t load_scale_of(const void* scale, int i, decltype(&T::load_scale)) {
  return T::load_scale(scale, i);
}

// Whether the epilogue divides by the expert's global scale (absent member: false).
template <class T>
constexpr bool divides_by_global(...) { return false; }
template <class T>
constexpr bool divides_by_global(decltype(T::kDividesByGlobal)*) { return T::kDividesByGlobal; }

// INT4 weights for W4A8 (activation codes): q - z is exact in f16 (1024 + u - (1032 + z)); the
// group scale is applied per step (kStepScale) or, channel-wise, in the epilogue.
struct Int4Codes {
  static constexpr int kElems = 32;
  static constexpr int kScaleBytes = 0;
  static constexpr bool kCodes = true;
  struct Row {
    uint32_t offset2;
  };
  __device__ static Row row(uint32_t, int zero) { return {(0x6408u + zero) * 0x10001u}; }
  __device__ static void group(const uint4& raw, int g, const Row& p, uint32_t (&pairs)[4]) {
    const uint32_t word = g == 0 ? raw.x : g == 1 ? raw.y : g == 2 ? raw.z : raw.w;
#pragma unroll
    for (int j = 0; j < 4; ++j) pairs[j] = sub2<false>(lop3_and_xor(word >> (4 * j), 0x000F000Fu, 0x64086408u), p.offset2);
  }
};

// Whether a traits type runs on codes (absent member: false).
template <class T>
constexpr bool codes_of(...) { return false; }
template <class T>
constexpr bool codes_of(decltype(T::kCodes)*) { return T::kCodes; }

// ---- the kernel -----------------------------------------------------------------------------------

// m16 tiles per warp: each B fragment (the inputs) serves 16 kM weight rows. Measured on the H200
// (2026-11-29, before the pipelined stages): 4 tiles was 1.2-1.6x slower at 1-8 tokens.
constexpr int kM = kMmaTilesPerWarp;
constexpr int kRows = 2 * kM;  // rows per lane: r, r + 8, r + 16, r + 24
// Blocks per SM the register budget must allow. One n-tile: 3 pipelined (80 registers, a few
// spilled; up to 1.1x faster at 1-8 tokens on the H200 than 2 blocks), 4 otherwise (64 registers),
// but 2 with per-step scales (W4A8, FP8 blocks: their second accumulator set spilled 128-240 bytes
// per thread at 3 blocks; at 2, on the H200, 2026-11-30: 4-15% faster at 1 token, up to 11% at 8;
// 1-3% slower for DeepSeek-V3's W4A8 at 8-64 tokens and <= 1% for its FP8 blocks at 64). More
// n-tiles: 2 (at 1 block, 4 n-tiles ran up to 1.5x slower).
template <int kN, bool kPipelined, bool kStepScale>
inline constexpr int kMinBlocks =
    mma_blocks_per_sm(kN, kPipelined, kStepScale ? MmaScaling::kPerStep : MmaScaling::kOnce);

// (Weights: load_weights, weight_access.cuh.) Input loads are volatile too, so the compiler keeps
// every load of a step ahead of its mmas.
__device__ __forceinline__ uint4 load_inputs(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Block: one chunk of an expert's slots (blockIdx.y over the grouping's chunks: at most
// p.chunk_slots, in passes of 8 kN), 16 * kM * m_tiles output rows; its 8 warps
// are m_tiles row tiles x k_splits slices of the reduction, summed through shared memory. A lane
// (r = lane / 4, q = lane % 4) owns rows r + 8 j (j < kRows) of its warp tile and chunk 4 * step + q
// of each of its steps (ks, ks + k_splits, ...).
// Two register stages. kPipelined: a stage's next weights are loaded as soon as its step is
// multiplied, so each warp keeps a step's weights in flight while it decodes the other (needs more
// registers), and the first loads go out before the slot bookkeeping. Otherwise both stages are
// loaded, then both decoded.
// kStepScale (codes of 128x128-block or grouped weights): every step's products are scaled by the
// step's weight scales (per row) and input scales before they join the accumulators (a step's
// columns lie in one weight block or group and one input group). kZero: the weights have zero
// points (a template flag, as their loads cost issue slots even when predicated off).
template <class T, bool kBf16, int kN, bool kStepScale, bool kZero, bool kPipelined>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks<kN, kPipelined, kStepScale>) grouped_mma_kernel(GroupedGemmParams p, const uint16_t* in16,
                                                                     InputScales in_scale, int m_tiles, int k_splits,
                                                                     bool release_late) {
  __shared__ float partial[kWarps][kN * kM * 4][32];  // (warp, accumulator, lane) of the k slices
  // The chunk: the chunk count and entry load together, then the expert's tensors and slot range.
  // (The grouping's outputs: read before chain_wait through L2, launch.cuh.)
  const int num_chunks = __ldcg(p.num_chunks), active = __ldcg(p.chunks + 2 * blockIdx.y);
  const int m0 = __ldcg(p.chunks + 2 * blockIdx.y + 1);
  if (static_cast<int>(blockIdx.y) >= num_chunks) {  // block-uniform
    chain_wait();
    return;
  }
  const ExpertTensors w = p.experts[active];
  const int m1 = min(m0 + p.chunk_slots, __ldcg(p.expert_offsets + active + 1));
  const WeightLayout& L = p.layout;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int mt = warp % m_tiles, ks = warp / m_tiles;
  const int r = lane / 4, q = lane % 4;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * m_tiles + mt) * 16 * kM + r;  // + 8 j
  const int K = static_cast<int>(L.cols);  // < 2^31 (plan_gemm_kernel)
  const int chunks = K / T::kElems, steps = (chunks + 3) / 4;
  const int full_steps = chunks / 4;  // steps whose four chunks all exist
  // This warp's full steps ks + i * k_splits, i < my_full; the partial last step, if any, is
  // handled after them by the warp it falls to.
  const int my_full = ks < full_steps ? (full_steps - ks + k_splits - 1) / k_splits : 0;
  const bool my_tail = full_steps < steps && full_steps >= ks && (full_steps - ks) % k_splits == 0;
  const int shift = group_shift_of(L);
  constexpr int kGroups = T::kElems / 8;
  const uint4* wdata = static_cast<const uint4*>(w.data);  // (rows, chunks) 16-byte chunks
  // 32-bit offsets (in 16-byte chunks) of this lane's rows: an expert's tensor holds < 2^31 chunks
  // (plan_gemm_kernel). Rows past the end read row 0 and are not stored.
  int woff[kRows];
  ScaleRow srow[kRows];
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    const int64_t row = row0 + 8 * j < L.rows ? row0 + 8 * j : 0;
    woff[j] = static_cast<int>(row * chunks);
    srow[j] = scale_row(L, row);
  }

  // One step's weights: this lane's chunk of each of its rows, with the scale bits and zero points
  // (and, for kStepScale, the rows' fp32 weight scales).
  struct Stage {
    uint4 raw[kRows];
    uint32_t sbits[kRows];
    int zero[kRows];
    float sw[kStepScale ? kRows : 1];
  };
  // kTail: the step may lack chunks (lanes past the end load chunk 0 and multiply zero inputs).
  auto load_stage = [&](Stage& s, int st, auto tail) {
    constexpr bool kTail = decltype(tail)::value;
    const int c = st * 4 + q;
    const int cc = !kTail || c < chunks ? c : 0;
    [[maybe_unused]] const int grp = (cc * T::kElems) >> shift;  // scale group
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      s.raw[j] = load_weights(wdata + woff[j] + cc);
      s.sbits[j] = 0;
      s.zero[j] = 0;
      if constexpr (T::kScaleBytes > 0) s.sbits[j] = load_scale_of<T>(w.scale, srow[j].scale_offset + grp, nullptr);
      if constexpr (kZero) s.zero[j] = __ldg(w.zero_point + srow[j].zero_offset + grp);
    }
    if constexpr (kStepScale) {
      // Weight scale of each accumulator row (rows r + 8 i): one 128x128 block for the whole warp
      // (block rows are a multiple of 16 kM), or each row's group.
      const int k0 = st * 4 * T::kElems;  // the step's first column
      if (L.strategy == kBlock) {
        const float s0 = scale_at(L, w, row0 < L.rows ? row0 : 0, k0 / L.block_cols);
#pragma unroll
        for (int i = 0; i < kRows; ++i) s.sw[i] = s0;
      } else {
#pragma unroll
        for (int i = 0; i < kRows; ++i) s.sw[i] = scale_at(L, w, row0 + 8 * i < L.rows ? row0 + 8 * i : 0, k0 >> shift);
      }
    }
  };

  for (int s0 = m0; s0 < m1; s0 += 8 * kN) {
    Stage A, B;
    if (kPipelined && my_full > 0) load_stage(A, ks, std::false_type{});
    if (kPipelined && my_full > 1) load_stage(B, ks + k_splits, std::false_type{});
    // Chained launch (launch.cuh): the weights above and the grouping read so far do not come from
    // the previous kernel; its output, this GEMM's input, is read from here on.
    chain_wait();
    if (!release_late) chain_release();

    const int count = min(8 * kN, m1 - s0);
    // (K / 8) permuted 16-bit input row of this lane's B column (a 32-bit offset: the backend checks
    // mma_takes_input_rows). Absent slots read the first slot's row: the mma's columns are
    // independent and theirs are never stored.
    const uint4* x[kN];
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      const int i = 8 * n + r;
      const int slot = p.sorted_slots[s0 + (i < count ? i : 0)];
      x[n] = reinterpret_cast<const uint4*>(in16) + (p.in_by_token ? slot / p.top_k : slot) * (K / 8);
    }
    // Input rows of this lane's accumulator columns (slots 8 n + 2 q + h), or -1.
    int crow[kN][2];
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 8 * n + 2 * q + h;
        const int slot = i < count ? p.sorted_slots[s0 + i] : -1;
        crow[n][h] = slot < 0 ? -1 : p.in_by_token ? slot / p.top_k : slot;
      }
    const int scales_per_row = in_scale.group > 0 ? (K + in_scale.group - 1) / in_scale.group : 1;
    float acc[kN][kM][4] = {};

    // Decode the stage's weights and multiply them with the step's inputs.
    auto compute_stage = [&](const Stage& s, int st, auto tail) {
      constexpr bool kTail = decltype(tail)::value;
      const int c = st * 4 + q;
      const bool in_k = !kTail || c < chunks;
      const int cx = in_k ? c : 0;
      // The first n-tile's inputs for the whole step, loaded before decoding.
      uint4 x0[kGroups];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) x0[g] = load_inputs(x[0] + cx * kGroups + g);
      typename T::Row rp[kRows];
#pragma unroll
      for (int j = 0; j < kRows; ++j) rp[j] = T::row(s.sbits[j], s.zero[j]);
      float step_acc[kN][kM][4] = {};
      float(&dst)[kN][kM][4] = kStepScale ? step_acc : acc;
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        // Without pipelined stages (dense weights: nothing to decode that would hide a load), the
        // other n-tiles' inputs of the group are loaded together before its mmas, not each right
        // before its own (H200, thirty-seventh session: bf16 decode 4-24% faster at 16-32 slots per
        // pass; the 4-bit and 8-bit instances, which decode here, ran up to 23% slower with it).
        uint4 xg[kN];
        if constexpr (!kPipelined)
#pragma unroll
          for (int n = 1; n < kN; ++n)
            if (8 * n < count) xg[n] = load_inputs(x[n] + cx * kGroups + g);  // warp-uniform
        uint32_t f[kRows][4];
#pragma unroll
        for (int j = 0; j < kRows; ++j) T::group(s.raw[j], g, rp[j], f[j]);
#pragma unroll
        for (int n = 0; n < kN; ++n) {
          if (8 * n >= count) break;  // warp-uniform
          uint4 bv = n == 0 ? x0[g] : !kPipelined ? xg[n] : load_inputs(x[n] + cx * kGroups + g);
          if (kTail && !in_k) bv = make_uint4(0, 0, 0, 0);
#pragma unroll
          for (int m = 0; m < kM; ++m) {
            // Tile m: rows (2m, 2m + 1) of the lane's four, i.e. r + 16 m and r + 16 m + 8.
            mma<kBf16>(dst[n][m], f[2 * m][0], f[2 * m + 1][0], f[2 * m][1], f[2 * m + 1][1], bv.x, bv.y);
            mma<kBf16>(dst[n][m], f[2 * m][2], f[2 * m + 1][2], f[2 * m][3], f[2 * m + 1][3], bv.z, bv.w);
          }
        }
      }
      if constexpr (kStepScale) {
        const int g = in_scale.group > 0 ? st * 4 * T::kElems / in_scale.group : 0;
#pragma unroll
        for (int n = 0; n < kN; ++n) {
          if (8 * n >= count) break;  // warp-uniform
          float sx[2];
#pragma unroll
          for (int h = 0; h < 2; ++h) sx[h] = crow[n][h] < 0 ? 0.0f : in_scale.scale[crow[n][h] * scales_per_row + g];
#pragma unroll
          for (int m = 0; m < kM; ++m)
#pragma unroll
            for (int j = 0; j < 4; ++j)
              acc[n][m][j] = fmaf(step_acc[n][m][j], s.sw[2 * m + (j >> 1)] * sx[j & 1], acc[n][m][j]);
        }
      }
    };

    // Branches on i are warp-uniform.
    if constexpr (kPipelined) {
      for (int i = 0; i < my_full; i += 2) {
        const int st = ks + i * k_splits;
        compute_stage(A, st, std::false_type{});
        if (i + 2 < my_full) load_stage(A, st + 2 * k_splits, std::false_type{});
        if (i + 1 < my_full) {
          compute_stage(B, st + k_splits, std::false_type{});
          if (i + 3 < my_full) load_stage(B, st + 3 * k_splits, std::false_type{});
        }
      }
    } else {
      int i = 0;
      for (; i + 1 < my_full; i += 2) {
        const int st = ks + i * k_splits;
        load_stage(A, st, std::false_type{});
        load_stage(B, st + k_splits, std::false_type{});
        compute_stage(A, st, std::false_type{});
        compute_stage(B, st + k_splits, std::false_type{});
      }
      if (i < my_full) {
        load_stage(A, ks + i * k_splits, std::false_type{});
        compute_stage(A, ks + i * k_splits, std::false_type{});
      }
    }
    if (my_tail) {
      load_stage(A, full_steps, std::true_type{});
      compute_stage(A, full_steps, std::true_type{});
    }

    if (k_splits > 1) {
#pragma unroll
      for (int n = 0; n < kN; ++n)
#pragma unroll
        for (int m = 0; m < kM; ++m)
#pragma unroll
          for (int j = 0; j < 4; ++j) partial[warp][(n * kM + m) * 4 + j][lane] = acc[n][m][j];
      __syncthreads();
      if (ks == 0)
        for (int other = 1; other < k_splits; ++other)
#pragma unroll
          for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int m = 0; m < kM; ++m)
#pragma unroll
              for (int j = 0; j < 4; ++j) acc[n][m][j] += partial[mt + other * m_tiles][(n * kM + m) * 4 + j][lane];
      __syncthreads();  // partial is reused by the next slot tile
    }
    if (ks == 0) {
      // Accumulator j of tile (n, m): row r + 16 m + (j < 2 ? 0 : 8), slot 8 n + 2 q + (j & 1).
#pragma unroll
      for (int n = 0; n < kN; ++n)
#pragma unroll
        for (int m = 0; m < kM; ++m)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int i = 8 * n + 2 * q + (j & 1);
            const int64_t row = row0 + 16 * m + (j < 2 ? 0 : 8);
            if (i >= count || row >= L.rows) continue;
            const int slot = p.sorted_slots[s0 + i];
            float v = acc[n][m][j];
            if constexpr (codes_of<T>(nullptr) && !kStepScale)
              v = v * scale_at(L, w, row, 0) * in_scale.scale[crow[n][j & 1] * scales_per_row];
            if constexpr (divides_by_global<T>(nullptr)) v = __fdiv_rn(v, w.global_scale);
            p.out[static_cast<int64_t>(slot) * L.rows + row] = v + (w.bias ? w.bias[row] : 0.0f);
          }
    }
  }
  // release_late: the next kernel may launch only once every block got here (or exited). The passes
  // waited already (the grouping lists only chunks with slots, so the loop ran); chain_start()
  // would wait here otherwise.
  if (release_late) chain_start();
}


template <class T, bool kBf16, bool kStepScale, bool kZero, int kN>
cudaError_t launch_shape(const GroupedGemmParams& p, const uint16_t* in16, InputScales in_scale, const MmaLaunch& m,
                         bool release_late, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(m.row_blocks), static_cast<unsigned>(p.max_chunks));
  // Pipelining pays where decoding is long enough to hide a load behind (not for dense weights,
  // which run best at the higher occupancy their load-both-then-decode loop allows).
  constexpr bool kPipelined = T::kElems > 8;
  return launch_chained(grouped_mma_kernel<T, kBf16, kN, kStepScale, kZero, kPipelined>, grid, kWarps * 32, 0, stream, p,
                        in16, in_scale, m.m_tiles, m.k_splits, release_late);
}

template <class T, bool kBf16, bool kStepScale = false, bool kZero = false>
cudaError_t launch_traits(const GroupedGemmParams& p, const uint16_t* in16, InputScales in_scale, int num_slots,
                          cudaStream_t stream) {
  const MmaLaunch m = plan_mma_launch(p.layout, num_slots, p.num_local_experts, p.num_sms,
                                     kStepScale ? MmaScaling::kPerStep : MmaScaling::kOnce);
  const bool late = mma_release_late(num_slots, p.top_k);
  if (m.slots_per_pass == 8) return launch_shape<T, kBf16, kStepScale, kZero, 1>(p, in16, in_scale, m, late, stream);
  if (m.slots_per_pass == 16) return launch_shape<T, kBf16, kStepScale, kZero, 2>(p, in16, in_scale, m, late, stream);
  return launch_shape<T, kBf16, kStepScale, kZero, 4>(p, in16, in_scale, m, late, stream);
}

// Weight-only integer traits with or without zero points.
template <class T, bool kBf16, bool kStepScale = false>
cudaError_t launch_int(const GroupedGemmParams& p, const uint16_t* in16, InputScales in_scale, int num_slots,
                       cudaStream_t stream) {
  return p.layout.has_zero_point ? launch_traits<T, kBf16, kStepScale, true>(p, in16, in_scale, num_slots, stream)
                              : launch_traits<T, kBf16, kStepScale, false>(p, in16, in_scale, num_slots, stream);
}

}  // namespace

cudaError_t launch_grouped_mma(const GroupedGemmParams& p, const uint16_t* in16, InputScales in_scale, bool bf16,
                               int num_slots, cudaStream_t stream) {
  if (in16 == nullptr || p.chunks == nullptr || p.num_chunks == nullptr) return cudaErrorInvalidValue;
  if (p.max_chunks == 0 || p.layout.rows == 0) return cudaSuccess;
  if (p.max_chunks > kMaxGridRows) return cudaErrorInvalidConfiguration;  // (mma_chunk_slots keeps it below)
  const int n = num_slots;
  if (in_scale.scale) {
    if (p.layout.format == kIntUnpacked) return launch_traits<Int8Codes, false>(p, in16, in_scale, n, stream);
    if (p.layout.format == kIntPacked)
      return p.layout.strategy == kGroup ? launch_int<Int4Codes, false, true>(p, in16, in_scale, n, stream)
                                         : launch_int<Int4Codes, false>(p, in16, in_scale, n, stream);
    return p.layout.strategy == kBlock ? launch_traits<Fp8Codes, false, true>(p, in16, in_scale, n, stream)
                                       : launch_traits<Fp8Codes, false>(p, in16, in_scale, n, stream);
  }
  switch (p.layout.format) {
    case kIntPacked:
      if (p.layout.bits == 4)
        return bf16 ? launch_int<Int4<true>, true>(p, in16, in_scale, n, stream)
                    : launch_int<Int4<false>, false>(p, in16, in_scale, n, stream);
      [[fallthrough]];  // 8-bit: signed bytes on the device, as int8 storage
    case kIntUnpacked:
      return bf16 ? launch_int<Int8<true>, true>(p, in16, in_scale, n, stream)
                  : launch_int<Int8<false>, false>(p, in16, in_scale, n, stream);
    case kMxfp4: return launch_traits<Mxfp4, true>(p, in16, in_scale, n, stream);
    case kNvfp4: return launch_traits<Nvfp4, true>(p, in16, in_scale, n, stream);
    default:
      return bf16 ? launch_traits<Dense<true>, true>(p, in16, in_scale, n, stream)
                  : launch_traits<Dense<false>, false>(p, in16, in_scale, n, stream);
  }
}

}  // namespace qmoe::cuda
