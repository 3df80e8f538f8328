// 4-bit (MXFP4, NVFP4 weight-only, INT4 with bf16 scales) grouped GEMM dequantizing in registers
// (cuda/fp4_gemm.h). Persistent CTAs, one per SM, walk tiles of (128 weight rows, N = 32, 64, 128, 192,
// 256 or 320 input rows, expert): a producer thread streams 64-deep k-tiles through shared-memory stages with
// TMA (the bf16 input rows, 128-byte swizzled) and bulk copies (the repacked codes and scales); two
// consumer warpgroups each convert their 64 weight rows' codes to bf16 registers (one k-tile while
// the previous one's MMAs run) and run wgmma m64nNk16 with A from registers. W4A8 with int8 inputs
// (kInt4Int8): 128-deep k-tiles of int8, codes to int8 registers, wgmma m64nNk32 into int32 sums
// over each scale group, promoted to the fp32 accumulators with the rows' group scales.
#include "cuda/fp4_gemm.h"

#include "cuda/activation.cuh"
#include "cuda/convert.cuh"

#include "quant/formats.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>

#include <cstring>
#include <type_traits>
#include <utility>

#include <cute/arch/mma_sm90_gmma.hpp>

namespace qmoe::cuda {
namespace {

constexpr int kTileRows = 128;      // weight rows per tile (two consumer warpgroups of 64)
constexpr int kInputRowBytes = 128;  // per input row and stage: 64 k of bf16 (int8 inputs: 128 k)
constexpr int kThreads = 384;        // producer warpgroup + two consumers

// The input rows of one TMA copy for a tile of n input rows: a box holds at most 256 rows, so
// 320-row stages take two copies of 160 (the kernel's loads and the host's tensor map agree on it).
constexpr int box_rows(int n) { return n > 256 ? n / 2 : n; }

// N: input rows per tile (wgmma's n; 320 as n = 256 and 64). The narrow tiles (32, 64: a few input
// rows per expert) stage few input bytes, so their rings hold more k-tiles of weights in flight
// (kRingStages).
template <int N>
struct TileShape {
  static constexpr int kInputBytes = N * kInputRowBytes;
  static constexpr int kBoxRows = box_rows(N);
};

// A position in the ring of kStages stages: the stage and the parity of its round, advanced one
// k-tile at a time (a k-tile's wait would otherwise start with a division by kStages, 5 or 6: on
// the consumers' critical path at the top of every k-tile).
template <int kStages>
struct RingPosition {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ int previous() const { return stage == 0 ? kStages - 1 : stage - 1; }
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) stage = 0, phase ^= 1;
  }
};

// K-tiles per stage: the bf16 formats' narrow tiles stage four and their 128-row tile two, so that
// a barrier round trip, the release and the ring's step come once per 256 / 128 k (on the narrow
// tiles their per-k-tile overhead was ~40% of a consumer's instructions); the wider tiles, whose
// rings hold 4-5 stages, and the int8 formats one.
template <int N, class Format>
inline constexpr int kStageDepth = Format::kInt8Mma ? 1 : N <= 64 ? 4 : N == 128 ? 2 : 1;
// Stages in the ring: the format's kStages32 of four on the 32-row tile (4 or 5: 16 or 20 k-tiles in
// flight, 14 single stages before), kStages64 of four on the 64-row one (3 or 4: 12 or 16; 11
// before), 4 of two on the 128-row one (8; 6 before): shared memory has room for these, not for as
// many single stages of the int8 formats; single k-tiles elsewhere, 6 stages on 128 (int8) and 192
// rows, 5 on 256, 4 on 320.
template <int N, class Format>
constexpr int ring_stages() {
  if constexpr (kStageDepth<N, Format> == 1) return N == 320 ? 4 : N == 256 ? 5 : 6;
  else if constexpr (N == 32) return Format::kStages32;
  else if constexpr (N == 64) return Format::kStages64;
  else return 4;
}
template <int N, class Format>
inline constexpr int kRingStages = ring_stages<N, Format>();
// Format::kCodeBytes / kWords: a consumer's codes and scale words per k-tile (the format's); a
// stage's k-tiles follow one another as the repacked copy lays them out.
template <int N, class Format>
struct alignas(1024) Stage {
  static constexpr int kDepth = kStageDepth<N, Format>;
  uint8_t inputs[kDepth][TileShape<N>::kInputBytes];  // [k-tile][N input rows][128 bytes], TMA's 128-byte swizzle
  // [k-tile * 2 + consumer][128 threads][kCodeBytes / 512 words]; int8 inputs: [consumer][2 planes][128 threads][4 words]
  uint32_t codes[2 * kDepth][Format::kCodeBytes / 4];
  uint32_t scales[2 * kDepth][Format::kWords];  // [k-tile * 2 + consumer][kWords]: the format's words (fp4_gemm.h)
};
// The staged terms epilogue's tile: [consumer][kRows input rows][64 weight columns] bf16, each
// row's 16-byte chunks XOR-swizzled by the row's low 3 bits (stmatrix writes 8 rows of one chunk at
// a time). 128-row tiles stage all their rows at once; 192- and 256-row ones, whose stages leave
// less room, 64 at a time.
template <int N>
struct TermsTile {
  static constexpr int kRows = N == 128 ? 128 : N < 64 ? N : 64;
  alignas(128) uint16_t rows[2][kRows][64];
};
// One tile as the producer warpgroup's second warp publishes it to the consumers (TileMap's walk),
// with what the consumers would otherwise load at the tile's start, behind a binary search and
// dependent global loads, while the tensor cores wait.
template <int N, bool kRowScales>
struct TileInfo {
  alignas(16) float row_weights[N];  // [input row] the terms epilogue's routing weights (0 past the rows)
  alignas(16) float row_scales[kRowScales ? N : 1];  // [input row] int8 inputs' scales (0 past the rows)
  int expert, input0, weight_tile;   // Tile
  int row0, expert_rows;             // the expert's first sorted row and its row count
};
// Tiles published ahead of the consumers: one in use, the rest prepared during its mainloop.
constexpr int kInfoSlots = 4;
template <int N, class Format>
struct SharedStorage {
  Stage<N, Format> stage[kRingStages<N, Format>];
  uint64_t full[kRingStages<N, Format>], empty[kRingStages<N, Format>];
  uint64_t info_full[kInfoSlots], info_empty[kInfoSlots];
  TermsTile<N> terms;
  TileInfo<N, Format::kInt8Mma> info[kInfoSlots];
};

// ---- PTX wrappers ---------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes));
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  // ("memory": the plain shared-memory stores and loads before it stay before it)
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");  // the stage's shared memory is read after it
}
// Box (x columns, y rows) of `map` into `dst`, completing on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_addr(dst)),
      "l"(map), "r"(x), "r"(y), "r"(smem_addr(bar))
      : "memory");
}
// `bytes` (a multiple of 16) from `src` into `dst`, completing on `bar`.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_one() { asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory"); }
// An opaque use of `a` (wgmma A registers) here: keeps them live until their wgmmas are known complete.
__device__ __forceinline__ void keep_registers(uint32_t (&a)[4][4]) {
#pragma unroll
  for (int step = 0; step < 4; ++step)
#pragma unroll
    for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(a[step][r])::"memory");
}
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ void sts_matrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}
// Barrier `id` (1 + consumer) of one warpgroup's 128 threads.
__device__ __forceinline__ void warpgroup_sync(int id) { asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void stg128(void* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ float2 lds_f32x2(uint32_t addr) {  // addr: 8-byte aligned
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}

// The shared-memory descriptor of a K-major, 128-byte-swizzled operand (bf16 or int8 rows of 128
// bytes, 8-row atoms of 1024 bytes): low word: start address (16-byte units, 14 bits), leading
// offset 1 (unused by the swizzled K-major layout); high word: stride 1024 bytes between 8-row
// groups, swizzle mode 1 (128 B).
constexpr uint32_t kSw128DescHigh = (1024 >> 4) | (1u << 30);
__device__ __forceinline__ uint32_t sw128_desc_low(const void* p) { return ((smem_addr(p) & 0x3FFFF) >> 4) | (1u << 16); }

// D (64 x N fp32, the accumulator fragment) += A (64 x 16 bf16 in registers, a[4]) * B^T (B: N rows x
// 16 columns of bf16 in shared memory, K-major, 128-byte swizzled: `desc`). `accumulate`: 0 for
// D = A * B^T. CuTe's wrapper of `wgmma.mma_async ... m64nNk16.f32.bf16.bf16` with A from registers.
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc, int accumulate) {
  namespace gmma = cute::SM90::GMMA;
  constexpr gmma::Major kK = gmma::Major::K;
  using Mma = std::conditional_t<
      N == 32, gmma::MMA_64x32x16_F32BF16BF16_RS<kK, kK>,
      std::conditional_t<
          N == 64, gmma::MMA_64x64x16_F32BF16BF16_RS<kK, kK>,
          std::conditional_t<N == 128, gmma::MMA_64x128x16_F32BF16BF16_RS<kK, kK>,
                             std::conditional_t<N == 192, gmma::MMA_64x192x16_F32BF16BF16_RS<kK, kK>,
                                                gmma::MMA_64x256x16_F32BF16BF16_RS<kK, kK>>>>>;
  static_assert(N == 32 || N == 64 || N == 128 || N == 192 || N == 256);
  [&]<size_t... I>(std::index_sequence<I...>) {
    Mma::fma(a[0], a[1], a[2], a[3], desc, d[I]..., static_cast<gmma::ScaleOut>(accumulate));
  }(std::make_index_sequence<N / 2>{});
}

// D (64 x N int32) += A (64 x 32 int8 in registers, a[4]) * B^T (B: N rows x 32 int8 columns in shared
// memory, K-major, 128-byte swizzled: `desc`); `accumulate` 0: D = A * B^T. CuTe's wrapper of
// `wgmma.mma_async ... m64nNk32.s32.s8.s8` with A from registers.
template <int N>
__device__ __forceinline__ void wgmma_rs_s8(uint32_t (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc, int accumulate) {
  namespace gmma = cute::SM90::GMMA;
  using Mma = std::conditional_t<N == 64, gmma::MMA_64x64x32_S32S8S8_RS_TN, gmma::MMA_64x128x32_S32S8S8_RS_TN>;
  static_assert(N == 64 || N == 128);
  [&]<size_t... I>(std::index_sequence<I...>) {
    Mma::fma(a[0], a[1], a[2], a[3], desc, d[I]..., static_cast<gmma::ScaleOut>(accumulate));
  }(std::make_index_sequence<N / 2>{});
}
// An int32 `v` with |v| < 2^22 as a float, exactly: its bits added to 1.5 * 2^23's, then 1.5 * 2^23
// subtracted (an integer add and a float add on the pipes the MMAs leave idle, where a conversion
// instruction runs at a quarter of their rate).
__device__ __forceinline__ float small_int_to_float(uint32_t v) {
  return __fsub_rn(__uint_as_float(v + 0x4B400000u), 12582912.0f);
}

// ---- conversion -----------------------------------------------------------------------------------

// What the bf16-input formats share: 64-deep k-tiles (128 bytes of bf16 per input row), 2 KB of
// codes per consumer and k-tile (64 x 64 4-bit codes, 4 words per thread).
struct Bf16Mma {
  static constexpr bool kInt8Mma = false;
  static constexpr int kTileK = 64;
  static constexpr int kCodeBytes = 64 * kTileK / 2;
  // Stages of four k-tiles in the 32- and 64-row tiles' rings (kRingStages).
  static constexpr int kStages32 = 4, kStages64 = 3;
};

__device__ __forceinline__ __nv_bfloat162 as_bf16x2(uint32_t bits) {
  __nv_bfloat162 v;
  memcpy(&v, &bits, sizeof(v));
  return v;
}
__device__ __forceinline__ uint32_t bits_of(__nv_bfloat162 v) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
  return bits;
}
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) { return bits_of(__hmul2_rn(as_bf16x2(a), as_bf16x2(b))); }

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

// A k-tile's registers a[step][r] = bf16(e2m1 * 2^(e - 127)), formats.h's dequant_mxfp4 bit for bit:
// each product is exact but for overflow, so its one rounding matches the CPU's. `sw`: the exponents
// of rows m and m + 8 (a0 / a2 and a1 / a3) for the tile's two groups of 32 columns (steps 0-1, 2-3).
// One branch per k-tile: with every exponent below 128 (scales below 2) one multiply by 2^(e - 1)
// (exponent field e + 126) per register; otherwise 2^126 first, then 2^(e - 127) (code 0: the
// subnormal 2^-127; 255: infinity, as the CPU), the same exact products for exponents below 128.
__device__ __forceinline__ void convert_mxfp4_tile(const uint32_t (&w)[4], uint32_t sw, uint32_t (&a)[4][4]) {
#pragma unroll
  for (int step = 0; step < 4; ++step) unpack_step(w[step], a[step]);
  uint32_t s[4];  // (m, group 0), (m + 8, group 0), (m, group 1), (m + 8, group 1)
  if ((sw & 0x80808080u) == 0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) s[j] = (((sw >> (8 * j)) & 0xFFu) + 126) * 0x00800080u;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t e = (sw >> (8 * j)) & 0xFFu;
      s[j] = (e ? e << 7 : 0x40u) * 0x00010001u;
    }
#pragma unroll
    for (int step = 0; step < 4; ++step)
#pragma unroll
      for (int r = 0; r < 4; ++r) a[step][r] = mul_bf16x2(a[step][r], 0x7E807E80u);
  }
#pragma unroll
  for (int step = 0; step < 4; ++step)
#pragma unroll
    for (int r = 0; r < 4; ++r) a[step][r] = mul_bf16x2(a[step][r], s[(step < 2 ? 0 : 2) + r % 2]);
}

// The scale formats: what a thread loads of a k-tile's scales and how its codes become bf16s.
// MXFP4: e8m0 scales per 32 columns, a word per thread quad (fp4_gemm.h); each weight the CPU's
// dequant_mxfp4.
struct Mxfp4Scales : Bf16Mma {
  static constexpr int kWords = 32;
  // A fifth stage on the 32-row tile (20 k-tiles in flight): layers 0.96-1.00x on MXFP4's 32-row
  // rows, where NVFP4 and INT4 (four times the scale words) ran 0.98-1.03x (bench/runs/2026-12-02_session45).
  // A fourth on the 64-row tile (16 k-tiles; the others' scale words leave no room for it): 0.99x on
  // MXFP4's 64-row rows of Mixtral-8x7B and gpt-oss-120b, DeepSeek-V3's and Qwen3-30B-A3B's 0.97-1.02x.
  static constexpr int kStages32 = 5, kStages64 = 4;
  static constexpr bool kDividesByGlobal = false;
  static constexpr bool kLoopPerWidth = true;
  using Loaded = uint32_t;
  // `tile`: the shared address of the consumer's scale words; t: the thread in the warpgroup.
  static __device__ __forceinline__ Loaded load(uint32_t tile, int t) { return lds32(tile + 4 * (t / 4)); }
  static __device__ __forceinline__ void convert(const uint32_t (&w)[4], Loaded sw, uint32_t (&a)[4][4]) {
    convert_mxfp4_tile(w, sw, a);
  }
};
// NVFP4 as vLLM's weight-only layers scale it: e2m1 * fp8(s) (exactly a bf16) in the GEMM, the sum
// divided by the expert's global scale after it. The scales arrive as bf16(fp8(s) * 2^119), four
// words per thread quad (a k16 step's group of 16 for rows m and m + 8), so one multiply gives
// e2m1 * fp8(s) * 2^-7 exactly (a normal bf16: the 2^-7 keeps fp8's largest scale in range); the
// epilogue divides by global * 2^-7.
struct Nvfp4Scales : Bf16Mma {
  static constexpr int kWords = 128;
  static constexpr bool kDividesByGlobal = true;
  static constexpr bool kLoopPerWidth = false;
  using Loaded = uint4;
  static __device__ __forceinline__ Loaded load(uint32_t tile, int t) { return lds128(tile + 16 * (t / 4)); }
  static __device__ __forceinline__ void convert(const uint32_t (&w)[4], Loaded sw, uint32_t (&a)[4][4]) {
    const uint32_t s[4] = {sw.x, sw.y, sw.z, sw.w};
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      unpack_step(w[step], a[step]);
      // (Each half broadcast by the multiply's operand selector, not by a PRMT.)
      const __nv_bfloat162 s2 = as_bf16x2(s[step]), s_m = __low2bfloat162(s2), s_m8 = __high2bfloat162(s2);
#pragma unroll
      for (int r = 0; r < 4; ++r) a[step][r] = bits_of(__hmul2_rn(as_bf16x2(a[step][r]), r % 2 == 0 ? s_m : s_m8));
    }
  }
};

// INT4 with bf16 scales: each register's two codes as bf16 128 + u (u = q + 8: or-ing the nibble
// into 128.0's mantissa), minus 136 + z (exact: q - z), times the scale (one rounding, as the CPU's).
// Per thread quad four words of scales, one per k16 step (rows m and m + 8), or with kWide (groups
// of a multiple of 64; taken with zero points only, int4_format) one for the k-tile; with zero
// points as many words of offsets 136 + z follow.
template <bool kZeroPoints, bool kWide = false>
struct Int4Scales : Bf16Mma {
  static constexpr int kScaleWords = kWide ? 32 : 128;  // a consumer's scale words per k-tile
  static constexpr int kWords = kZeroPoints ? 2 * kScaleWords : kScaleWords;
  static constexpr bool kDividesByGlobal = false;
  static constexpr bool kLoopPerWidth = false;
  using Words = std::conditional_t<kWide, uint32_t, uint4>;
  struct Loaded {
    Words scales, offsets;
  };
  static __device__ __forceinline__ Words load_words(uint32_t address) {
    if constexpr (kWide) return lds32(address);
    else return lds128(address);
  }
  static __device__ __forceinline__ Loaded load(uint32_t tile, int t) {
    constexpr int kQuadBytes = kWide ? 4 : 16;
    Loaded l{};
    l.scales = load_words(tile + kQuadBytes * (t / 4));
    if constexpr (kZeroPoints) l.offsets = load_words(tile + 4 * kScaleWords + kQuadBytes * (t / 4));
    return l;
  }
  static __device__ __forceinline__ uint32_t word(const Words& w, int step) {
    if constexpr (kWide) return w;
    else return step == 0 ? w.x : step == 1 ? w.y : step == 2 ? w.z : w.w;
  }
  static __device__ __forceinline__ void convert(const uint32_t (&w)[4], Loaded l, uint32_t (&a)[4][4]) {
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      // (Each half broadcast by the multiply's and subtraction's operand selectors, not by PRMTs.)
      const __nv_bfloat162 s2 = as_bf16x2(word(l.scales, step)), s_m = __low2bfloat162(s2),
                           s_m8 = __high2bfloat162(s2);
      const __nv_bfloat162 o2 = as_bf16x2(kZeroPoints ? word(l.offsets, step) : 0x43084308u);  // (bf16 136)
      const __nv_bfloat162 o_m = __low2bfloat162(o2), o_m8 = __high2bfloat162(o2);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const uint32_t v = lop3_and_xor(w[step] >> (4 * r), 0x000F000Fu, 0x43004300u);
        const __nv_bfloat162 q = __hsub2_rn(as_bf16x2(v), r % 2 == 0 ? o_m : o_m8);
        a[step][r] = bits_of(__hmul2_rn(q, r % 2 == 0 ? s_m : s_m8));
      }
    }
  }
};

// W4A8 with int8 inputs (kInt4Int8, kInt4Int8F32): 128-deep k-tiles of int8 (128 bytes per input
// row), 4 KB of codes per consumer and k-tile (8 words per thread in two planes: fp4_gemm.h), the scales of rows m
// and m + 8 for the k-tile's columns per thread quad (a group holds whole k-tiles): one word of bf16
// pairs, or two fp32 words (kF32Scales). Each code arrives as the int8 16 q, so a register is one mask
// (and a shift) of its word, and the promotion multiplies by scale / 16 (exact for normal scales).
template <bool kF32Scales>
struct Int4Int8Scales {
  static constexpr bool kInt8Mma = true;
  static constexpr int kTileK = 128;
  static constexpr int kCodeBytes = 64 * kTileK / 2;
  static constexpr int kWords = kF32Scales ? 64 : 32;
  static constexpr bool kDividesByGlobal = false;
  static constexpr bool kLoopPerWidth = false;
  using Loaded = std::conditional_t<kF32Scales, float2, uint32_t>;
  static __device__ __forceinline__ Loaded load(uint32_t tile, int t) {
    if constexpr (kF32Scales) return lds_f32x2(tile + 8 * (t / 4));
    else return lds32(tile + 4 * (t / 4));
  }
  // Registers a[step][r] of the four k32 steps from the thread's eight code words.
  static __device__ __forceinline__ void convert(const uint32_t (&w)[8], uint32_t (&a)[4][4]) {
    constexpr uint32_t kHigh = 0xF0F0F0F0u;
#pragma unroll
    for (int step = 0; step < 4; ++step)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        a[step][2 * h] = w[2 * step + h] & kHigh;
        a[step][2 * h + 1] = (w[2 * step + h] << 4) & kHigh;
      }
  }
  // The scales of rows m and m + 8 over 16 (the codes' factor), as floats.
  static __device__ __forceinline__ float2 row_scales(Loaded sw) {
    if constexpr (kF32Scales) return make_float2(sw.x * 0.0625f, sw.y * 0.0625f);
    else return make_float2(__uint_as_float(sw << 16) * 0.0625f, __uint_as_float(sw & 0xFFFF0000u) * 0.0625f);
  }
};

// ---- kernels --------------------------------------------------------------------------------------

// One repack thread's place: the block's tile's slot in the repacked buffers (the block is tile
// rt * col_tiles + kt: row tile rt, column tile kt of 64 x 64; its slot puts the two row tiles of a
// 128-row pair side by side, fp4_gemm.h), the thread's first row m and its index t in the
// warpgroup (fp4_gemm.h's order).
struct RepackThread {
  int64_t tile, kt, m;
  int t;
};
__device__ __forceinline__ RepackThread repack_thread(int64_t cols) {
  const int64_t col_tiles = cols / 64, rt = blockIdx.x / col_tiles, kt = blockIdx.x % col_tiles;
  const int t = threadIdx.x;
  return {(rt / 2 * col_tiles + kt) * 2 + rt % 2, kt, rt * 64 + 16 * (t / 32) + t % 32 / 4, t};
}
// The source row of fragment row f (-1: padding, zero weights): f itself up to `rows`, or with
// gate_up_inter > 0 its row of the interleaved w13 (fp4_gemm.h).
__device__ __forceinline__ int64_t repack_source_row(int64_t f, int64_t rows, int64_t gate_up_inter) {
  return gate_up_inter > 0 ? gate_up_source_row(f, gate_up_inter) : f < rows ? f : -1;
}

// A thread's e2m1 code word of k16 step `step` in column tile kt, the rows' codes [rows, cols / 2]
// bytes (the even column in the low nibble) placed as fp4_gemm.h says: src[0] and src[1] are the
// source rows of the thread's fragment rows m and m + 8 (-1: code 0), t its index in the warpgroup.
__device__ __forceinline__ uint32_t e2m1_fragment_word(const uint8_t* codes, int64_t cols, const int64_t (&src)[2],
                                                       int64_t kt, int step, int t) {
  const int64_t k = kt * 64 + 16 * step + 2 * (t % 4);
  uint32_t word = 0;
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t row = src[r % 2], col = k + 8 * (r / 2) + j;
      const uint32_t c = row >= 0 ? (codes[row * (cols / 2) + col / 2] >> (4 * (col & 1))) & 0xFu : 0u;
      word |= (c & 7u) << (16 * j + magnitude_bit(r)) | (c >> 3) << (16 * j + sign_bit(r));
    }
  return word;
}

// One thread per (row tile, column tile, warpgroup thread) of the fragment order (fp4_gemm.h).
__global__ void repack_mxfp4_kernel(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                                    int64_t gate_up_inter, uint32_t* frag_codes, uint32_t* frag_scales) {
  const auto [tile, kt, m, t] = repack_thread(cols);
  const int64_t src[2] = {repack_source_row(m, rows, gate_up_inter), repack_source_row(m + 8, rows, gate_up_inter)};
  // (Padding rows are code 0 with scale 2^0.)
  auto scale = [&](int half, int64_t g) -> uint32_t { return src[half] >= 0 ? scales[src[half] * (cols / 32) + g] : 127u; };
#pragma unroll
  for (int step = 0; step < 4; ++step)
    frag_codes[(tile * 128 + t) * 4 + step] = e2m1_fragment_word(codes, cols, src, kt, step, t);
  const int64_t g = kt * 2;
  if (t % 4 == 0)  // (threads 4i .. 4i + 3 share rows m and m + 8)
    frag_scales[tile * 32 + t / 4] = scale(0, g) | scale(1, g) << 8 | scale(0, g + 1) << 16 | scale(1, g + 1) << 24;
}

// As repack_mxfp4_kernel, for NVFP4's fp8 e4m3 scales per 16 columns (fp4_gemm.h).
__global__ void repack_nvfp4_kernel(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                                    int64_t gate_up_inter, uint32_t* frag_codes, uint32_t* frag_scales) {
  const auto [tile, kt, m, t] = repack_thread(cols);
  const int64_t src[2] = {repack_source_row(m, rows, gate_up_inter), repack_source_row(m + 8, rows, gate_up_inter)};
  // bf16(fp8(s) * 2^119), exact (fp8's subnormals become normal bf16s; NaN stays NaN); padding 0.
  auto scale = [&](int half, int64_t g) -> uint32_t {
    if (src[half] < 0) return 0u;
    const float v = ldexpf(quant::fp8e4m3_to_float(scales[src[half] * (cols / 16) + g]), 119);
    return __float_as_uint(v) >> 16;
  };
#pragma unroll
  for (int step = 0; step < 4; ++step) {
    frag_codes[(tile * 128 + t) * 4 + step] = e2m1_fragment_word(codes, cols, src, kt, step, t);
    if (t % 4 == 0) {
      const int64_t g = kt * 4 + step;
      frag_scales[(tile * 32 + t / 4) * 4 + step] = scale(0, g) | scale(1, g) << 16;
    }
  }
}

// As repack_mxfp4_kernel, for INT4 (fp4_gemm.h).
__global__ void repack_int4_kernel(const int32_t* codes, const uint16_t* scales, const int8_t* zero_points,
                                   int64_t rows, int64_t cols, int64_t group, bool wide, int64_t gate_up_inter,
                                   uint32_t* frag_codes, uint32_t* frag_scales) {
  const auto [tile, kt, m, t] = repack_thread(cols);
  const int64_t groups = cols / group;
  const int64_t src[2] = {repack_source_row(m, rows, gate_up_inter), repack_source_row(m + 8, rows, gate_up_inter)};
  // u = q + 8 of the signed nibble (padding: q = 0).
  auto code = [&](int half, int64_t col) -> uint32_t {
    if (src[half] < 0) return 8u;
    return ((static_cast<uint32_t>(codes[src[half] * (cols / 8) + col / 8]) >> (4 * (col % 8))) & 0xFu) ^ 8u;
  };
  auto scale = [&](int half, int64_t g) -> uint32_t { return src[half] >= 0 ? scales[src[half] * groups + g] : 0u; };
  auto offset = [&](int half, int64_t g) -> uint32_t {  // bf16(136 + z), exact for z in [-8, 7]
    const int z = src[half] >= 0 ? zero_points[src[half] * groups + g] : 0;
    return __float_as_uint(static_cast<float>(136 + z)) >> 16;
  };
#pragma unroll
  for (int step = 0; step < 4; ++step) {
    const int64_t k = kt * 64 + 16 * step + 2 * (t % 4);
    uint32_t word = 0;
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int j = 0; j < 2; ++j) word |= code(r % 2, k + 8 * (r / 2) + j) << (16 * j + 4 * r);
    frag_codes[(tile * 128 + t) * 4 + step] = word;
    if (t % 4 == 0 && (!wide || step == 0)) {
      // (A tile's scale words, then its offsets: 128 of each a tile, or 32 with `wide`.)
      const int64_t g = (kt * 64 + 16 * step) / group, words = wide ? 32 : 128;
      const int64_t at = tile * (zero_points ? 2 * words : words) + (wide ? t / 4 : (t / 4) * 4 + step);
      frag_scales[at] = scale(0, g) | scale(1, g) << 16;
      if (zero_points) frag_scales[at + words] = offset(0, g) | offset(1, g) << 16;
    }
  }
}

// As repack_int4_kernel, for int8 inputs (kInt4Int8, kInt4Int8F32: `scales` bf16 or fp32, fp4_gemm.h):
// 64 x 128 tiles (the grid's column tiles kt of 128), each code's nibble (q's two's complement) placed
// whole in a byte.
template <class Scale>
__global__ void repack_int4_int8_kernel(const int32_t* codes, const Scale* scales, int64_t rows, int64_t cols,
                                        int64_t group, int64_t gate_up_inter, uint32_t* frag_codes,
                                        uint32_t* frag_scales) {
  const int64_t col_tiles = cols / 128, tile = blockIdx.x, kt = tile % col_tiles;
  const int t = threadIdx.x;
  const int64_t m = tile / col_tiles * 64 + 16 * (t / 32) + t % 32 / 4;
  const int64_t groups = cols / group;
  const int64_t src[2] = {repack_source_row(m, rows, gate_up_inter), repack_source_row(m + 8, rows, gate_up_inter)};
  auto nibble = [&](int half, int64_t col) -> uint32_t {  // padding: q = 0
    return src[half] < 0 ? 0u : (static_cast<uint32_t>(codes[src[half] * (cols / 8) + col / 8]) >> (4 * (col % 8))) & 0xFu;
  };
#pragma unroll
  for (int step = 0; step < 4; ++step)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t col = kt * 128 + 32 * step + 16 * h + 4 * (t % 4) + j;
        word |= nibble(0, col) << (8 * j + 4) | nibble(1, col) << (8 * j);
      }
      const int w = 2 * step + h;  // (planes of 4 words per thread: fp4_gemm.h)
      frag_codes[tile * 1024 + (w / 4) * 512 + t * 4 + w % 4] = word;
    }
  if (t % 4 == 0) {  // (padding rows: scale 0)
    const int64_t g = kt * 128 / group;
    auto scale = [&](int half) -> Scale { return src[half] >= 0 ? scales[src[half] * groups + g] : Scale{0}; };
    if constexpr (std::is_same_v<Scale, float>) {
      frag_scales[(tile * 32 + t / 4) * 2] = __float_as_uint(scale(0));
      frag_scales[(tile * 32 + t / 4) * 2 + 1] = __float_as_uint(scale(1));
    } else {
      frag_scales[tile * 32 + t / 4] = scale(0) | static_cast<uint32_t>(scale(1)) << 16;
    }
  }
}

// The rows of expert e the kernel multiplies (Fp4GemmParams::expert_rows).
__device__ __forceinline__ int rows_of(const Fp4GemmParams& p, int e) {
  return p.expert_rows ? p.expert_rows[e] : p.expert_offsets[e + 1] - p.expert_offsets[e];
}

// The CTA's tiles, in order: tile i = blockIdx.x + i * gridDim.x of (input tile, weight tile) pairs,
// weight tiles fastest (the SMs at work share an expert's input rows and stream its weights). Input
// tiles: each expert's rows (rows_of) in blocks of N, experts in order.
struct TileMap {
  const int32_t* input_tiles_before;  // [experts + 1] (shared memory)
  int experts, weight_tiles, total_tiles;
};
struct Tile {
  int expert, input0, weight_tile;  // input0: the first input row within the expert
};
__device__ __forceinline__ Tile tile_at(const TileMap& map, int index, int n_tile) {
  const int input_tile = index / map.weight_tiles;
  int lo = 0, hi = map.experts;  // the last expert whose tiles start at or before input_tile
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (map.input_tiles_before[mid] <= input_tile) lo = mid;
    else hi = mid;
  }
  return {lo, (input_tile - map.input_tiles_before[lo]) * n_tile, index % map.weight_tiles};
}

// Persistent: one CTA per SM walks its tiles (TileMap); the producer thread streams k-tiles through
// the stages across tile boundaries, so the next tile's loads overlap this one's epilogue, and the
// producer warpgroup's second warp publishes each tile (TileInfo) ahead of the consumers. (With a
// short reduction, 4 k-tiles on the TP8 shapes' GEMM2, the consumers' own tile search and loads
// were ~15% of GEMM2's warp samples, every warp stalled at once; ncu, 2026-12-01.) An
// expert's last tile multiplies only the input rows it needs (routing leaves many experts a few rows
// past a multiple of N), in one of two forms (Format::kLoopPerWidth):
// - MXFP4: a k-loop per width, N and N / 2 (64 for N = 192: wgmma_rs has no n of 96, which CuTe
//   has, untried; a third, N / 4 wide, makes ptxas serialize the wgmmas for want of registers). Measured ~3% faster on Mixtral
//   than the other form (same call, H200). Not on 320-row tiles, where ptxas serialized the two
//   loops' wgmmas for want of registers (C7512): they take the other form.
// - NVFP4, INT4: one k-loop whose k-tiles branch to their width's four wgmmas, widths 64 to N in
//   steps of 64 (with a loop per width ptxas serializes these formats' wgmmas, C7513; a branch per
//   wgmma would too).
// Every consumer thread releases a stage itself: with one arrive per warp, compute-sanitizer's
// racecheck reports the codes' reads. kFusedAct: the epilogue applies the activation (act_rows);
// a separate instance, so that launches without it run the kernel without its code (the unrolled
// activation makes the kernel ~4x larger).
template <int N, class Format, bool kFusedAct>
__global__ void __launch_bounds__(kThreads, 1)
    fp4_grouped_gemm_kernel(const __grid_constant__ CUtensorMap x_map, Fp4GemmParams p) {
  using Shape = TileShape<N>;
  using Storage = SharedStorage<N, Format>;
  constexpr int kScaleBytes = Format::kWords * 4;
  constexpr int kTileK = Format::kTileK, kCodeBytes = Format::kCodeBytes;
  constexpr int kStages = kRingStages<N, Format>, kDepth = kStageDepth<N, Format>;
  // 64 x N fp32 accumulators take N / 2 registers: from 192 the producer warpgroup hands its own over
  // (at 192 without it, ptxas spilled 430-880 bytes per thread in the fused activation's epilogue).
  constexpr bool kMoveRegisters = N >= 192;
  // MXFP4's k-loop per width (above) up to 256-row tiles; its narrow k-loop: half the tile (64 for
  // 192-row tiles: wgmma_rs has no n of 96).
  constexpr bool kLoopPerWidth = Format::kLoopPerWidth && N >= 128 && N <= 256;
  constexpr int kNarrow = N == 192 ? 64 : N / 2;
  extern __shared__ uint8_t smem_raw[];
  Storage& s = *reinterpret_cast<Storage*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  int32_t* tiles_before = reinterpret_cast<int32_t*>(&s + 1);  // [experts + 1]
  // Input tiles before each expert: a warp-wide scan of per-lane runs of experts.
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, per_lane = (p.experts + 31) / 32;
    const int e0 = min(lane * per_lane, p.experts), e1 = min(e0 + per_lane, p.experts);
    int run = 0;
    for (int e = e0; e < e1; ++e) run += (rows_of(p, e) + N - 1) / N;
    int before = run;  // inclusive scan over lanes
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int v = __shfl_up_sync(0xFFFFFFFFu, before, d);
      if (lane >= d) before += v;
    }
    before -= run;
    for (int e = e0; e < e1; ++e) {
      tiles_before[e] = before;
      before += (rows_of(p, e) + N - 1) / N;
    }
    if (lane == 31) tiles_before[p.experts] = before;
  }
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&s.full[i], 1);
      mbar_init(&s.empty[i], 256);  // every consumer thread
    }
    for (int i = 0; i < kInfoSlots; ++i) {
      mbar_init(&s.info_full[i], 32);    // every lane of the publishing warp
      mbar_init(&s.info_empty[i], 256);  // every consumer thread
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int weight_tiles = (p.n + kTileRows - 1) / kTileRows;
  const TileMap map{tiles_before, p.experts, weight_tiles, tiles_before[p.experts] * weight_tiles};
  const int k_tiles = p.k / kTileK;
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {  // producer: one thread issues every copy
    if constexpr (kMoveRegisters) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      RingPosition<kStages> ring;  // the next k-tile's stage
      for (int index = blockIdx.x; index < map.total_tiles; index += gridDim.x) {
        const Tile tile = tile_at(map, index, N);
        const uint32_t* codes = p.frag_codes[tile.expert];
        const uint32_t* scales = p.frag_scales[tile.expert];
        const int input_row = p.expert_offsets[tile.expert] + tile.input0;
        for (int kt = 0; kt < k_tiles; kt += kDepth, ring.advance()) {
          const int i = ring.stage;
          const int depth = kDepth == 1 ? 1 : min(kDepth, k_tiles - kt);  // (the last stage: what is left)
          mbar_wait(&s.empty[i], ring.phase ^ 1);
          mbar_expect_tx(&s.full[i], depth * (Shape::kInputBytes + 2 * kCodeBytes + 2 * kScaleBytes));
          for (int sub = 0; sub < depth; ++sub) {
#pragma unroll
            for (int box = 0; box < N / Shape::kBoxRows; ++box)
              tma_load_2d(s.stage[i].inputs[sub] + box * Shape::kBoxRows * kInputRowBytes, &x_map,
                          (kt + sub) * kTileK, input_row + box * Shape::kBoxRows, &s.full[i]);
          }
          if constexpr (Format::kInt8Mma) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int64_t code_tile = static_cast<int64_t>(tile.weight_tile * 2 + half) * k_tiles + kt;
              bulk_load(s.stage[i].codes[half], codes + code_tile * (kCodeBytes / 4), kCodeBytes, &s.full[i]);
              bulk_load(s.stage[i].scales[half], scales + code_tile * Format::kWords, kScaleBytes, &s.full[i]);
            }
          } else {  // (the stage's k-tiles, both consumers' side by side: one copy each of codes and scales)
            const int64_t pair = (static_cast<int64_t>(tile.weight_tile) * k_tiles + kt) * 2;
            bulk_load(s.stage[i].codes[0], codes + pair * (kCodeBytes / 4), depth * 2 * kCodeBytes, &s.full[i]);
            bulk_load(s.stage[i].scales[0], scales + pair * Format::kWords, depth * 2 * kScaleBytes, &s.full[i]);
          }
        }
      }
    } else if (threadIdx.x / 32 == 1) {  // publishes the tiles, kInfoSlots ahead at most
      const int lane = threadIdx.x % 32;
      int published = 0;  // tiles published so far (slot published % kInfoSlots)
      for (int index = blockIdx.x; index < map.total_tiles; index += gridDim.x, ++published) {
        const int slot = published % kInfoSlots;
        mbar_wait(&s.info_empty[slot], ((published / kInfoSlots) & 1) ^ 1);
        const Tile tile = tile_at(map, index, N);
        const int row0 = p.expert_offsets[tile.expert], expert_rows = rows_of(p, tile.expert);
        const int rows_left = expert_rows - tile.input0;
        TileInfo<N, Format::kInt8Mma>& info = s.info[slot];
        if constexpr (Format::kInt8Mma) {
#pragma unroll
          for (int c = lane; c < N; c += 32)
            info.row_scales[c] = c >= rows_left ? 0.0f : p.x_scale[static_cast<int64_t>(row0) + tile.input0 + c];
        }
        if (p.terms != nullptr) {
#pragma unroll
          for (int c = lane; c < N; c += 32)
            info.row_weights[c] = c >= rows_left ? 0.0f
                                  : p.slot_weights != nullptr
                                      ? p.slot_weights[p.row_slots[static_cast<int64_t>(row0) + tile.input0 + c]]
                                      : 1.0f;
        }
        if (lane == 0) {
          info.expert = tile.expert, info.input0 = tile.input0, info.weight_tile = tile.weight_tile;
          info.row0 = row0, info.expert_rows = expert_rows;
        }
        mbar_arrive(&s.info_full[slot]);
      }
    }
    return;
  }
  if constexpr (kMoveRegisters) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int consumer = warpgroup - 1, t = threadIdx.x % 128;
  float acc[N / 2];
  RingPosition<kStages> ring;  // the next k-tile's stage, as the producer walks them
  // The wgmma descriptor of stage `stage`'s input rows of its k-tile `sub`, from `step` 32-byte
  // steps in: stage 0's low word plus the offset in its 16-byte address units (shared addresses
  // stay below 2^18, so the sum never carries out of the 14-bit start-address field), instead of
  // masking and shifting every address in the k-loop.
  const uint32_t input_desc_low = sw128_desc_low(s.stage[0].inputs[0]);
  auto input_desc = [&](int stage, int step, int sub = 0) {
    constexpr uint32_t kStageUnits = sizeof(Stage<N, Format>) / 16, kSubUnits = Shape::kInputBytes / 16;
    return uint64_t{kSw128DescHigh} << 32 | (input_desc_low + stage * kStageUnits + sub * kSubUnits + 2 * step);
  };
  // One tile's k-loop on its first `fixed` input rows, or (fixed = 0) on its first 64 * quarters,
  // chosen per k-tile (acc's first W / 2 registers for W rows: wgmma's fragment of n = W is the first
  // part of n = N's).
  auto mainloop = [&](auto fixed, int quarters) {
    // A k-tile's four wgmmas (and their commit).
    auto mma = [&](const uint32_t (&a)[4][4], int stage, int sub, bool first) {
      // W input rows; past 256 (a 320-row tile) a second wgmma of W - 256 on the rows from 256
      // (acc's registers from 128; its descriptor 256 rows, 2048 16-byte units, further).
      auto on = [&](auto width) {
        constexpr int W = decltype(width)::value, W0 = W > 256 ? 256 : W, W1 = W - W0;
        float (&acc0)[W0 / 2] = *reinterpret_cast<float (*)[W0 / 2]>(acc);
        wgmma_fence();
#pragma unroll
        for (int step = 0; step < 4; ++step) {
          wgmma_rs<W0>(acc0, a[step], input_desc(stage, step, sub), !first || step > 0);
          if constexpr (W1 > 0) {
            float (&acc1)[W1 / 2] = *reinterpret_cast<float (*)[W1 / 2]>(acc + W0 / 2);
            wgmma_rs<W1>(acc1, a[step], input_desc(stage, step, sub) + 2048, !first || step > 0);
          }
        }
        wgmma_commit();
      };
      if constexpr (decltype(fixed)::value != 0) {
        on(fixed);
      } else if constexpr (N == 320) {
        if (quarters == 5) on(std::integral_constant<int, 320>{});
        else if (quarters == 4) on(std::integral_constant<int, 256>{});
        else if (quarters == 3) on(std::integral_constant<int, 192>{});
        else if (quarters == 2) on(std::integral_constant<int, 128>{});
        else on(std::integral_constant<int, 64>{});
      } else if constexpr (N == 256) {
        if (quarters == 4) on(std::integral_constant<int, 256>{});
        else if (quarters == 3) on(std::integral_constant<int, 192>{});
        else if (quarters == 2) on(std::integral_constant<int, 128>{});
        else on(std::integral_constant<int, 64>{});
      } else if constexpr (N == 192) {
        if (quarters == 3) on(std::integral_constant<int, 192>{});
        else if (quarters == 2) on(std::integral_constant<int, 128>{});
        else on(std::integral_constant<int, 64>{});
      } else if constexpr (N == 128) {
        if (quarters >= 2) on(std::integral_constant<int, 128>{});
        else on(std::integral_constant<int, 64>{});
      } else {
        on(std::integral_constant<int, N>{});  // (the narrow tiles: one width)
      }
    };
    // One k-tile, the stage's k-tile `sub`: convert its codes into `a` while the previous k-tile's
    // MMAs run (their registers are `previous`), issue its MMAs, then wait until at most these are
    // in flight and release the previous k-tile's registers. A stage's first k-tile waits for it and
    // releases the previous stage (its last MMAs are done then); its last one moves the ring on.
    auto mma_tile = [&](int kt, uint32_t (&a)[4][4], uint32_t (&previous)[4][4], auto sub) {
      if constexpr (!Format::kInt8Mma) {  // (compiled for every format; the int8 ones run mainloop_int8)
        constexpr int kSub = decltype(sub)::value;
        const int i = ring.stage;
        if constexpr (kSub == 0) mbar_wait(&s.full[i], ring.phase);
        const uint4 words = lds128(smem_addr(&s.stage[i].codes[2 * kSub + consumer][4 * t]));
        const typename Format::Loaded sw = Format::load(smem_addr(&s.stage[i].scales[2 * kSub + consumer][0]), t);
        const uint32_t w[4] = {words.x, words.y, words.z, words.w};
        Format::convert(w, sw, a);
        __syncwarp();  // the MXFP4 conversion branches per thread; the .aligned wgmma instructions need the warp whole
        mma(a, i, kSub, kt == 0);
        wgmma_wait_one();
        keep_registers(previous);
        if constexpr (kSub == 0)
          if (kt > 0) mbar_arrive(&s.empty[ring.previous()]);
        if constexpr (kSub == kDepth - 1) ring.advance();
      }
    };
    constexpr std::integral_constant<int, 0> kFirst{};
    constexpr std::integral_constant<int, kDepth - 1> kLast{};
    uint32_t a_even[4][4], a_odd[4][4];  // alternate k-tiles' registers (static indices: unrolled by 2)
    // An odd count's last k-tile must not run under `kt + 1 < k_tiles` inside the loop: ptxas then
    // sees a path from its skip to the back edge that converts into a_even while a_even's MMAs run,
    // and serializes every wgmma of the instance (C7513). The narrow tiles take it after the loop;
    // the wider ones leave the loop by a `break` (a copy after the loop costs them registers, C7512).
    // (The `break` form on the narrow tiles measured 1-4% slower for INT4.)
    // (The 128-row tile's pair is a stage, an odd count's last stage one k-tile; the narrow tiles'
    // four are a stage, the last one holding the 1-3 k-tiles left.)
    if constexpr (N <= 64) {  // (four-deep stages: a stage per iteration, a short last one after it)
      static_assert(kDepth == 4);
      constexpr std::integral_constant<int, 1> kSecond{};
      constexpr std::integral_constant<int, 2> kThird{};
      int kt = 0;
      for (; kt + 3 < k_tiles; kt += 4) {
        mma_tile(kt, a_even, a_odd, kFirst);
        mma_tile(kt + 1, a_odd, a_even, kSecond);
        mma_tile(kt + 2, a_even, a_odd, kThird);
        mma_tile(kt + 3, a_odd, a_even, kLast);
      }
      if (kt < k_tiles) {
        mma_tile(kt, a_even, a_odd, kFirst);
        if (kt + 1 < k_tiles) {
          mma_tile(kt + 1, a_odd, a_even, kSecond);
          if (kt + 2 < k_tiles) mma_tile(kt + 2, a_even, a_odd, kThird);
        }
        ring.advance();
      }
    } else {
      for (int kt = 0; kt < k_tiles; kt += 2) {
        mma_tile(kt, a_even, a_odd, kFirst);
        if (kt + 1 == k_tiles) {
          if constexpr (kDepth == 2) ring.advance();
          break;
        }
        mma_tile(kt + 1, a_odd, a_even, kLast);
      }
    }
    wgmma_wait_all();
    keep_registers(a_even);
    keep_registers(a_odd);
    mbar_arrive(&s.empty[ring.previous()]);
  };
  // The int8 formats' k-loop on the tile's first 64 * quarters input rows (N = 128: 64 or 128): per
  // k-tile, its codes to int8 registers and four wgmmas into the int32 sums `part`, which run over a
  // whole scale group (`group_tiles` k-tiles: exact, |part| <= group * 128 * 128 <= 2^30 for groups
  // up to kMaxInt8ScaleGroup, codes 16 q in [-128, 112], inputs in [-128, 127]); once a group's last MMAs
  // are done, acc += part * the rows' scale / 16. The other consumer warpgroup's MMAs run while this
  // one converts and promotes.
  // (Generic lambdas with the body under `if constexpr`: they are compiled for every format, and the
  // bf16 formats run `mainloop`.)
  const int group_tiles = p.scale_group / kTileK;
  auto mainloop_int8 = [&](auto quarters) {
    // `spans`: groups of more than one k-tile (a loop of its own, so that the common groups of one
    // k-tile run a straight k-loop: with both in one, extra branches per k-tile cost 4-12%).
    auto k_loop = [&](auto width, auto spans) {
      if constexpr (Format::kInt8Mma) {
        constexpr int W = decltype(width)::value;
        uint32_t part[W / 2];
#pragma unroll
        for (int v = 0; v < W / 2; ++v) part[v] = 0;
#pragma unroll
        for (int v = 0; v < N / 2; ++v) acc[v] = 0.0f;
        // One k-tile's MMAs into `part`, overwriting it at a group's first (`first`: known at compile
        // time, so that part is dead between a group's promotion and the next group's MMAs, and the
        // promotion works in place); returns the rows' scales of its stage.
        auto k_tile = [&](auto first) {
          const int i = ring.stage;
          mbar_wait(&s.full[i], ring.phase);
          // (two planes of 16 bytes per thread: each warp's load reads 512 contiguous bytes)
          const uint32_t code_words = smem_addr(&s.stage[i].codes[consumer][4 * t]);
          const uint4 lo = lds128(code_words), hi = lds128(code_words + 2048);
          const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
          const float2 scale = Format::row_scales(Format::load(smem_addr(&s.stage[i].scales[consumer][0]), t));
          uint32_t a[4][4];
          Format::convert(w, a);
          wgmma_fence();
#pragma unroll
          for (int step = 0; step < 4; ++step)
            wgmma_rs_s8<W>(part, a[step], input_desc(i, step), step > 0 || !decltype(first)::value);
          wgmma_commit();
          wgmma_wait_all();
          keep_registers(a);
          mbar_arrive(&s.empty[i]);
          ring.advance();
          return scale;
        };
        if constexpr (!decltype(spans)::value) {
          for (int kt = 0; kt < k_tiles; ++kt) {
            const float2 scale = k_tile(std::true_type{});
            // |part| <= 2^21: exactly a float by an integer and a float add
#pragma unroll
            for (int v = 0; v < W / 2; ++v)
              acc[v] = __fmaf_rn(small_int_to_float(part[v]), v % 4 < 2 ? scale.x : scale.y, acc[v]);
          }
        } else {
          for (int kt = 0; kt < k_tiles; kt += group_tiles) {
            float2 scale = k_tile(std::true_type{});
            for (int j = 1; j < group_tiles; ++j) scale = k_tile(std::false_type{});
            // (rounded to fp32 past 2^24; a conversion once per group)
#pragma unroll
            for (int v = 0; v < W / 2; ++v)
              acc[v] = __fmaf_rn(__int2float_rn(static_cast<int>(part[v])), v % 4 < 2 ? scale.x : scale.y, acc[v]);
          }
        }
      }
    };
    auto widths = [&](auto spans) {
      if (quarters >= 2) k_loop(std::integral_constant<int, N>{}, spans);
      else k_loop(std::integral_constant<int, 64>{}, spans);
    };
    if (group_tiles == 1) widths(std::false_type{});
    else widths(std::true_type{});
  };
  int taken = 0;  // tiles taken so far (TileInfo slot taken % kInfoSlots)
  for (int index = blockIdx.x; index < map.total_tiles; index += gridDim.x, ++taken) {
    if (taken > 0) mbar_arrive(&s.info_empty[(taken - 1) % kInfoSlots]);  // the previous tile's epilogue is done
    const TileInfo<N, Format::kInt8Mma>& info = s.info[taken % kInfoSlots];
    mbar_wait(&s.info_full[taken % kInfoSlots], (taken / kInfoSlots) & 1);
    const Tile tile{info.expert, info.input0, info.weight_tile};
    const int row0 = info.row0, expert_rows = info.expert_rows;
    const int rows_left = expert_rows - tile.input0;
    if constexpr (Format::kInt8Mma) {
      mainloop_int8(min((rows_left + 63) / 64, N / 64));
      // The input rows' scales: D = x_scale[row] * sums (0 past the tile's rows).
      const uint32_t scales = smem_addr(info.row_scales) + 8 * (t % 4);
#pragma unroll
      for (int j = 0; j < N / 8; ++j) {
        const float2 x_scale = lds_f32x2(scales + 32 * j);  // rows 8j + 2 (t % 4) and the next
#pragma unroll
        for (int v = 0; v < 4; ++v) acc[4 * j + v] = __fmul_rn(acc[4 * j + v], v % 2 == 0 ? x_scale.x : x_scale.y);
      }
    } else if constexpr (!kLoopPerWidth) {
      mainloop(std::integral_constant<int, 0>{}, min((rows_left + 63) / 64, N / 64));
    } else if (rows_left > kNarrow) {
      mainloop(std::integral_constant<int, N>{}, 0);
    } else {
      mainloop(std::integral_constant<int, kNarrow>{}, 0);
    }
    // acc[4j + v]: weight row r = 16 (t / 32) + t % 32 / 4 (+ 8 for v >= 2), input row c = 8j + 2 (t % 4)
    // (+ 1 for odd v); D is [input rows, n]. (Registers past a narrow tile's hold no input row.) NVFP4's
    // global scale, then the bias, as the CPU applies them to the sum: one fp32 division, one addition.
    // With a short reduction (GEMM2 of small experts: 4 k-tiles) this epilogue is most of a tile's
    // instructions, so it walks one pointer per column in steps of 8 rows and stops at the tile's
    // last input row, and divides with DivideRn (per output about half the instructions; on
    // 256-row tiles 2-3% faster on NVFP4 prefill since the tiles are published, 2026-12-01, where
    // it had been 5-10% slower before).
    const float* bias = p.bias != nullptr ? p.bias[tile.expert] : nullptr;
    const float divisor = Format::kDividesByGlobal ? p.global_scales[tile.expert] * 0.0078125f : 1.0f;  // * 2^-7
    const DivideRn divide(divisor);
    auto sum = [&](float v, float b) {
      if constexpr (Format::kDividesByGlobal) v = divide(v);
      return bias != nullptr ? __fadd_rn(v, b) : v;
    };
    const int r = 16 * (t / 32) + t % 32 / 4, c0 = 2 * (t % 4);
    const int weight_row = tile.weight_tile * kTileRows + consumer * 64 + r;  // (weight_row % 16 < 8)
    const int rows_here = min(rows_left, N);                                   // input rows of this tile
    // (Read with shared loads: through a generic pointer they took the generic path, ~3% of GEMM2's
    // stall samples on Qwen3-30B-A3B at 4096 tokens.)
    const uint32_t weights = smem_addr(info.row_weights);                      // [N] floats (terms only)
    const int64_t first_row = static_cast<int64_t>(row0) + tile.input0 + c0;  // the thread's first input row
    if constexpr (kFusedAct) {
      // Interleaved w13: row r sums gate column i, row r + 8 up column i, for the same input rows.
      const int inter = p.gate_up_inter, i = weight_row / 16 * 8 + weight_row % 8;
      if (i >= inter) continue;
      const float b_gate = bias != nullptr ? bias[i] : 0.0f, b_up = bias != nullptr ? bias[inter + i] : 0.0f;
      // (One unrolled loop per activation, the activation known at compile time: a switch per output
      // would inline every activation into each of the N / 4 outputs.)
      // The outputs go in groups of kGroup (4 or 2 row blocks of 8, which never straddle a 64-row
      // width): the group's divisions and activations (silu, swigluoai) take their branch-free fast
      // paths together, with one branch per group to the exact paths where a value is out of their
      // range (zeros, extremes), so the group's independent chains overlap instead of running one
      // output at a time. (Groups of 8 were 0-2% faster than of 4 on NVFP4 and INT4; MXFP4's
      // per-width mainloops and 320-row tiles' accumulators leave too few registers for them: they
      // spilled.)
      constexpr int kGroup = kLoopPerWidth || N > 256 ? 4 : 8;
      auto store = [&](auto activation) {
        constexpr int kAct = decltype(activation)::value;
        uint16_t* out = p.act_rows + first_row * inter + i;  // [rows, inter]: rows c0 + 8j (+ 1)
#pragma unroll
        for (int j0 = 0; j0 < N / 8; j0 += kGroup / 2) {
          if (8 * j0 >= rows_here) break;  // (the same for the whole tile)
          float gate[kGroup], up[kGroup];  // output g: row block j0 + g / 2, row c0 + g % 2
          bool exact = !Format::kDividesByGlobal || divide.quick_ok();
#pragma unroll
          for (int g = 0; g < kGroup; ++g) {
            gate[g] = acc[4 * (j0 + g / 2) + g % 2], up[g] = acc[4 * (j0 + g / 2) + 2 + g % 2];
            if constexpr (Format::kDividesByGlobal) gate[g] = divide.quick(gate[g], exact), up[g] = divide.quick(up[g], exact);
          }
          if (!exact) {
#pragma unroll
            for (int g = 0; g < kGroup; ++g)
              gate[g] = divide.exact(acc[4 * (j0 + g / 2) + g % 2]), up[g] = divide.exact(acc[4 * (j0 + g / 2) + 2 + g % 2]);
          }
          float act[kGroup];
          bool act_exact = true;
#pragma unroll
          for (int g = 0; g < kGroup; ++g) {
            if (bias != nullptr) gate[g] = __fadd_rn(gate[g], b_gate), up[g] = __fadd_rn(up[g], b_up);
            if (p.round) gate[g] = round_bf16_hw(gate[g]), up[g] = round_bf16_hw(up[g]);
            if constexpr (kAct == kSilu) act[g] = __fmul_rn(silu_quick(gate[g], act_exact), up[g]);
            else if constexpr (kAct == kSwigluOai) act[g] = swiglu_oai_quick(gate[g], up[g], p.limit, act_exact);
            else act[g] = activate(kAct, p.limit, gate[g], up[g]);
          }
          if ((kAct == kSilu || kAct == kSwigluOai) && !act_exact) {
#pragma unroll
            for (int g = 0; g < kGroup; ++g) act[g] = activate(kAct, p.limit, gate[g], up[g]);
          }
#pragma unroll
          for (int g = 0; g < kGroup; ++g)
            if (8 * (j0 + g / 2) + c0 + g % 2 < rows_here)
              out[(8 * (g / 2) + g % 2) * static_cast<int64_t>(inter)] = __bfloat16_as_ushort(__float2bfloat16_rn(act[g]));
          out += 8 * static_cast<int64_t>(kGroup / 2) * inter;
        }
      };
      if (p.activation == kSwigluOai) store(std::integral_constant<int, kSwigluOai>{});
      else store(std::integral_constant<int, kSilu>{});
    } else if (p.terms != nullptr && p.gate_up_inter == 0 && p.n % 64 == 0) {
      // Staged terms (plain weights with n a multiple of 64): the warpgroup's terms go through
      // shared memory, kRows input rows at a time, transposed by stmatrix into [input row][64
      // weight columns], then out in 16-byte row pieces (per output about a third of the
      // per-element path's instructions, and whole 128-byte row segments instead of 16-byte ones).
      constexpr int kRows = TermsTile<N>::kRows;
      const int col_base = tile.weight_tile * kTileRows + consumer * 64;  // the warpgroup's first column
      if (col_base >= p.n) continue;  // (the padding half of a last weight tile)
      const uint32_t buf = smem_addr(&s.terms.rows[consumer][0][0]);
      float b[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) b[half] = bias != nullptr ? bias[weight_row + 8 * half] : 0.0f;
      const int lane = t % 32, w16 = 2 * (t / 32);  // w16: the warp's first 16-byte chunk
      // Matrices (half, j) and (half, j + 1) for half 0, 1: bf16x2 of rows c0, c0 + 1 each (q[2m + half]
      // for j + m). The eight divisions take their branch-free fast path together, with one branch
      // to the exact path where a value is out of its range.
      auto pack = [&](int j, const float (&w)[2][2], uint32_t (&q)[4]) {
        float v[8];  // v[4m + 2 half + odd]: acc[4 (j + m) + 2 half + odd]
        bool exact = !Format::kDividesByGlobal || divide.quick_ok();
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          v[e] = acc[4 * (j + e / 4) + e % 4];
          if constexpr (Format::kDividesByGlobal) v[e] = divide.quick(v[e], exact);
        }
        if (!exact) {
#pragma unroll
          for (int e = 0; e < 8; ++e) v[e] = divide.exact(acc[4 * (j + e / 4) + e % 4]);
        }
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
          const int m = e / 4, half = e % 4 / 2;
          float lo = v[e], hi = v[e + 1];
          if (bias != nullptr) lo = __fadd_rn(lo, b[half]), hi = __fadd_rn(hi, b[half]);
          const __nv_bfloat162 pair = __floats2bfloat162_rn(__fmul_rn(w[m][0], lo), __fmul_rn(w[m][1], hi));
          memcpy(&q[2 * m + half], &pair, sizeof(uint32_t));
        }
      };
      uint16_t* out = p.terms + (static_cast<int64_t>(row0) + tile.input0) * p.n + col_base;  // [rows, n]
#pragma unroll
      for (int first = 0; first < N; first += kRows) {  // the input rows [first, first + kRows)
        if (kRows < N && first >= rows_here) break;  // (the same for the whole tile; a one-pass tile has rows)
#pragma unroll
        for (int j = first / 8; j < (first + kRows) / 8; j += 2) {
          if (8 * j >= rows_here) break;  // (the same for the whole tile)
          const float2 w0 = lds_f32x2(weights + 4 * (8 * j + c0)), w1 = lds_f32x2(weights + 4 * (8 * j + 8 + c0));
          const float w[2][2] = {{w0.x, w0.y}, {w1.x, w1.y}};
          // Lanes 8m .. 8m + 7 address matrix m = (half m % 2, j + m / 2)'s transposed rows.
          const int m = lane / 8, row = 8 * (j + m / 2) + lane % 8 - first, chunk = w16 + m % 2;
          const uint32_t address = buf + row * 128 + ((chunk ^ (row & 7)) << 4);
          uint32_t q[4];
          pack(j, w, q);
          __syncwarp();  // (the exact divisions' branch is per thread; stmatrix is .aligned)
          sts_matrix_x4_trans(address, q[0], q[1], q[2], q[3]);
        }
        warpgroup_sync(1 + consumer);
        const int chunk = t % 8, rows = kRows == N ? rows_here : min(kRows, rows_here - first);
        for (int row = t / 8; row < rows; row += 16)
          stg128(out + static_cast<int64_t>(first + row) * p.n + 8 * chunk,
                 lds128(buf + row * 128 + ((chunk ^ (row & 7)) << 4)));
        warpgroup_sync(1 + consumer);  // (read before the next rows' terms overwrite them)
      }
    } else if (p.terms != nullptr) {
      // Fp4GemmParams::terms: each row's routing weight loaded once for both columns, then per
      // output the combine's term, bf16(w * D) (half the bytes of D, read once).
      int col[2];
      float b[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = weight_row + 8 * half;
        col[half] = p.gate_up_inter > 0 ? static_cast<int>(gate_up_source_row(row, p.gate_up_inter)) : row < p.n ? row : -1;
        b[half] = bias != nullptr && col[half] >= 0 ? bias[col[half]] : 0.0f;
      }
      uint16_t* out = p.terms + first_row * p.n;  // [rows, n]: rows c0 + 8j (+ 1)
#pragma unroll
      for (int j = 0; j < N / 8; ++j) {
        if (8 * j >= rows_here) break;  // (the same for the whole tile)
#pragma unroll
        for (int odd = 0; odd < 2; ++odd) {
          if (8 * j + c0 + odd < rows_here) {
            const float w = __uint_as_float(lds32(weights + 4 * (8 * j + c0 + odd)));
#pragma unroll
            for (int half = 0; half < 2; ++half)
              if (col[half] >= 0) out[odd * p.n + col[half]] =
                    __bfloat16_as_ushort(__float2bfloat16_rn(__fmul_rn(w, sum(acc[4 * j + 2 * half + odd], b[half]))));
          }
        }
        out += 8 * static_cast<int64_t>(p.n);
      }
    } else {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = weight_row + 8 * half;  // its source row (D's column): col
        const int col = p.gate_up_inter > 0 ? static_cast<int>(gate_up_source_row(row, p.gate_up_inter)) : row < p.n ? row : -1;
        if (col < 0) continue;
        const float b = bias != nullptr ? bias[col] : 0.0f;
        float* out = p.d + first_row * p.n + col;  // [rows, n]: rows c0 + 8j (+ 1)
#pragma unroll
        for (int j = 0; j < N / 8; ++j) {
          if (8 * j >= rows_here) break;  // (the same for the whole tile)
#pragma unroll
          for (int odd = 0; odd < 2; ++odd)
            if (8 * j + c0 + odd < rows_here) out[odd * p.n] = sum(acc[4 * j + 2 * half + odd], b);
          out += 8 * static_cast<int64_t>(p.n);
        }
      }
    }
  }
}

template <int N, class Format, bool kFusedAct>
cudaError_t launch_instance(const CUtensorMap& map, const Fp4GemmParams& p, cudaStream_t stream) {
  auto kernel = fp4_grouped_gemm_kernel<N, Format, kFusedAct>;
  // + the tile map, + alignment slack. The attribute is the most any launch needs, so that launches
  // with other expert counts (other host threads) never lower it under one another.
  auto smem_bytes = [](int experts) {
    return sizeof(SharedStorage<N, Format>) + sizeof(int32_t) * (experts + 1) + 1024;
  };
  static_assert(sizeof(SharedStorage<N, Format>) + sizeof(int32_t) * (kMaxFp4GemmExperts + 1) + 1024 <= 227 * 1024,
                "the stages, the terms tile and the tile map fit an H100/H200 block's shared memory");
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem_bytes(kMaxFp4GemmExperts)));
  if (err != cudaSuccess) return err;
  int sms = p.num_sms;
  if (sms <= 0) {
    int device = 0;
    if ((err = cudaGetDevice(&device)) != cudaSuccess) return err;
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return err;
  }
  kernel<<<sms, kThreads, smem_bytes(p.experts), stream>>>(map, p);
  return cudaGetLastError();
}
template <int N, class Format>
cudaError_t launch_tiles(const CUtensorMap& map, const Fp4GemmParams& p, cudaStream_t stream) {
  return p.act_rows != nullptr ? launch_instance<N, Format, true>(map, p, stream)
                               : launch_instance<N, Format, false>(map, p, stream);
}


// The repacks' shared checks and grid: cols a multiple of 64, gate_up_inter 0 or rows / 2 (rows
// even); the row tiles of fp4_frag_rows(rows) times the column tiles (0: nothing to do).
cudaError_t repack_tiles(int64_t rows, int64_t cols, int64_t gate_up_inter, unsigned& tiles) {
  if (rows < 0 || cols % 64 != 0 || gate_up_inter < 0 || (gate_up_inter > 0 && rows != 2 * gate_up_inter))
    return cudaErrorInvalidValue;
  const int64_t count = fp4_frag_rows(rows) / 64 * (cols / 64);
  if (count >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  tiles = static_cast<unsigned>(count);
  return cudaSuccess;
}
}  // namespace

cudaError_t launch_repack_mxfp4(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                                int64_t gate_up_inter, uint32_t* frag_codes, uint32_t* frag_scales,
                                cudaStream_t stream) {
  unsigned tiles = 0;
  if (const cudaError_t err = repack_tiles(rows, cols, gate_up_inter, tiles); err != cudaSuccess || tiles == 0)
    return err;
  repack_mxfp4_kernel<<<tiles, 128, 0, stream>>>(codes, scales, rows, cols, gate_up_inter, frag_codes, frag_scales);
  return cudaGetLastError();
}

cudaError_t launch_repack_nvfp4(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                                int64_t gate_up_inter, uint32_t* frag_codes, uint32_t* frag_scales,
                                cudaStream_t stream) {
  unsigned tiles = 0;
  if (const cudaError_t err = repack_tiles(rows, cols, gate_up_inter, tiles); err != cudaSuccess || tiles == 0)
    return err;
  repack_nvfp4_kernel<<<tiles, 128, 0, stream>>>(codes, scales, rows, cols, gate_up_inter, frag_codes, frag_scales);
  return cudaGetLastError();
}

cudaError_t launch_repack_int4(const int32_t* codes, const uint16_t* scales, const int8_t* zero_points, int64_t rows,
                               int64_t cols, int64_t group, W4Format format, int64_t gate_up_inter,
                               uint32_t* frag_codes, uint32_t* frag_scales, cudaStream_t stream) {
  const bool wide = format == W4Format::kInt4WideZero;
  if (group <= 0 || group % (wide ? 64 : 16) != 0 || cols % group != 0 || !is_int4_bf16(format) ||
      has_zero_points(format) != (zero_points != nullptr))
    return cudaErrorInvalidValue;
  unsigned tiles = 0;
  if (const cudaError_t err = repack_tiles(rows, cols, gate_up_inter, tiles); err != cudaSuccess || tiles == 0)
    return err;
  repack_int4_kernel<<<tiles, 128, 0, stream>>>(codes, scales, zero_points, rows, cols, group, wide, gate_up_inter,
                                                frag_codes, frag_scales);
  return cudaGetLastError();
}

cudaError_t launch_repack_int4_int8(const int32_t* codes, const void* scales, bool f32_scales, int64_t rows,
                                    int64_t cols, int64_t group, int64_t gate_up_inter, uint32_t* frag_codes,
                                    uint32_t* frag_scales, cudaStream_t stream) {
  if (cols % 128 != 0 || group <= 0 || group % 128 != 0 || cols % group != 0) return cudaErrorInvalidValue;
  unsigned tiles = 0;  // (64 x 64 tiles: twice the 64 x 128 ones)
  if (const cudaError_t err = repack_tiles(rows, cols, gate_up_inter, tiles); err != cudaSuccess || tiles == 0)
    return err;
  if (f32_scales)
    repack_int4_int8_kernel<<<tiles / 2, 128, 0, stream>>>(codes, static_cast<const float*>(scales), rows, cols, group,
                                                           gate_up_inter, frag_codes, frag_scales);
  else
    repack_int4_int8_kernel<<<tiles / 2, 128, 0, stream>>>(codes, static_cast<const uint16_t*>(scales), rows, cols,
                                                           group, gate_up_inter, frag_codes, frag_scales);
  return cudaGetLastError();
}

cudaError_t launch_fp4_grouped_gemm(const Fp4GemmParams& p, cudaStream_t stream) {
  const int n_tile = p.tile_inputs;
  const bool int8_inputs = takes_int8_inputs(p.format);
  // (int8 inputs: 128-row tiles only, as the int32 sums take a second accumulator set.)
  const int tile_k = int8_inputs ? Int4Int8Scales<false>::kTileK : Bf16Mma::kTileK;
  if (n_tile != 128 && ((n_tile != 32 && n_tile != 64 && n_tile != 192 && n_tile != 256 && n_tile != 320) || int8_inputs))
    return cudaErrorInvalidValue;
  if (p.n <= 0 || p.k <= 0 || p.k % tile_k != 0 || p.experts < 0 || p.experts > kMaxFp4GemmExperts)
    return cudaErrorInvalidValue;
  if (int8_inputs && (p.x_scale == nullptr || p.scale_group <= 0 || p.scale_group % tile_k != 0 ||
                      p.k % p.scale_group != 0 || p.scale_group > kMaxInt8ScaleGroup))
    return cudaErrorInvalidValue;
  if (p.format == W4Format::kNvfp4 && p.global_scales == nullptr) return cudaErrorInvalidValue;
  if (p.gate_up_inter < 0 || (p.gate_up_inter > 0 && p.n != 2 * p.gate_up_inter) ||
      (p.act_rows != nullptr && (p.gate_up_inter == 0 || !fuses_activation(p.activation))) ||
      (p.terms != nullptr && (p.act_rows != nullptr || p.row_slots == nullptr ||
                              reinterpret_cast<uintptr_t>(p.terms) % 16 != 0)))  // (16-byte row stores)
    return cudaErrorInvalidValue;
  if (p.experts == 0 || p.total_rows == 0) return cudaSuccess;
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &status) !=
          cudaSuccess ||
      status != cudaDriverEntryPointSuccess || fn == nullptr)
    return cudaErrorNotSupported;
  auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(p.k), static_cast<cuuint64_t>(p.total_rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(p.k) * (int8_inputs ? 1 : 2)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(tile_k), static_cast<cuuint32_t>(box_rows(n_tile))};
  const cuuint32_t elem_strides[2] = {1, 1};
  if (encode(&map, int8_inputs ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
             const_cast<void*>(p.x), dims, strides, box, elem_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    return cudaErrorInvalidValue;
  if (p.format == W4Format::kInt4Int8F32) return launch_tiles<128, Int4Int8Scales<true>>(map, p, stream);
  if (p.format == W4Format::kInt4Int8) return launch_tiles<128, Int4Int8Scales<false>>(map, p, stream);
  // The format's instance of the tile's input rows.
  auto by_tile = [&]<class Format>() {
    return n_tile == 32    ? launch_tiles<32, Format>(map, p, stream)
           : n_tile == 64  ? launch_tiles<64, Format>(map, p, stream)
           : n_tile == 128 ? launch_tiles<128, Format>(map, p, stream)
           : n_tile == 192 ? launch_tiles<192, Format>(map, p, stream)
           : n_tile == 256 ? launch_tiles<256, Format>(map, p, stream)
                           : launch_tiles<320, Format>(map, p, stream);
  };
  if (p.format == W4Format::kNvfp4) return by_tile.template operator()<Nvfp4Scales>();
  if (p.format == W4Format::kInt4) return by_tile.template operator()<Int4Scales<false>>();
  if (p.format == W4Format::kInt4Zero) return by_tile.template operator()<Int4Scales<true>>();
  if (p.format == W4Format::kInt4WideZero) return by_tile.template operator()<Int4Scales<true, true>>();
  return by_tile.template operator()<Mxfp4Scales>();
}

}  // namespace qmoe::cuda
