// The prefill GEMM of MXFP4, NVFP4 weight-only and INT4 layers (GroupedKernel::kMxfp4Bf16,
// kNvfp4Bf16, kInt4RegsBf16), and of W4A8 with INT8 activations (kInt4Int8Regs): a grouped GEMM on
// 4-bit weights that dequantizes in registers, as wgmma's A operand, instead of writing a bf16 copy
// of the weights first (kDequantBf16). Transposed like the mixed-input kernels: D^T_e = dequant(W_e)
// * X_e^T, so the weights are the M side.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace qmoe::cuda {

// The 4-bit weight formats the kernel takes: MXFP4, NVFP4 weight-only (e2m1 codes), and INT4 with
// bf16 scales per group of a multiple of 16 or per row, without or with zero points, on bf16 inputs
// (kInt4 / kInt4Zero: a scale word per 16 columns; kInt4WideZero, zero points with groups of a
// multiple of 64 or per row: one per 64, a quarter of the scale bytes); and INT4 with bf16
// (kInt4Int8) or fp32 (kInt4Int8F32: vLLM's W4A8-INT8 per-row scales) scales per group of a multiple
// of 128 or per row on int8 inputs (W4A8 with INT8 activations: int8 MMAs, exact integer sums per
// scale group, rounded to fp32 past 2^24 once per group).
enum class W4Format { kMxfp4, kNvfp4, kInt4, kInt4Zero, kInt4WideZero, kInt4Int8, kInt4Int8F32 };
inline bool takes_int8_inputs(W4Format f) { return f == W4Format::kInt4Int8 || f == W4Format::kInt4Int8F32; }
inline bool is_int4_bf16(W4Format f) {
  return f == W4Format::kInt4 || f == W4Format::kInt4Zero || f == W4Format::kInt4WideZero;
}
inline bool has_zero_points(W4Format f) { return f == W4Format::kInt4Zero || f == W4Format::kInt4WideZero; }
// The bf16-input INT4 format of `group` columns per scale (the weight's columns for one per row;
// gemm_plan.cpp's repacked_weight_bytes counts the same layouts). Only zero points take the wide
// layout: on the H200 (forty-sixth session) it ran W4A16 asymmetric g128 ~2% faster, but the
// symmetric one 1-3% slower on the 32- and 64-row tiles (bench/runs/2026-12-03_session46/).
inline W4Format int4_format(bool zero_points, int64_t group) {
  if (!zero_points) return W4Format::kInt4;
  return group > 0 && group % 64 == 0 ? W4Format::kInt4WideZero : W4Format::kInt4Zero;
}

// The rows of a repacked weight: `rows` rounded up to the kernel's 128-row tiles (zero weights).
inline int64_t fp4_frag_rows(int64_t rows) { return (rows + 127) / 128 * 128; }
// A gated layer's w13 ([gate rows; up rows], 2 inter rows) may be repacked with its gate and up rows
// interleaved (the repacks' `gate_up_inter` = inter; 0: rows in order): fragment row f then holds
// source row gate_up_source_row(f, inter), so the thread that sums gate row i (its row m) sums up
// row i too (its row m + 8), and the kernel can apply the activation in its epilogue. The padded row
// count is fp4_frag_rows(2 inter) either way.
__host__ __device__ inline int64_t gate_up_source_row(int64_t f, int64_t inter) {
  const int64_t i = f / 16 * 8 + f % 8;  // the intermediate column
  return i >= inter ? -1 : f % 16 < 8 ? i : inter + i;  // -1: padding (zero weights)
}
// The largest int8-input scale group: its integer sums stay within int32 (|sum| <= 2^16 * 128 * 128 = 2^30).
inline constexpr int kMaxInt8ScaleGroup = 1 << 16;
// The most experts launch_fp4_grouped_gemm takes (its tile map sits in shared memory).
inline constexpr int kMaxFp4GemmExperts = 1024;

// An expert's MXFP4 weight [rows, cols] (codes [rows, cols / 2] bytes, the even column in the low
// nibble; e8m0 scales [rows, cols / 32]) rearranged into wgmma's register-A fragment order, per
// 64 x 64 tile (row tile rt, column tile kt), rows padded to fp4_frag_rows(rows), the tiles of a
// 128-row pair side by side (tile (rt, kt) at ((rt / 2) (cols / 64) + kt) 2 + rt % 2: a k-tile of the
// kernel's 128 weight rows is one copy of codes and one of scales):
//   codes  [rows / 128][cols / 64][2][128 threads][4 k16 steps] 32-bit words: element j of the thread's
//          register a_r in bits 16 j + {0, 3, 6, 13}[r] .. + 2 (magnitude) and 16 j + {9, 12, 10, 11}[r]
//          (sign), so shifts put them where bf16 has them (a0: row m, columns k, k+1; a1: row m + 8; a2:
//          row m, columns k + 8, k + 9; a3: row m + 8, columns k + 8, k + 9; thread t of the
//          warpgroup: m = 16 (t / 32) + t % 32 / 4, k = 16 step + 2 (t % 4));
//   scales [rows / 128][cols / 64][2][32] 32-bit words, word t / 4 for thread t: bytes (m, group 0),
//          (m + 8, group 0), (m, group 1), (m + 8, group 1) of the tile's two groups of 32 columns.
// cols a multiple of 64; frag_codes holds fp4_frag_rows(rows) * cols / 2 bytes, frag_scales
// fp4_frag_rows(rows) * cols / 32, as many bytes as the checkpoint's.
cudaError_t launch_repack_mxfp4(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                                int64_t gate_up_inter, uint32_t* frag_codes, uint32_t* frag_scales,
                                cudaStream_t stream);
// The same for NVFP4 (codes as above; fp8 e4m3 scales [rows, cols / 16]), weight-only as vLLM scales
// it (e2m1 * fp8(s), the global scale applied to the sums):
//   scales [rows / 128][cols / 64][2][32 thread quads][4 k16 steps] 32-bit words, word (t / 4, step)
//          for thread t: bf16(fp8(s) * 2^119) of row m's group `step` in bits 0-15, of row m + 8's in 16-31.
// frag_scales holds fp4_frag_rows(rows) * cols / 8 bytes (twice the checkpoint's).
cudaError_t launch_repack_nvfp4(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                                int64_t gate_up_inter, uint32_t* frag_codes, uint32_t* frag_scales,
                                cudaStream_t stream);
// INT4 (codes as the device keeps them: signed nibbles, [rows, cols / 8] int32 words, column c in
// bits 4 (c % 8)), bf16 scales [rows, cols / group] (group a multiple of 16; cols for one per row),
// int8 zero points of the same shape (null: symmetric; each in [-8, 7]), as the CPU's
// RNE_bf16((q - z) * s), in `format` (an INT4 bf16-input one; zero points given exactly when it has
// them; the wide one needs group a multiple of 64):
//   codes  as MXFP4's, with element j of register a_r (u = q + 8) in bits 16 j + 4 r .. + 3;
//   scales kInt4 / kInt4Zero: [rows / 128][cols / 64][2][32 thread quads][4 k16 steps] 32-bit words:
//          the bf16 scale of row m's group at that step in bits 0-15, of row m + 8's in 16-31;
//          kInt4WideZero: [rows / 128][cols / 64][2][32 thread quads], the same word of
//          the tile's group (one per 64 columns); with zero points each tile's words are followed by
//          as many words of bf16(136 + z) in the same order.
// frag_scales holds fp4_frag_scale_bytes(format, rows, cols).
cudaError_t launch_repack_int4(const int32_t* codes, const uint16_t* scales, const int8_t* zero_points, int64_t rows,
                               int64_t cols, int64_t group, W4Format format, int64_t gate_up_inter,
                               uint32_t* frag_codes, uint32_t* frag_scales, cudaStream_t stream);
// INT4 for int8 inputs (kInt4Int8, kInt4Int8F32; codes as launch_repack_int4 takes them, bf16 or
// (f32_scales) fp32 scales [rows, cols / group], group a multiple of 128 or cols), per 64 x 128 tile
// (row tile rt, column tile kt), in
// wgmma's register-A fragment order for 8-bit operands, each code q as the int8 16 q (its nibble in
// a byte's high half; the kernel divides the scales by 16):
//   codes  [rows / 64][cols / 128][2 planes][128 threads][4 words]: word w = 2 s + h of thread t (plane
//          w / 4, word w % 4: each 16-byte load of a warp reads 512 contiguous bytes) holds k32 step
//          s's registers a_2h (row m) in the bytes' high nibbles and a_2h+1 (row m + 8) in their low
//          nibbles, element j (column 32 s + 16 h + 4 (t % 4) + j) in byte j (m and t as above);
//   scales [rows / 64][cols / 128][32] 32-bit words, word t / 4 for thread t: the bf16 scale of row m's
//          group at the tile's columns in bits 0-15, of row m + 8's in 16-31; fp32 scales:
//          [rows / 64][cols / 128][32][2], row m's then row m + 8's.
// cols a multiple of 128; frag_codes holds fp4_frag_rows(rows) * cols / 2 bytes, frag_scales
// fp4_frag_scale_bytes(kInt4Int8 or kInt4Int8F32, rows, cols).
cudaError_t launch_repack_int4_int8(const int32_t* codes, const void* scales, bool f32_scales, int64_t rows,
                                    int64_t cols, int64_t group, int64_t gate_up_inter, uint32_t* frag_codes,
                                    uint32_t* frag_scales, cudaStream_t stream);
// Bytes of an expert's repacked scales.
inline int64_t fp4_frag_scale_bytes(W4Format format, int64_t rows, int64_t cols) {
  const int64_t per_row = format == W4Format::kMxfp4          ? cols / 32
                          : format == W4Format::kInt4WideZero ? cols / 16
                          : format == W4Format::kInt4Zero     ? cols / 4
                          : format == W4Format::kInt4Int8     ? cols / 64
                          : format == W4Format::kInt4Int8F32  ? cols / 32
                                                              : cols / 8;
  return fp4_frag_rows(rows) * per_row;
}

// The activations the kernel's epilogue applies (qmoe::Activation's silu and swigluoai: Mixtral,
// Qwen3, DeepSeek-V3, Kimi-K2, gpt-oss); the others run the forward's activation kernel.
inline constexpr int kSilu = 0, kSwigluOai = 3;
inline bool fuses_activation(int activation) { return activation == kSilu || activation == kSwigluOai; }

struct Fp4GemmParams {
  const uint32_t* const* frag_codes = nullptr;   // [experts] (device array of device pointers)
  const uint32_t* const* frag_scales = nullptr;  // [experts]
  const int32_t* expert_offsets = nullptr;       // [experts + 1] rows of x per expert (device)
  // Or the rows multiplied per expert, each from its offset and at most its offsets' span (the decode
  // path's per-expert hybrid: the busy experts' counts, 0 for the others); null: the whole spans.
  const int32_t* expert_rows = nullptr;  // [experts] (device)
  const void* x = nullptr;  // [total_rows, k] bf16 (kInt4Int8: int8 codes), rows sorted by expert
  const float* x_scale = nullptr;  // kInt4Int8: [total_rows] the rows' scales (D = x_scale[row] * sums)
  // Int8 inputs: the weights' columns per scale group (a multiple of 128 dividing k, at most
  // kMaxInt8ScaleGroup; k for one scale per row). The integer sums run over whole groups.
  int scale_group = 128;
  float* d = nullptr;                            // [total_rows, n] fp32
  int experts = 0;        // at most kMaxFp4GemmExperts
  int n = 0, k = 0;       // weight rows and columns (k a multiple of 64)
  int total_rows = 0;     // rows of x (at least expert_offsets[experts])
  int tile_inputs = 256;  // input rows per tile: 32, 64, 128, 192, 256 or 320 (kInt4Int8: 128; k a multiple of 128)
  const float* const* bias = nullptr;  // [experts] device pointers to [n] fp32 added to D (null: none)
  W4Format format = W4Format::kMxfp4;
  const float* global_scales = nullptr;  // NVFP4: [experts] (device); D = sum / global_scale (+ bias)
  int num_sms = 0;  // CTAs to launch (persistent: one per SM); 0: the current device's count
  // w13 repacked with gate and up rows interleaved (gate_up_source_row): inter (n = 2 inter), else 0.
  // D's columns are then the source rows, as without interleaving, unless act_rows is set.
  int gate_up_inter = 0;
  // With gate_up_inter: the epilogue applies the activation and writes its bf16 rows
  // [total_rows, inter] here instead of D (the forward's activation_rows_kernel, fused): gate and
  // up values (after the global scale and bias) rounded to bf16 when `round`, then
  // bf16(activate(activation, limit, g, up)).
  uint16_t* act_rows = nullptr;
  int activation = 0;  // qmoe::Activation: one that fuses_activation takes
  float limit = 7.0f;
  bool round = true;
  // GEMM2 of a forward whose combine rounds each weighted term to bf16 (round_intermediate, bf16
  // hidden states, the only ones this kernel takes): the epilogue writes those terms, bf16(w * D),
  // into `terms` [total_rows, n] instead of D, w being the row's routing weight
  // (slot_weights[row_slots[row]], or 1 without slot_weights: the router weight on the input).
  uint16_t* terms = nullptr;  // 16-byte aligned
  const int32_t* row_slots = nullptr;   // [total_rows] the slot of each sorted row (device)
  const float* slot_weights = nullptr;  // [slots] routing weights (device), or null
};
// D rows of each expert = x rows * dequant(W_e)^T, the products summed in fp32 by the tensor cores.
// MXFP4 and INT4: each weight the CPU's bf16 (dequant_mxfp4, dequant_int), bit for bit. NVFP4: the weights e2m1 * fp8(s)
// (exact bf16s), the sums divided by the global scale, as the dequantized path computes them (the
// CPU's weights are e2m1 * (fp8(s) / global): the same quantity, rounded elsewhere).
cudaError_t launch_fp4_grouped_gemm(const Fp4GemmParams& p, cudaStream_t stream);

}  // namespace qmoe::cuda
