// The CUDA backend's kernel choice and tensor-core launch shape (see gemm_plan.h).
#include "config/gemm_plan.h"
#include "config/gemm_tuning.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "qmoe/error.h"
#include "qmoe/moe.h"

namespace qmoe {
namespace {

constexpr int kDense = static_cast<int>(WeightFormat::kDense);
constexpr int kIntPacked = static_cast<int>(WeightFormat::kIntPacked);
constexpr int kIntUnpacked = static_cast<int>(WeightFormat::kIntUnpacked);
constexpr int kFp8 = static_cast<int>(WeightFormat::kFp8);
constexpr int kNvfp4 = static_cast<int>(WeightFormat::kNvfp4);
constexpr int kMxfp4 = static_cast<int>(WeightFormat::kMxfp4);
constexpr int kTensor = static_cast<int>(Strategy::kTensor);
constexpr int kChannel = static_cast<int>(Strategy::kChannel);
constexpr int kGroup = static_cast<int>(Strategy::kGroup);
constexpr int kBlock = static_cast<int>(Strategy::kBlock);
constexpr int kFp8Group = static_cast<int>(ActQuant::kFp8Group);
constexpr int kInt8PerToken = static_cast<int>(ActQuant::kInt8PerToken);

int dtype_kind(DType d) {
  switch (d) {
    case DType::kBF16: return 0;
    case DType::kF16: return 1;
    case DType::kF32: return 2;
    case DType::kF8E4M3: return 3;
    default: return 4;
  }
}

bool power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// Packed INT4/INT8 and int8 storage on 16-bit inputs: scales of the activation dtype, rounded to it,
// groups that hold whole chunks.
bool int_layout_fits(const GemmLayout& L, int act_kind, int elems) {
  if (!L.round_to_scale_dtype || L.scale_kind != act_kind || L.cols % elems != 0) return false;
  if (L.strategy == kGroup) return L.group_size % elems == 0 && power_of_two(L.group_size);
  return L.strategy == kChannel || L.strategy == kTensor;
}

bool takes_16_bit(const GemmLayout& L, int act_kind) {
  if (act_kind != 0 && act_kind != 1) return false;
  switch (L.format) {
    case kIntPacked:
      return (L.bits == 4 && int_layout_fits(L, act_kind, 32)) || (L.bits == 8 && int_layout_fits(L, act_kind, 16));
    case kIntUnpacked: return L.bits == 8 && int_layout_fits(L, act_kind, 16);
    case kMxfp4: return act_kind == 0 && L.strategy == kGroup && L.group_size == 32 && L.scale_kind == 4 && L.cols % 32 == 0;
    case kNvfp4:  // weights kept unrounded; fp8 block scales per 16 elements
      return act_kind == 0 && !L.round_to_scale_dtype && L.group_size == 16 && L.scale_kind == 3 && L.cols % 32 == 0;
    case kDense: return L.data_kind == act_kind && L.cols % 8 == 0;
    default: return false;
  }
}

// Codes of one scale per row (FP8 per-token, per-tensor, static; INT8 per-token) or per group (FP8).
bool takes_codes(const GemmLayout& L, int act_quant, int act_group) {
  if (act_quant < 1 || act_quant > kInt8PerToken || L.cols % 16 != 0) return false;
  if (L.format == kIntPacked && L.bits == 4) {  // W4A8: a step (128 columns) inside one group
    if (act_quant == kFp8Group || L.cols % 32 != 0) return false;
    if (L.strategy == kGroup) return L.group_size % 128 == 0 && power_of_two(L.group_size);
    return L.strategy == kChannel || L.strategy == kTensor;
  }
  if (act_quant == kInt8PerToken)
    return L.format == kIntUnpacked && L.bits == 8 && (L.strategy == kChannel || L.strategy == kTensor);
  if (L.format != kFp8) return false;
  // A step (64 columns of 8-bit codes) lies in one input group and one weight block column, and a
  // warp's rows in one weight block row.
  if (act_quant == kFp8Group && (act_group <= 0 || act_group % 64 != 0)) return false;
  if (L.strategy == kBlock) return L.block_cols % 64 == 0 && L.block_rows % (16 * kMmaTilesPerWarp) == 0;
  return act_quant != kFp8Group && (L.strategy == kChannel || L.strategy == kTensor);
}

}  // namespace

GemmLayout gemm_layout_of(const QuantWeight& w, bool round_to_scale_dtype) {
  GemmLayout L;
  L.format = static_cast<int>(w.format);
  L.bits = w.bits;
  L.strategy = static_cast<int>(w.strategy);
  L.scale_kind = w.scale.empty() ? 2 : dtype_kind(w.scale.dtype());
  L.data_kind = w.format == WeightFormat::kDense ? dtype_kind(w.data.dtype()) : 0;
  L.round_to_scale_dtype = round_to_scale_dtype;
  L.rows = w.rows;
  L.cols = w.cols;
  L.group_size = w.group_size;
  L.block_rows = w.block_rows;
  L.block_cols = w.block_cols;
  L.words_per_row = w.format == WeightFormat::kIntPacked ? w.data.dim(1) : 0;
  L.scale_cols = w.scale.rank() == 2 ? w.scale.dim(1) : 1;
  L.zp_cols = w.zero_point.rank() == 2 ? w.zero_point.dim(1) : 0;
  L.has_zero_point = !w.zero_point.empty();
  return L;
}

std::string to_string(GemmKernel k) {
  switch (k) {
    case GemmKernel::kTensorCore16: return "tensor-core (16-bit inputs)";
    case GemmKernel::kTensorCoreCodes: return "tensor-core (activation codes)";
    case GemmKernel::kCudaCore: return "CUDA-core GEMV/generic";
  }
  return "?";
}

GemmKernel plan_gemm_kernel(const GemmLayout& L, bool has_g_idx, const GemmInput& in) {
  if (has_g_idx) return GemmKernel::kCudaCore;  // act order: groups are not contiguous
  // The tensor-core kernel addresses an expert's weights, and indexes columns, with 32-bit ints.
  constexpr int64_t kMaxChunks = int64_t{1} << 31;
  if (L.cols >= kMaxChunks || L.rows * (L.cols / mma_elems_per_chunk(L)) >= kMaxChunks) return GemmKernel::kCudaCore;
  if (in.act_quant == 0)
    return in.exactly_16_bit && takes_16_bit(L, in.act_kind) ? GemmKernel::kTensorCore16 : GemmKernel::kCudaCore;
  return takes_codes(L, in.act_quant, in.act_group) ? GemmKernel::kTensorCoreCodes : GemmKernel::kCudaCore;
}

std::string to_string(GroupedKernel k) {
  switch (k) {
    case GroupedKernel::kNone: return "none";
    case GroupedKernel::kFp8: return "grouped wgmma (FP8)";
    case GroupedKernel::kInt8: return "grouped wgmma (INT8)";
    case GroupedKernel::kBf16: return "grouped wgmma (BF16)";
    case GroupedKernel::kInt4Bf16: return "grouped wgmma (INT4 weights dequantized to BF16)";
    case GroupedKernel::kFp8Block: return "grouped wgmma (FP8, 128x128 block scales)";
    case GroupedKernel::kInt8Bf16: return "grouped wgmma (INT8 weights dequantized to BF16)";
    case GroupedKernel::kInt4Codes: return "grouped wgmma (INT4 weights dequantized to BF16, 8-bit activation codes)";
    case GroupedKernel::kDequantBf16: return "grouped wgmma (BF16) on weights dequantized to a BF16 workspace";
    case GroupedKernel::kMxfp4Bf16: return "grouped wgmma (BF16) on MXFP4 weights dequantized in registers";
    case GroupedKernel::kNvfp4Bf16: return "grouped wgmma (BF16) on NVFP4 weights dequantized in registers";
    case GroupedKernel::kInt4RegsBf16: return "grouped wgmma (BF16) on INT4 weights dequantized in registers";
    case GroupedKernel::kF16: return "grouped wgmma (F16)";
    case GroupedKernel::kInt4F16: return "grouped wgmma (INT4 weights dequantized to F16)";
    case GroupedKernel::kInt8F16: return "grouped wgmma (INT8 weights dequantized to F16)";
    case GroupedKernel::kDequantF16: return "grouped wgmma (F16) on weights dequantized to an F16 workspace";
    case GroupedKernel::kInt4Int8Regs: return "grouped wgmma (INT8) on INT4 weights and INT8 activation codes";
  }
  return "?";
}

namespace {

// The kernels that read the checkpoint's weights (or their codes) directly, and the register
// kernel's formats that can take those layouts instead on a repacked copy (`repacked_copy`).
GroupedKernel native_grouped_kernel(const GemmLayout& L, bool has_g_idx, const GemmInput& in, GemmKernel decode,
                                    bool repacked_copy) {
  // The prefill rows are gathered from what the decode kernels read: codes, or 16-bit inputs.
  if (has_g_idx || decode == GemmKernel::kCudaCore) return GroupedKernel::kNone;
  const bool per_tensor_or_channel = L.strategy == kTensor || L.strategy == kChannel;
  const bool fp8_rows = in.act_quant == static_cast<int>(ActQuant::kFp8PerToken) ||
                        in.act_quant == static_cast<int>(ActQuant::kFp8PerTensorDynamic) ||
                        in.act_quant == static_cast<int>(ActQuant::kFp8Static);
  // W4A16 / W8A16 / W4A8: the mixed-input kernel applies one bf16 (f16) scale per (row, group of k), in
  // k-tiles of 64 (a group is k, or a multiple of 64); 16-byte code rows; n-contiguous scales need
  // 16-byte alignment. Zero points: not in CUTLASS 4.2's grouped kernel.
  const bool group_fits = L.strategy == kChannel || (L.strategy == kGroup && L.group_size % 64 == 0);
  const bool mixed_fits = !L.has_zero_point && group_fits && L.rows % 8 == 0;
  if (decode == GemmKernel::kTensorCoreCodes) {
    if (L.format == kFp8 && per_tensor_or_channel && fp8_rows) return GroupedKernel::kFp8;
    // W4A8 with INT8 activations on int8 MMAs: whole 128-deep k-tiles per scale group (the register
    // kernel's repack reads bf16 or fp32 scales); its products are unrounded, as vLLM's W4A8-INT8
    // (CPU) keeps them, so layers that round each weight to bf16 keep the kernel below, which rounds
    // them so.
    if (repacked_copy && L.format == kIntPacked && L.bits == 4 && in.act_quant == kInt8PerToken && !L.has_zero_point &&
        !L.round_to_scale_dtype && (L.scale_kind == 0 || L.scale_kind == 2) && L.cols % 128 == 0 &&
        (L.strategy == kChannel ? L.scale_cols == 1
                                : L.strategy == kGroup && L.group_size > 0 && L.group_size % 128 == 0 &&
                                      L.scale_cols == L.cols / L.group_size))
      return GroupedKernel::kInt4Int8Regs;
    // W4A8 (bf16 MMA on the codes: exact, as are the decode kernel's f16 products).
    if (L.format == kIntPacked && L.bits == 4 && mixed_fits && L.cols % 32 == 0 &&
        (fp8_rows || in.act_quant == kInt8PerToken))
      return GroupedKernel::kInt4Codes;
    // DeepSeek-V3's scheme: 128 x 128 weight blocks, inputs in groups of 128 columns (CUTLASS's
    // blockwise kernel scales each 128-deep k-tile; partial last blocks are zero-filled by TMA).
    if (L.format == kFp8 && L.strategy == kBlock && L.block_rows == 128 && L.block_cols == 128 &&
        in.act_quant == kFp8Group && in.act_group == 128)
      return GroupedKernel::kFp8Block;
    if (L.format == kIntUnpacked && L.bits == 8 && per_tensor_or_channel && in.act_quant == kInt8PerToken)
      return GroupedKernel::kInt8;
    return GroupedKernel::kNone;
  }
  // f16 models: unquantized f16 experts; INT4 and INT8 with f16 scales rounded as the decode kernels
  // round them.
  if (in.act_kind == 1 && in.act_quant == 0) {
    if (L.format == kDense && L.data_kind == 1) return GroupedKernel::kF16;
    if (!mixed_fits || L.scale_kind != 1 || !L.round_to_scale_dtype) return GroupedKernel::kNone;
    if (L.format == kIntPacked && L.bits == 4 && L.cols % 32 == 0) return GroupedKernel::kInt4F16;
    if ((L.format == kIntPacked || L.format == kIntUnpacked) && L.bits == 8) return GroupedKernel::kInt8F16;
    return GroupedKernel::kNone;
  }
  if (in.act_kind != 0 || in.act_quant != 0) return GroupedKernel::kNone;  // bf16 inputs from here on
  if (L.format == kDense && L.data_kind == 0) return GroupedKernel::kBf16;
  // Weight-only: bf16 scales rounded as the decode kernels round them.
  if (!mixed_fits || L.scale_kind != 0 || !L.round_to_scale_dtype) return GroupedKernel::kNone;
  // INT4 on the register kernel where it takes the layout: its GEMM1 applies the activation and its
  // GEMM2 writes the combine's terms (layers 0.80-0.97x CUTLASS's time, bench/NOTES.md, thirtieth session).
  if (repacked_copy && int4_registers_fit(L, has_g_idx, in)) return GroupedKernel::kInt4RegsBf16;
  if (L.format == kIntPacked && L.bits == 4 && L.cols % 32 == 0) return GroupedKernel::kInt4Bf16;
  if ((L.format == kIntPacked || L.format == kIntUnpacked) && L.bits == 8) return GroupedKernel::kInt8Bf16;
  return GroupedKernel::kNone;
}

}  // namespace

GroupedKernel plan_grouped_kernel(const GemmLayout& L, bool has_g_idx, const GemmInput& in,
                                  GemmKernel decode, bool repacked_copy) {
  // 16-byte rows for TMA (k 8-bit codes, n fp32 outputs); int32 problem sizes.
  if (L.cols % 16 != 0 || L.rows % 4 != 0 || L.rows >= (int64_t{1} << 31) || L.cols >= (int64_t{1} << 31))
    return GroupedKernel::kNone;
  const GroupedKernel native = native_grouped_kernel(L, has_g_idx, in, decode, repacked_copy);
  if (native != GroupedKernel::kNone) return native;
  // The rest of weight-only on bf16 inputs that are exactly bf16 (the rows are rounded to bf16).
  const bool bf16_rows = in.act_quant == 0 && in.act_kind == 0 && in.exactly_16_bit;
  // (NVFP4's global divisor after the GEMM needs the kernel's fast path: no act order. The kernel
  // indexes an expert's 8-column chunks in 32 bits.)
  const bool chunks_fit = L.rows * (L.cols / 8) < (int64_t{1} << 31);
  // (The kernel reads groups of 32 e8m0 scales in order, [rows, cols / 32], as the loader gives them.)
  if (repacked_copy && bf16_rows && L.format == kMxfp4 && L.cols % 64 == 0 && L.strategy == kGroup &&
      L.group_size == 32 && L.scale_kind == 4 && L.scale_cols == L.cols / 32 && !has_g_idx)
    return GroupedKernel::kMxfp4Bf16;
  // NVFP4 scaled as vLLM's weight-only layers scale it (fp8 e4m3 scales per 16, in order).
  if (repacked_copy && bf16_rows && L.format == kNvfp4 && !L.round_to_scale_dtype && L.cols % 64 == 0 &&
      L.group_size == 16 && L.scale_kind == 3 && L.scale_cols == L.cols / 16 && !has_g_idx)
    return GroupedKernel::kNvfp4Bf16;
  // INT4 that kInt4Bf16 (checked above) does not take: groups of 16 or 32, zero points (the rest
  // took the register kernel above, where a copy is allowed).
  if (repacked_copy && int4_registers_fit(L, has_g_idx, in)) return GroupedKernel::kInt4RegsBf16;
  if (bf16_rows && L.format != kDense && chunks_fit &&
      (dequantizes_to_bf16_exactly(L) || (!has_g_idx && dequant_divides_by_global_scale(L))))
    return GroupedKernel::kDequantBf16;
  // f16 models: weight-only integer and FP8 layouts whose every dequantized value is an f16.
  const bool f16_rows = in.act_quant == 0 && in.act_kind == 1 && in.exactly_16_bit;
  if (f16_rows && L.format != kDense && chunks_fit && dequantizes_to_f16_exactly(L)) return GroupedKernel::kDequantF16;
  return GroupedKernel::kNone;
}

bool int4_registers_fit(const GemmLayout& L, bool has_g_idx, const GemmInput& in) {
  const bool bf16_rows = in.act_quant == 0 && in.act_kind == 0 && in.exactly_16_bit;
  const bool int4_scales = L.strategy == kChannel ? L.scale_cols == 1
                           : L.strategy == kGroup ? L.group_size > 0 && L.group_size % 16 == 0 && L.scale_cols == L.cols / L.group_size
                                                  : false;
  return bf16_rows && L.format == kIntPacked && L.bits == 4 && L.scale_kind == 0 && L.round_to_scale_dtype &&
         L.cols % 64 == 0 && int4_scales && (!L.has_zero_point || L.zp_cols == L.scale_cols) && !has_g_idx;
}

bool dequantizes_to_bf16_exactly(const GemmLayout& L) {
  switch (L.format) {
    case kIntPacked:
    case kIntUnpacked:
    case kFp8: return L.round_to_scale_dtype && L.scale_kind == 0;
    case kMxfp4: return true;  // bf16(e2m1 * 2^e)
    case kNvfp4: return L.round_to_scale_dtype;
    default: return L.data_kind == 0;  // dense bf16
  }
}

bool dequantizes_to_f16_exactly(const GemmLayout& L) {
  switch (L.format) {
    case kIntPacked:
    case kIntUnpacked:
    case kFp8: return L.round_to_scale_dtype && L.scale_kind == 1;
    case kDense: return L.data_kind == 1;
    default: return false;  // (MXFP4's and NVFP4's scales reach beyond f16's range)
  }
}

bool dequant_divides_by_global_scale(const GemmLayout& L) {
  // (Groups of whole 8-column chunks: the dequantization kernel's fast path, which leaves the
  // global divisor out; its per-element fallback would apply it.)
  return L.format == kNvfp4 && !L.round_to_scale_dtype && L.group_size > 0 && L.group_size % 8 == 0;
}

int dequant_batch_experts(int64_t expert_bytes, int num_experts, int64_t workspace_bytes) {
  const int64_t fit = expert_bytes > 0 ? workspace_bytes / expert_bytes : num_experts;
  return static_cast<int>(std::clamp<int64_t>(fit, 1, std::max(num_experts, 1)));
}

bool dequantizes_to_workspace(GroupedKernel kind) {
  return kind == GroupedKernel::kDequantBf16 || kind == GroupedKernel::kDequantF16;
}

GroupedKernel gemm_of(GroupedKernel kind) {
  return kind == GroupedKernel::kDequantBf16 ? GroupedKernel::kBf16
         : kind == GroupedKernel::kDequantF16 ? GroupedKernel::kF16
                                              : kind;
}

bool dequantizes_weights(GroupedKernel kind) {
  return kind == GroupedKernel::kInt4Bf16 || kind == GroupedKernel::kInt8Bf16 || kind == GroupedKernel::kInt4Codes ||
         kind == GroupedKernel::kInt4F16 || kind == GroupedKernel::kInt8F16;
}

bool dequantizes_in_registers(GroupedKernel kind) {
  return kind == GroupedKernel::kMxfp4Bf16 || kind == GroupedKernel::kNvfp4Bf16 ||
         kind == GroupedKernel::kInt4RegsBf16 || kind == GroupedKernel::kInt4Int8Regs;
}

bool takes_16bit_rows(GroupedKernel kind) {
  return gemm_of(kind) == GroupedKernel::kBf16 || gemm_of(kind) == GroupedKernel::kF16 ||
         (dequantizes_in_registers(kind) && kind != GroupedKernel::kInt4Int8Regs) || dequantizes_weights(kind);
}

int64_t grouped_scales_per_row(GroupedKernel kind, int64_t k) {
  if (kind == GroupedKernel::kFp8Block) return (k + 127) / 128;
  if (kind == GroupedKernel::kNone || (takes_16bit_rows(kind) && kind != GroupedKernel::kInt4Codes)) return 0;
  return 1;
}

std::string to_string(GroupedTile t) {
  switch (t) {
    case GroupedTile::kSmall: return "small";
    case GroupedTile::kMedium: return "medium";
    case GroupedTile::kLarge: return "large";
    case GroupedTile::kHuge: return "huge";
    case GroupedTile::kTiny: return "tiny";
    case GroupedTile::kTiny48: return "tiny48";
    case GroupedTile::kWide: return "wide";
  }
  return "?";
}

bool grouped_tile_built(GroupedKernel kind, GroupedTile t) {
  if (kind == GroupedKernel::kNone) return false;
  if (kind == GroupedKernel::kInt4Int8Regs) return t == GroupedTile::kSmall;  // (int32 sums: 128-row tiles)
  if (dequantizes_in_registers(kind))
    return t != GroupedTile::kMedium;
  if (t == GroupedTile::kTiny || t == GroupedTile::kTiny48) return dequantizes_weights(kind);
  if (t == GroupedTile::kWide) return !dequantizes_weights(kind) && kind != GroupedKernel::kFp8Block;
  return t != GroupedTile::kHuge || !(dequantizes_weights(kind) || kind == GroupedKernel::kFp8Block);
}

bool grouped_tile_swapped(GroupedKernel kind, GroupedTile t) {
  if (dequantizes_in_registers(kind)) return false;  // (no CUTLASS problem sizes)
  return dequantizes_weights(kind) || (t == GroupedTile::kWide && grouped_tile_built(kind, t));
}

// (kTiny and kTiny48 name the mixed-input kernels' 32- and 48-row tiles; on the register kernel
// they are its 32- and 64-row ones.)
int register_tile_inputs(GroupedTile t) {
  return t == GroupedTile::kSmall    ? 128
         : t == GroupedTile::kWide   ? 192
         : t == GroupedTile::kHuge   ? 320
         : t == GroupedTile::kTiny   ? 32
         : t == GroupedTile::kTiny48 ? 64
                                     : 256;
}

std::string tile_config(GroupedKernel kind, GroupedTile t) {
  if (!grouped_tile_built(kind, t)) return "none";
  if (kind == GroupedKernel::kInt4Int8Regs) return "persistent 128x128 int8 (weight rows x input rows)";
  if (dequantizes_in_registers(kind))
    return "persistent 128x" + std::to_string(register_tile_inputs(t)) + " (weight rows x input rows)";
  kind = gemm_of(kind);
  if (dequantizes_weights(kind)) {
    switch (t) {
      case GroupedTile::kSmall: return "coop 128x128 (weight rows x input rows)";
      case GroupedTile::kMedium: return "coop 128x192 cluster 2x1 (weight rows x input rows)";
      case GroupedTile::kLarge: return "coop 128x256 cluster 2x1 (weight rows x input rows)";
      case GroupedTile::kTiny: return "coop 128x32 (weight rows x input rows)";
      case GroupedTile::kTiny48: return "coop 128x48 (weight rows x input rows)";
      case GroupedTile::kHuge:
      case GroupedTile::kWide: break;
    }
    return "?";
  }
  switch (t) {
    case GroupedTile::kSmall: return "pingpong 64x128 cluster 1x2";
    case GroupedTile::kMedium: return "coop 128x128 cluster 1x2";
    case GroupedTile::kLarge:
      return kind == GroupedKernel::kFp8Block ? "coop 128x128 cluster 1x1" : "pingpong 128x192 cluster 1x2";
    case GroupedTile::kHuge: return "coop 128x256 cluster 1x2";
    case GroupedTile::kTiny:
    case GroupedTile::kTiny48: break;
    case GroupedTile::kWide: return "swapped coop 128x192 cluster 2x1 (weight rows x input rows)";
  }
  return "?";
}

GroupedTile plan_grouped_tile(GroupedKernel kind, int64_t num_slots, int num_experts, int64_t k) {
  // The dequantizing kernels run their GEMM's tiles; f16's are bf16's (same MMA rate, not swept apart).
  kind = gemm_of(kind) == GroupedKernel::kF16 ? GroupedKernel::kBf16 : gemm_of(kind);
  const double rows_per_expert = static_cast<double>(num_slots) / std::max(num_experts, 1);
  if (kind == GroupedKernel::kInt4Int8Regs) return GroupedTile::kSmall;
  if (dequantizes_in_registers(kind)) {
    const RegisterTileSwitches& s = kind == GroupedKernel::kNvfp4Bf16   ? kNvfp4Tiles
                                    : kind == GroupedKernel::kMxfp4Bf16 ? kMxfp4Tiles
                                                                        : kInt4RegsTiles;
    if (rows_per_expert < s.until_32) return GroupedTile::kTiny;
    if (rows_per_expert < s.until_64) return GroupedTile::kTiny48;
    if (rows_per_expert <= s.max_rows_for_128) return GroupedTile::kSmall;
    if (rows_per_expert < s.wide.from) return GroupedTile::kLarge;
    if (rows_per_expert < s.wide.until) return GroupedTile::kWide;
    for (const RowRange& r : s.huge)
      if (rows_per_expert >= r.from && rows_per_expert < r.until) return GroupedTile::kHuge;
    return GroupedTile::kLarge;
  }
  if (dequantizes_weights(kind)) {
    if (rows_per_expert < kInt4MinRowsForTiny48) return GroupedTile::kTiny;
    if (rows_per_expert < kInt4MinRowsForSmall) return GroupedTile::kTiny48;
    if (rows_per_expert < kInt4MinRowsForMedium) return GroupedTile::kSmall;
    return rows_per_expert < kInt4MinRowsForLarge ? GroupedTile::kMedium : GroupedTile::kLarge;
  }
  if (kind == GroupedKernel::kFp8Block)
    return rows_per_expert < kFp8BlockMinRowsForMedium ? GroupedTile::kSmall : GroupedTile::kMedium;
  if (rows_per_expert < kGroupedMinRowsFor128) return GroupedTile::kSmall;
  // Most experts within one 192-row tile where two 128-row ones would be half padding.
  if (rows_per_expert >= kWideMinRowsPerExpert && rows_per_expert < kWideMaxRowsPerExpert) return GroupedTile::kWide;
  // bf16 on a short reduction (GEMM2 of the TP8 shapes): 128 x 192 beat 128 x 256 (gemm_tuning.h).
  if (kind == GroupedKernel::kBf16 && k < kBf16MinReductionFor256) return GroupedTile::kLarge;
  return GroupedTile::kHuge;
}

namespace {
// Mean rows per expert from which a prefill kernel whose switch goes by them beats the decode
// kernels ("few": at most kInt4FewExperts experts; inter: GEMM2's reduction); 0 for the kernels that
// switch at a token count.
int min_rows_per_expert(GroupedKernel kind, bool few, int inter, bool row_scales) {
  // The 4-bit register kernel's switches with many experts go by GEMM2's reduction (gemm_tuning.h).
  auto by_reduction = [&](int long_k, int medium_k, int short_k) {
    return inter >= kRegsMinInterLongReduction ? long_k : inter >= kRegsMinInterMediumReduction ? medium_k : short_k;
  };
  switch (kind) {
    // Dequantizing costs a pass over every expert's weights, so it pays only with many rows each.
    case GroupedKernel::kDequantBf16: return kGroupedMinRowsPerExpertDequant;
    case GroupedKernel::kDequantF16: return kGroupedMinRowsPerExpertDequantF16;
    case GroupedKernel::kMxfp4Bf16:
      return few ? kGroupedMinRowsPerExpertMxfp4FewExperts
                 : by_reduction(kGroupedMinRowsPerExpertMxfp4LongReduction, kGroupedMinRowsPerExpertMxfp4MediumReduction,
                                kGroupedMinRowsPerExpertMxfp4ShortReduction);
    case GroupedKernel::kNvfp4Bf16:
      return few ? kGroupedMinRowsPerExpertNvfp4FewExperts
                 : by_reduction(kGroupedMinRowsPerExpertNvfp4LongReduction, kGroupedMinRowsPerExpertNvfp4MediumReduction,
                                kGroupedMinRowsPerExpertNvfp4ShortReduction);
    case GroupedKernel::kInt4RegsBf16:
      return few ? kGroupedMinRowsPerExpertInt4RegsFewExperts
                 : by_reduction(kGroupedMinRowsPerExpertInt4RegsLongReduction,
                                kGroupedMinRowsPerExpertInt4RegsMediumReduction,
                                kGroupedMinRowsPerExpertInt4RegsShortReduction);
    // The decode kernels stream each expert's weights once per pass of slots; the mixed-input
    // kernel converts them in every tile, so it pays only with enough rows per expert.
    case GroupedKernel::kInt4Bf16:
    case GroupedKernel::kInt4F16:  // (the same kernel in f16; its crossover not measured apart)
      return few ? kGroupedMinRowsPerExpertInt4FewExperts : kGroupedMinRowsPerExpertInt4;
    case GroupedKernel::kInt4Int8Regs:
      if (row_scales) return few ? kGroupedMinRowsPerExpertInt4Int8RowScalesFewExperts : kGroupedMinRowsPerExpertInt4Int8RowScales;
      return few ? kGroupedMinRowsPerExpertInt4Int8FewExperts
                 : by_reduction(kGroupedMinRowsPerExpertInt4Int8LongReduction,
                                kGroupedMinRowsPerExpertInt4Int8MediumReduction,
                                kGroupedMinRowsPerExpertInt4Int8ShortReduction);
    case GroupedKernel::kInt4Codes: return few ? kGroupedMinRowsPerExpertW4A8FewExperts : kGroupedMinRowsPerExpertW4A8;
    case GroupedKernel::kInt8Bf16:
    case GroupedKernel::kInt8F16: return few ? kGroupedMinRowsPerExpertInt8FewExperts : kGroupedMinRowsPerExpertInt8;
    default: return 0;
  }
}
}  // namespace

int64_t grouped_min_tokens(GroupedKernel kind, int num_experts, int top_k, int inter, bool row_scales) {
  switch (kind) {
    case GroupedKernel::kFp8: return kGroupedMinTokensFp8;
    case GroupedKernel::kFp8Block: return kGroupedMinTokensFp8Block;
    case GroupedKernel::kInt8: return kGroupedMinTokensInt8;
    case GroupedKernel::kBf16:
    case GroupedKernel::kF16: return kGroupedMinTokensBf16;  // (f16's crossover not measured apart)
    case GroupedKernel::kNone: return std::numeric_limits<int64_t>::max();
    default: break;
  }
  const int rows = min_rows_per_expert(kind, num_experts <= kInt4FewExperts, inter, row_scales);
  if (rows <= 0) return std::numeric_limits<int64_t>::max();  // (a kind without a switch)
  const int64_t slots = int64_t{rows} * std::max(num_experts, 1);
  return std::max<int64_t>(2, (slots + std::max(top_k, 1) - 1) / std::max(top_k, 1));
}

bool use_grouped_kernel(GroupedKernel kind, int64_t tokens, int num_experts, int top_k, int inter, bool row_scales) {
  return tokens >= grouped_min_tokens(kind, num_experts, top_k, inter, row_scales);
}

LayerGemmPlan plan_layer_gemms(const MoeLayer& layer, int act_kind, bool round_intermediate, bool repacked_copy) {
  LayerGemmPlan p;
  const int act_quant = static_cast<int>(layer.act_quant);
  const int act_group = layer.act_quant == ActQuant::kFp8Group ? layer.act_group_size : 0;
  p.in1 = {act_quant, act_group, act_kind, act_kind != 2 && (round_intermediate || !layer.routing.router_weight_on_input)};
  p.in2 = {act_quant, act_group, act_kind, act_kind != 2 && round_intermediate};
  if (layer.experts.empty()) return p;
  const ExpertWeights& ew = layer.experts[0];
  p.w13 = gemm_layout_of(ew.w13, layer.round_weights_to_scale_dtype);
  p.w2 = gemm_layout_of(ew.w2, layer.round_weights_to_scale_dtype);
  p.w13_has_g_idx = !ew.w13.g_idx.empty();
  p.w2_has_g_idx = !ew.w2.g_idx.empty();
  p.k1 = plan_gemm_kernel(p.w13, p.w13_has_g_idx, p.in1);
  p.k2 = plan_gemm_kernel(p.w2, p.w2_has_g_idx, p.in2);
  // The 8-bit code kernels have no zero points (vLLM's W8A8 methods take symmetric weights only, so
  // this guards against layers built some other way).
  auto zero_point_guard = [](GemmKernel k, const QuantWeight& w) {
    const bool int4 = w.format == WeightFormat::kIntPacked && w.bits == 4;
    return k == GemmKernel::kTensorCoreCodes && !w.zero_point.empty() && !int4 ? GemmKernel::kCudaCore : k;
  };
  p.k1 = zero_point_guard(p.k1, ew.w13);
  p.k2 = zero_point_guard(p.k2, ew.w2);
  p.g1 = plan_grouped_kernel(p.w13, p.w13_has_g_idx, p.in1, p.k1, repacked_copy);
  p.g2 = plan_grouped_kernel(p.w2, p.w2_has_g_idx, p.in2, p.k2, repacked_copy);
  return p;
}

LayerGemmPlan plan_prefill_kernels(const MoeLayer& layer, bool repacked_copy) {
  LayerGemmPlan chosen = plan_layer_gemms(layer, 0, true, repacked_copy);
  chosen.g1 = chosen.g2 = GroupedKernel::kNone;
  for (int kind = 0; kind < 3; ++kind)
    for (bool round : {true, false}) {
      const LayerGemmPlan p = plan_layer_gemms(layer, kind, round, repacked_copy);
      for (auto [want, have] : {std::pair{&chosen.g1, p.g1}, std::pair{&chosen.g2, p.g2}}) {
        if (have != GroupedKernel::kNone && *want != GroupedKernel::kNone && have != *want)
          throw Error("hidden dtypes plan different prefill kernels (" + to_string(*want) + ", " + to_string(have) + ")");
        if (have != GroupedKernel::kNone) *want = have;
      }
    }
  return chosen;
}

bool repacked_copy_possible(const MoeLayer& layer, int64_t dequant_budget_bytes, bool repacked_copy) {
  return repacked_copy && dequant_budget_bytes > 0 && layer.num_local_experts <= kMaxRegisterKernelExperts;
}

int64_t repacked_copy_from_tokens(const MoeLayer& layer) {
  const LayerGemmPlan with = plan_prefill_kernels(layer, true);
  int64_t from = -1;
  for (auto [g, L] : {std::pair{with.g1, &with.w13}, std::pair{with.g2, &with.w2}})
    if (dequantizes_in_registers(g))
      from = std::max(from, grouped_min_tokens(g, layer.num_experts, layer.top_k, layer.inter, has_row_scales(*L)));
  return from < 0 ? std::numeric_limits<int64_t>::max() : from;
}

int mma_chunk_slots(int64_t num_slots, int64_t num_experts, int at_least) {
  if (mma_max_chunks(num_slots, num_experts, at_least) <= kMaxGridRows) return at_least;
  // floor(num_slots / chunk) <= room for every chunk above num_slots / (room + 1).
  const int64_t room = std::max<int64_t>(kMaxGridRows - std::min(num_experts, num_slots), 1);
  const int64_t fits = num_slots / (room + 1) + 1;
  const int64_t chunk = (fits + kMmaChunkSlots - 1) / kMmaChunkSlots * kMmaChunkSlots;
  return static_cast<int>(std::max<int64_t>(chunk, at_least));
}

LayerWorkspace plan_layer_workspace(const MoeLayer& layer, int max_tokens, int64_t dequant_budget_bytes,
                                    bool repacked_copy) {
  using W = LayerWorkspace;
  W w;
  const int64_t T = std::max(max_tokens, 0), k = layer.top_k, H = layer.hidden, I = layer.inter;
  const int64_t S = layer.gated() ? 2 : 1, E = std::max(layer.num_local_experts, 1);
  w.bytes[W::kX] = 4 * T * H;
  w.bytes[W::kX16] = 2 * T * H;
  // Input scales: one per row, or one per group of at least 64 columns (the tensor-core kernels'
  // per-group mode).
  w.bytes[W::kXScale] = 4 * T * ((H + 63) / 64);
  w.bytes[W::kU] = 4 * T * k * S * I;
  w.bytes[W::kAct] = 4 * T * k * I;
  w.bytes[W::kAct16] = 2 * T * k * I;
  w.bytes[W::kActScale] = 4 * T * k * ((I + 63) / 64);
  w.bytes[W::kY] = 4 * T * k * H;
  w.bytes[W::kIds] = w.bytes[W::kRouterWeights] = w.bytes[W::kSortedSlots] = w.bytes[W::kSlotExpert] = 4 * T * k;
  w.bytes[W::kCounts] = 4 * E;
  w.bytes[W::kOffsets] = 4 * (E + 1);
  w.bytes[W::kAmax] = 4;
  // (local expert, first position) pairs and their count, for the smallest chunks
  w.bytes[W::kChunks] = 4 * (2 * mma_max_chunks(T * k, E, kMmaMinChunkSlots) + 1);
  const LayerGemmPlan plan = plan_prefill_kernels(layer, repacked_copy);
  const GroupedKernel g1 = plan.g1, g2 = plan.g2;
  // kDequantBf16 / kDequantF16: a batch of experts' 16-bit weights, only where the automatic path
  // can pick it (none for a zero budget: those layers keep the decode kernels).
  const bool dequant1 = dequantizes_to_workspace(g1);
  const GroupedKernel dequant = dequant1 ? g1 : g2;
  if (dequant_budget_bytes > 0 && dequantizes_to_workspace(dequant) &&
      max_tokens >= grouped_min_tokens(dequant, layer.num_experts, layer.top_k, layer.inter,
                                       has_row_scales(dequant1 ? plan.w13 : plan.w2))) {
    w.dequant = plan_dequant_batches(plan, layer.num_local_experts, dequant_budget_bytes);
    w.bytes[W::kDequantized] = w.dequant.workspace_bytes;
  }
  if (g1 != GroupedKernel::kNone || g2 != GroupedKernel::kNone) {
    const int64_t elem_bytes = takes_16bit_rows(g1) || takes_16bit_rows(g2) ? 2 : 1;  // 16-bit rows or codes
    w.bytes[W::kSortedRows] = T * k * std::max(H, I) * elem_bytes;
    const int64_t scales_per_row = std::max({int64_t{1}, grouped_scales_per_row(g1, H), grouped_scales_per_row(g2, I)});
    // (+ one float per slot: GEMM2's terms instances read each sorted row's routing weight there)
    w.bytes[W::kSortedScales] = 4 * T * k * (scales_per_row + 1);
    w.bytes[W::kSlotPosition] = 4 * T * k;
  }
  // The hybrid's act rows (bf16, sorted) and busy counts.
  const int64_t hybrid_tokens = hybrid_max_tokens(layer, plan, max_tokens);
  if (hybrid_tokens > 0) {
    w.bytes[W::kHybridRows] = 2 * hybrid_tokens * k * I;
    w.bytes[W::kBusyCounts] = 4 * E;
  }
  for (int p = 0; p < W::kPieces; ++p) {
    w.offset[p] = w.total_bytes;
    w.total_bytes += (w.bytes[p] + 255) / 256 * 256;
  }
  return w;
}

int64_t hybrid_max_tokens(const MoeLayer& layer, const LayerGemmPlan& prefill_plan, int max_tokens) {
  if (!dequantizes_in_registers(prefill_plan.g1) || !dequantizes_in_registers(prefill_plan.g2)) return 0;
  auto from = [&](GroupedKernel g, const GemmLayout& L) {
    return grouped_min_tokens(g, layer.num_experts, layer.top_k, layer.inter, has_row_scales(L));
  };
  // Both GEMMs on the decode kernels: below the earlier switch; and only for layers loaded for as
  // many tokens as the repacked copy needs (CudaMoeLayer makes it from there).
  const int64_t below = std::min(from(prefill_plan.g1, prefill_plan.w13), from(prefill_plan.g2, prefill_plan.w2)) - 1;
  return max_tokens >= repacked_copy_from_tokens(layer) ? std::max<int64_t>(0, below) : 0;
}

int hybrid_busy_rows(GroupedKernel g1, GroupedKernel g2, int64_t num_slots, int requested) {
  if (requested <= 0 || num_slots < requested) return 0;
  return dequantizes_in_registers(g1) && dequantizes_in_registers(g2) ? requested : 0;
}

int implied_act_kind(const MoeLayer& layer) {
  if (layer.experts.empty()) return 0;
  const QuantWeight& w = layer.experts[0].w13;
  const bool f16 = w.format == WeightFormat::kDense ? w.data.dtype() == DType::kF16 : w.scale.dtype() == DType::kF16;
  return f16 ? 1 : 0;
}

bool cutlass_writes_terms(GroupedKernel kind, const GemmLayout& L, bool has_bias) {
  const bool divides_by_global = dequantizes_to_workspace(kind) && dequant_divides_by_global_scale(L);
  const bool kernel = gemm_of(kind) == GroupedKernel::kBf16 || kind == GroupedKernel::kFp8;
  return kernel && !has_bias && !divides_by_global && L.rows % 8 == 0;
}

bool gemm2_writes_terms(GroupedKernel kind, const GemmLayout& L, bool has_bias, int act_kind, bool round) {
  if (act_kind != 0 || !round) return false;
  return dequantizes_in_registers(kind) || cutlass_writes_terms(kind, L, has_bias);
}

CudaPlanSummary summarize_cuda_plan(const MoeLayer& layer, int act_kind, bool repacked_copy, bool round_intermediate) {
  const LayerGemmPlan plan = plan_layer_gemms(layer, act_kind, round_intermediate, repacked_copy);
  // Each tile of `kind` from the batch where it takes over, for batches in [from, until]: every
  // batch size in turn (a cheap pure function), so each switch is exact.
  auto tiles = [&](GroupedKernel kind, int64_t k, int64_t from, int64_t until) {
    std::vector<std::pair<int64_t, std::string>> out;
    for (int64_t tokens = from; tokens <= until; ++tokens) {
      std::string tile = tile_config(kind, plan_grouped_tile(kind, tokens * layer.top_k, layer.num_experts, k));
      if (out.empty() || out.back().second != tile) out.emplace_back(tokens, std::move(tile));
    }
    return out;
  };
  auto gemm = [&](GemmKernel decode, GroupedKernel prefill, const GemmLayout& L) {
    const int64_t k = L.cols;  // the GEMM's reduction
    CudaPlanSummary::Gemm g;
    g.decode = to_string(decode);
    g.prefill = to_string(prefill);
    if (prefill == GroupedKernel::kNone) return g;
    g.prefill_from_tokens = grouped_min_tokens(prefill, layer.num_experts, layer.top_k, layer.inter, has_row_scales(L));
    g.tiles = tiles(prefill, k, g.prefill_from_tokens, kPlanSummaryMaxTokens);
    return g;
  };
  CudaPlanSummary summary{gemm(plan.k1, plan.g1, plan.w13), gemm(plan.k2, plan.g2, plan.w2)};
  const bool w2_bias = !layer.experts.empty() && !layer.experts[0].w2_bias.empty();
  summary.w2.writes_terms =
      plan.g2 != GroupedKernel::kNone && gemm2_writes_terms(plan.g2, plan.w2, w2_bias, act_kind, round_intermediate);
  // Every expert has the shapes of the loaded ones (inspect loads expert 0 alone).
  if (!layer.experts.empty())
    summary.weight_bytes = layer.weight_bytes() / static_cast<int64_t>(layer.experts.size()) * layer.num_experts;
  // All experts: inspect loads a layer with only expert 0 local (its layouts are all it needs).
  summary.dequant_workspace_bytes =
      plan_dequant_batches(plan, layer.num_experts, kDefaultDequantWorkspaceBytes).workspace_bytes;
  for (auto [kind, L] : {std::pair{plan.g1, &plan.w13}, std::pair{plan.g2, &plan.w2}})
    if (dequantizes_in_registers(kind))
      summary.repacked_weight_bytes += layer.num_experts * repacked_weight_bytes(kind, *L);
  return summary;
}

int64_t repacked_weight_bytes(GroupedKernel kind, const GemmLayout& L) {
  const int64_t padded = (L.rows + 127) / 128 * 128;
  // INT4's scale words: one per 16 columns, or with zero points per 64 where the groups are a
  // multiple of 64 or per row (fp4_gemm.h's wide layout, int4_format); zero points as many again.
  const int64_t group = L.strategy == kChannel ? L.cols : L.group_size;
  const int64_t int4_scales =
      L.has_zero_point ? 2 * (group > 0 && group % 64 == 0 ? L.cols / 32 : L.cols / 8) : L.cols / 8;
  const int64_t scales = kind == GroupedKernel::kMxfp4Bf16     ? L.cols / 32
                         : kind == GroupedKernel::kInt4RegsBf16 ? int4_scales
                         : kind == GroupedKernel::kInt4Int8Regs ? L.cols / (L.scale_kind == 2 ? 32 : 64)
                                                                : L.cols / 8;
  return padded * L.cols / 2 + padded * scales;
}

DequantBatches plan_dequant_batches(const LayerGemmPlan& plan, int num_experts, int64_t budget_bytes) {
  DequantBatches b;
  for (auto [kind, L, batch] : {std::tuple{plan.g1, &plan.w13, &b.w13}, std::tuple{plan.g2, &plan.w2, &b.w2}}) {
    if (!dequantizes_to_workspace(kind)) continue;
    const int64_t expert_bytes = 2 * L->rows * L->cols;
    *batch = dequant_batch_experts(expert_bytes, num_experts, budget_bytes);
    b.workspace_bytes = std::max(b.workspace_bytes, *batch * expert_bytes);
  }
  return b;
}

bool mma_takes_input_rows(int64_t input_rows, int64_t cols) {
  return input_rows * (cols / 8) < (int64_t{1} << 31);
}

int mma_elems_per_chunk(const GemmLayout& L) {
  if (L.format == kDense) return 8;
  if (L.format == kNvfp4 || L.format == kMxfp4 || (L.format == kIntPacked && L.bits == 4)) return 32;
  return 16;  // 8-bit integers and FP8
}

bool mma_release_late(int64_t num_slots, int top_k) {
  return num_slots <= int64_t{kReleaseLateMaxTokens} * std::max(top_k, 1);
}

double expected_active_experts(int64_t num_slots, int num_local_experts) {
  const double E = std::max(num_local_experts, 1);
  return E * (1.0 - std::pow(1.0 - 1.0 / E, static_cast<double>(std::max<int64_t>(num_slots, 0))));
}

MmaLaunch plan_mma_launch(const GemmLayout& L, int64_t num_slots, int num_local_experts, int num_sms,
                          MmaScaling scaling) {
  MmaLaunch m;
  // Slots per pass: the mean per expert plus kMmaSlotSigmas standard deviations of a uniform routing.
  const double mean = static_cast<double>(num_slots) / std::max(num_local_experts, 1);
  const int expected = static_cast<int>(
      std::min<double>(mean + kMmaSlotSigmas * std::sqrt(mean) + 1.0, static_cast<double>(num_slots)));
  m.slots_per_pass = expected <= 8 ? 8 : expected <= 16 ? 16 : 32;
  const int elems = mma_elems_per_chunk(L);
  const int64_t steps = (L.cols / elems + 3) / 4;
  auto shape = [&](int min_steps) {
    m.k_splits = kMmaWarps;
    while (m.k_splits > 1 && steps < static_cast<int64_t>(m.k_splits) * min_steps) m.k_splits /= 2;
    m.m_tiles = kMmaWarps / m.k_splits;
    const int64_t rows_per_block = 16 * kMmaTilesPerWarp * m.m_tiles;
    m.row_blocks = (L.rows + rows_per_block - 1) / rows_per_block;
  };
  const double active = expected_active_experts(num_slots, num_local_experts);
  // A wave: the blocks the launched instance keeps resident on every SM.
  const int per_sm = mma_blocks_per_sm(m.slots_per_pass / 8, elems > 8, scaling);
  const double wave = static_cast<double>(per_sm) * std::max(num_sms, 1);
  auto blocks = [&] { return static_cast<double>(m.row_blocks) * active; };
  int slice = kMmaLongSlice;
  shape(slice);
  if (blocks() < kMmaMinWaves * wave) shape(slice = kMmaShortSlice);
  // A grid of less than kMmaMinGridWaves of a wave: shorter slices still (more warps per row tile,
  // so more, smaller row blocks) while that adds blocks.
  while (blocks() < kMmaMinGridWaves * wave && slice > 1 && m.k_splits < kMmaWarps) shape(slice /= 2);
  return m;
}

}  // namespace qmoe
