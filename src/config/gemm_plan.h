// Which grouped-GEMM kernel of the CUDA backend runs a projection, and how the tensor-core kernel is
// launched: pure functions of the weight layout and the GEMM's input, tested on the CPU
// (tests/cpu/test_gemm_plan.cpp). No CUDA types: used by the CUDA host code, the kernels and tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/grouped_tile.h"
#include "qmoe/config.h"

namespace qmoe {

struct QuantWeight;
struct MoeLayer;

// How every expert of one projection (w13 or w2) is stored: the canonical checkpoint layout, in
// plain ints so that device code can read it.
struct GemmLayout {
  int format = 0;    // qmoe::WeightFormat
  int bits = 0;
  int strategy = 0;  // qmoe::Strategy
  int scale_kind = 0;  // 0 BF16, 1 F16, 2 F32, 3 F8_E4M3, 4 U8 (E8M0)
  int data_kind = 0;   // dense weights: 0 BF16, 1 F16, 2 F32
  bool round_to_scale_dtype = true;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t group_size = 0;
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  int64_t words_per_row = 0;  // packed int rows (int32 words)
  int64_t scale_cols = 1;     // second dimension of the scale tensor
  int64_t zp_cols = 0;        // second dimension of the zero-point tensor; 0 when symmetric or 1-D
  bool has_zero_point = false;  // asymmetric weights (a zero-point tensor of any rank)
};
GemmLayout gemm_layout_of(const QuantWeight& w, bool round_to_scale_dtype);

// The GEMM's input: its activation quantization (qmoe::ActQuant as an int, 0 = none) with the
// group size of per-group modes, and the model's activation dtype (0 BF16, 1 F16, 2 F32).
struct GemmInput {
  int act_quant = 0;
  int act_group = 0;
  int act_kind = 0;
  bool exactly_16_bit = true;  // unquantized input values are exact in the activation dtype
};

// The kernels, in the order the backend tries them.
enum class GemmKernel {
  kTensorCore16,     // moe_mma.cu on the 16-bit input (weight-only and unquantized schemes)
  kTensorCoreCodes,  // moe_mma.cu on the activation codes (W8A8, W4A8)
  kCudaCore,         // moe_gemv.cu where its layout fits, else moe_gemm.cu
};
std::string to_string(GemmKernel k);
GemmKernel plan_gemm_kernel(const GemmLayout& L, bool has_g_idx, const GemmInput& in);

// The prefill grouped GEMMs (CUTLASS wgmma + TMA kernels, src/cuda/grouped_sm90_*.cu), run on the
// GEMM input rows sorted by expert. kNone: the projection runs the decode kernels at every size.
enum class GroupedKernel {
  kNone,
  kFp8,   // FP8 codes x FP8 weights with tensor or channel scales, one input scale per row
  kInt8,  // INT8 codes x INT8 weights with tensor or channel scales, one input scale per row
  kBf16,  // bf16 inputs x bf16 weights (unquantized experts of bf16 models)
  kInt4Bf16,  // bf16 inputs x symmetric INT4 weights with bf16 group (>= 64) or channel scales, W4A16:
              // CUTLASS's mixed-input kernel, dequantizing in the mainloop (transposed: weights as A);
              // planned where kInt4RegsBf16 is not (no repacked copy, k not a multiple of 64)
  kFp8Block,  // FP8 codes with one scale per (row, 128 columns) x FP8 weights with 128 x 128 block
              // scales: CUTLASS's blockwise-scaled kernel, each 128-deep partial sum scaled in fp32
  kInt8Bf16,  // bf16 inputs x symmetric INT8 weights (packed or int8 storage) with bf16 group (>= 64)
              // or channel scales, W8A16: the mixed-input kernel of kInt4Bf16 on int8 codes
  kInt4Codes,  // W4A8 with INT8 activations (one scale per row; also int4 layers with FP8 activations
               // built directly: W4A8-FP8 checkpoints load as FP8 channel weights): the activation codes as bf16
               // values x symmetric INT4 weights with group (>= 64) or channel scales, dequantized
               // to bf16 (q * s rounded to bf16, with scales of other dtypes rounded to bf16 at load
               // first), the row scale in the epilogue; the kInt4Bf16 kernel
  kDequantBf16,  // bf16 inputs x weight-only weights that no kernel above takes but whose every
                 // dequantized value is a bf16 (groups of 32, zero points, act order, MXFP4, NVFP4
                 // weight-only): dequantized into a bf16 workspace, a batch of experts at a time,
                 // then the kBf16 kernel on them
  kMxfp4Bf16,  // bf16 inputs x MXFP4 weights (k a multiple of 64): our wgmma kernel, the codes
               // dequantized in registers from a copy repacked at load (cuda/fp4_gemm.h)
  kNvfp4Bf16,  // the same kernel on NVFP4 weight-only weights scaled as vLLM scales them (e2m1 *
               // fp8(s) in the GEMM, the global scale after it)
  kInt4RegsBf16,  // the same kernel on INT4 weights with bf16 scales (groups of a multiple of 16 or
                  // per row, with or without zero points; W4A16 g128 included since the thirtieth
                  // session): RNE_bf16((q - z) * s) in registers
  kF16,           // f16 inputs x f16 weights (unquantized experts of f16 models)
  kInt4F16,       // f16 inputs x symmetric INT4 weights with f16 group (>= 64) or channel scales (W4A16
                  // of f16 models): kInt4Bf16's mixed-input kernel with f16 types, RNE_f16(q * s)
  kInt8F16,       // the same for symmetric INT8 weights (W8A16 of f16 models): kInt8Bf16's in f16
  kDequantF16,    // f16 inputs x integer or FP8 weight-only weights with f16 scales rounded to f16
                  // (GPTQ / AWQ-like f16 checkpoints): dequantized into an f16 workspace, a batch of
                  // experts at a time, then the kF16 kernel on them
  kInt4Int8Regs,  // W4A8 with INT8 activations (one scale per row) x symmetric INT4 weights with bf16
                  // or fp32 group (a multiple of 128) or channel scales, k a multiple of 128: the 4-bit
                  // register kernel on int8 MMAs (cuda/fp4_gemm.h, kInt4Int8), each group's integer
                  // sum (exact; rounded to fp32 past 2^24) times its group scale in fp32 (the weights
                  // unrounded, as the reference keeps them); 128-row tiles only
};
std::string to_string(GroupedKernel k);
// Whether prefill kernel `kind` takes 16-bit input rows, bf16 (f16 for the f16 kernels) (else 8-bit
// codes with a scale per row, or per row and 128 columns: grouped_scales_per_row).
bool takes_16bit_rows(GroupedKernel kind);
// Whether it dequantizes a batch of experts into a workspace before its GEMM (kDequantBf16,
// kDequantF16).
bool dequantizes_to_workspace(GroupedKernel kind);
// The GEMM instance a prefill kernel runs: kBf16 for kDequantBf16, kF16 for kDequantF16, else itself.
GroupedKernel gemm_of(GroupedKernel kind);
// Whether it is a mixed-input kernel (weight-only codes dequantized in the mainloop; transposed).
bool dequantizes_weights(GroupedKernel kind);
// Whether it is our 4-bit kernel that dequantizes in registers (kMxfp4Bf16, kNvfp4Bf16,
// kInt4RegsBf16; kInt4Int8Regs, on int8 input rows).
bool dequantizes_in_registers(GroupedKernel kind);
// Whether GEMM2's CUTLASS kernel `kind` on layout `L` gets terms instances at load, whose epilogue
// writes the combine's bf16 terms bf16(w * y) instead of fp32 rows: the bf16 kernel on dense or
// dequantized weights without a global scale, or the FP8 (per-tensor / per-channel) kernel, without
// a bias (the CUTLASS kernels have both applied after the GEMM), with n % 8 == 0 (the terms' 16-byte
// bf16 stores).
bool cutlass_writes_terms(GroupedKernel kind, const GemmLayout& L, bool has_bias);
// Whether GEMM2 on prefill kernel `kind` writes the combine's terms in a forward with hidden dtype
// `act_kind` (0 bf16) and rounded intermediates `round`: the 4-bit register kernel, or
// cutlass_writes_terms; only for bf16 hidden states with rounding on, where the combine rounds each
// weighted term to bf16.
bool gemm2_writes_terms(GroupedKernel kind, const GemmLayout& L, bool has_bias, int act_kind, bool round);
// Whether every weight of layout `L` dequantizes (formats.h, as the CPU reference does it) to a
// value that bf16 holds exactly, so that a bf16 GEMM on the dequantized weights has the CPU's
// products: integer and FP8 codes times bf16 scales rounded to bf16, MXFP4, NVFP4 rounded to bf16.
bool dequantizes_to_bf16_exactly(const GemmLayout& L);
// The same for f16: integer and FP8 codes times f16 scales rounded to f16, dense f16.
bool dequantizes_to_f16_exactly(const GemmLayout& L);
// NVFP4 scaled in fp32 (vLLM's weight-only NVFP4): e2m1 * fp8(s) is a bf16 exactly, and the global
// divisor is applied to the GEMM's output rows instead (as the decode kernels apply it after their
// sums), so kDequantBf16 takes it too.
bool dequant_divides_by_global_scale(const GemmLayout& L);
// kDequantBf16's batches: how many experts of `expert_bytes` bf16 weights each (of num_experts) one
// batch dequantizes into a workspace of at most `workspace_bytes` (at least one expert).
int dequant_batch_experts(int64_t expert_bytes, int num_experts, int64_t workspace_bytes);
// Input scales per sorted row of prefill kernel `kind` on a k-column input: 1 (row-wise codes, also
// kInt4Codes's bf16 codes and kInt4Int8Regs's int8 ones), or one per 128 columns (kFp8Block); 0 for
// unscaled 16-bit rows.
int64_t grouped_scales_per_row(GroupedKernel kind, int64_t k);
// The prefill kernel for a projection whose decode kernel is `decode` (the sorted rows are gathered
// from the decode kernels' input codes, or are the 16-bit inputs of kBf16 / kDequantBf16). A bias
// is added to the output rows after the GEMM (launch_finish_expert_rows).
// `repacked_copy` (CudaMoeLayer's): whether the 4-bit register kernel may run on a repacked copy of
// the weights (as many bytes again as the checkpoint's 4-bit weights). Without it a layer keeps one
// copy: W4A16 with groups of >= 64 or channel scales runs CUTLASS's mixed-input kernel on the
// checkpoint's codes, W4A8-INT8 the bf16 W4A8 kernel (kInt4Codes: its weights rounded to bf16),
// MXFP4, NVFP4 and the other INT4 layouts the dequantized path (kDequantBf16, its workspace bounded).
GroupedKernel plan_grouped_kernel(const GemmLayout& L, bool has_g_idx, const GemmInput& in,
                                  GemmKernel decode, bool repacked_copy = true);
// Whether the 4-bit register kernel (kInt4RegsBf16) takes an INT4 layout: bf16 input rows, bf16
// scales rounded as the CPU rounds them, groups of a multiple of 16 in order or one per row, 4-bit
// zero points of the scales' shape, k a multiple of 64. plan_grouped_kernel picks it wherever it fits
// (and a repacked copy is allowed), before CUTLASS's mixed-input kernel (kInt4Bf16): W4A16 g128
// layers 0.80-1.02x CUTLASS's time (the fused activation and terms; its GEMMs 0.88-1.05x),
// thirtieth session, bench/NOTES.md.
bool int4_registers_fit(const GemmLayout& L, bool has_g_idx, const GemmInput& in);
// The tiles (GroupedTile, kGroupedTiles): config/grouped_tile.h.
std::string to_string(GroupedTile t);  // "small", "medium", "large", "huge", "tiny", "tiny48", "wide"
// Whether prefill kernel `kind` has an instance for tile `t` (kHuge, kWide: the FP8/INT8/BF16
// kernels and the 4-bit register kernel but for kInt4Int8Regs; kTiny, kTiny48: only the
// weight-dequantizing ones).
bool grouped_tile_built(GroupedKernel kind, GroupedTile t);
// Whether tile `t` of prefill kernel `kind` computes the product transposed, the weights as A
// (problem_mnk as (n, m_e, k)): the mixed-input kernels, and the FP8/INT8/BF16 kernels' kWide (the
// 4-bit register kernel, which has no CUTLASS problem sizes: false).
bool grouped_tile_swapped(GroupedKernel kind, GroupedTile t);
// The CUTLASS configuration behind tile `t` of prefill kernel `kind`, e.g. "coop 128x256 cluster 1x2"
// (input rows x weight rows; the transposed tiles' are weight rows x input rows).
std::string tile_config(GroupedKernel kind, GroupedTile t);
// Input rows per tile of the 4-bit register kernels (dequantizes_in_registers): 128 (kSmall; the
// int8 kernel's only tile), 192 (kWide), 320 (kHuge), otherwise 256.
int register_tile_inputs(GroupedTile t);
// The tile of prefill kernel `kind` for num_slots (tokens * top_k) slots over num_experts (all of
// them, local or not) on a GEMM of reduction k: the mean rows per expert decide, and for bf16 also k
// (gemm_tuning.h, measured on the H200).
GroupedTile plan_grouped_tile(GroupedKernel kind, int64_t num_slots, int num_experts, int64_t k);

// From how many tokens the automatic path runs prefill kernel `kind` on a layer of num_experts
// experts (all of them, local or not: each local expert gets tokens * top_k / num_experts rows on
// average) and top-k routing (the measured crossover, gemm_tuning.h: a token count, or for the
// mixed-input kernels (W4A16, W8A16, W4A8) mean rows per expert; kNone: never), and whether it does
// for a batch of `tokens`. `inter`: the layer's intermediate size per partition (GEMM2's reduction),
// on which the 4-bit register kernel's switch depends; `row_scales`: the GEMM's weights have one
// scale per row (has_row_scales), which moves the W4A8-INT8 register kernel's switch (its decode
// kernel streams such weights faster).
int64_t grouped_min_tokens(GroupedKernel kind, int num_experts, int top_k, int inter, bool row_scales = false);
bool use_grouped_kernel(GroupedKernel kind, int64_t tokens, int num_experts, int top_k, int inter,
                        bool row_scales = false);
// (By strategy, as the decode kernels choose their per-row path: a group as wide as the row keeps
// the group switch.)
inline bool has_row_scales(const GemmLayout& L) { return L.strategy == static_cast<int>(Strategy::kChannel); }

// Both GEMMs of a layer: layouts (of the first local expert; all share them), inputs and kernels, for
// hidden states of `act_kind` and the forward's rounding option (ForwardOptions::round_intermediate):
// GEMM1's input is exactly 16-bit unless a router weight rescaled it without rounding, GEMM2's
// unless the activation output is kept in fp32.
struct LayerGemmPlan {
  GemmLayout w13, w2;
  bool w13_has_g_idx = false, w2_has_g_idx = false;
  GemmInput in1, in2;
  GemmKernel k1 = GemmKernel::kCudaCore, k2 = GemmKernel::kCudaCore;
  GroupedKernel g1 = GroupedKernel::kNone, g2 = GroupedKernel::kNone;  // prefill kernels, if any
};
LayerGemmPlan plan_layer_gemms(const MoeLayer& layer, int act_kind, bool round_intermediate,
                               bool repacked_copy = true);

// What the CUDA backend's automatic path runs for a layer (qmoe inspect --cuda-plan): per GEMM its
// decode kernel, its prefill kernel and from how many tokens (-1: never), and the prefill tiles
// with the batch each takes over from (only where a prefill kernel exists; batches up to
// kPlanSummaryMaxTokens). Hidden states of `act_kind`, vLLM's rounding (the default forward) unless
// `round_intermediate` is false.
inline constexpr int64_t kPlanSummaryMaxTokens = 65536;
struct CudaPlanSummary {
  struct Gemm {
    std::string decode, prefill;  // to_string(GemmKernel), to_string(GroupedKernel)
    int64_t prefill_from_tokens = -1;
    // (from tokens, tile_config): the first entry from prefill_from_tokens, one more where the tile changes.
    std::vector<std::pair<int64_t, std::string>> tiles;
    bool writes_terms = false;  // GEMM2 on its prefill kernel writes the combine's terms (gemm2_writes_terms)
  };
  Gemm w13, w2;
  // The expert tensors CudaMoeLayer uploads with every expert local: the loaded layer's (W4A8-FP8 as
  // vLLM's FP8 products, 1 byte per weight), biases included; repacked copies are below.
  int64_t weight_bytes = 0;
  // The bf16 workspace CudaMoeLayer allocates for kDequantBf16 at the default budget with every
  // expert local, once its max_tokens reaches the crossover (0: no projection takes that path).
  int64_t dequant_workspace_bytes = 0;
  // The 4-bit register kernel's repacked weights with every expert local (repacked_weight_bytes),
  // allocated under the same conditions (0: no projection takes that path).
  int64_t repacked_weight_bytes = 0;
};
// The hidden-state dtype a checkpoint's layer implies (0 bf16, 1 f16): f16 where its experts' weight
// scales or dense weights are f16 (llm-compressor stores them in the model's dtype), else bf16.
int implied_act_kind(const MoeLayer& layer);
CudaPlanSummary summarize_cuda_plan(const MoeLayer& layer, int act_kind, bool repacked_copy = true,
                                    bool round_intermediate = true);

// The bytes of one expert's 4-bit weight (layout L) repacked for the register kernel `kind`: rows
// padded to 128, codes and scales (MXFP4's e8m0 as the checkpoint's; NVFP4's fp8 and INT4's bf16 as
// bf16 words, INT4's zero points as many again).
int64_t repacked_weight_bytes(GroupedKernel kind, const GemmLayout& L);

// kDequantBf16's default workspace budget per layer (CudaMoeLayer::kDefaultDequantWorkspaceBytes).
inline constexpr int64_t kDefaultDequantWorkspaceBytes = int64_t{1} << 30;
// kDequantBf16's batches for a layer plan (bf16 hidden states): experts per batch of each projection
// (0 where it does not take the path) for num_experts local experts within budget_bytes (at least
// one), and the workspace the larger batch needs (shared by both projections).
struct DequantBatches {
  int w13 = 0, w2 = 0;
  int64_t workspace_bytes = 0;
};
DequantBatches plan_dequant_batches(const LayerGemmPlan& plan, int num_experts, int64_t budget_bytes);

// Each projection's prefill kernel whatever the hidden dtype (g1, g2; the dtypes that do not plan
// it run the decode kernels; the layouts as plan_layer_gemms gives them). Throws qmoe::Error where
// two hidden dtypes would plan different ones.
LayerGemmPlan plan_prefill_kernels(const MoeLayer& layer, bool repacked_copy = true);

// The most local experts the 4-bit register kernel takes (its tile map in shared memory;
// cuda::kMaxFp4GemmExperts).
inline constexpr int kMaxRegisterKernelExperts = 1024;
// Whether a CudaMoeLayer built with these arguments may hold the register kernel's repacked copy:
// asked for (`repacked_copy`), a nonzero dequantization budget (zero: no memory beyond the weights)
// and at most kMaxRegisterKernelExperts local experts. Its plans take this as their repacked_copy,
// so where no copy can be made, W4A16 with groups of >= 64 or channel scales and W4A8-INT8 keep
// CUTLASS's kernels on the checkpoint's codes and the other 4-bit layouts the decode kernels (their
// dequantized path needs the budget too).
bool repacked_copy_possible(const MoeLayer& layer, int64_t dequant_budget_bytes, bool repacked_copy);

// The batch from which a layer that may hold the repacked copy (repacked_copy_possible) has it: the
// largest of its register-kernel GEMMs' crossovers over the decode kernels (the largest int64_t for
// layers without a register-kernel GEMM). CudaMoeLayer makes the copy where max_tokens reaches a
// GEMM's own crossover, and the copy's plan runs that GEMM on the decode kernels below it. (Until
// the forty-fourth session W4A16 with groups of >= 64 or channel scales ran CUTLASS's mixed-input
// kernel on the checkpoint's codes without the copy up to a later batch; the register kernel's
// 32-row tile now beats that kernel wherever it may run: gemm_tuning.h.)
int64_t repacked_copy_from_tokens(const MoeLayer& layer);

// The device scratch of a CudaMoeLayer for up to max_tokens tokens: every piece's bytes and offset
// in one allocation (256-byte aligned; absent pieces 0 bytes), with the dequantization batches
// (dequant_budget_bytes and repacked_copy as CudaMoeLayer takes them).
struct LayerWorkspace {
  enum Piece {
    kX, kX16, kXScale, kU, kAct, kAct16, kActScale, kY, kIds, kRouterWeights, kCounts, kOffsets, kSortedSlots,
    kSlotExpert, kAmax, kChunks, kSortedRows, kSortedScales, kSlotPosition, kDequantized, kHybridRows, kBusyCounts,
    kPieces
  };
  int64_t bytes[kPieces] = {};
  int64_t offset[kPieces] = {};
  int64_t total_bytes = 0;
  DequantBatches dequant;  // experts per dequantized batch of each projection (0: none)
};
LayerWorkspace plan_layer_workspace(const MoeLayer& layer, int max_tokens, int64_t dequant_budget_bytes,
                                    bool repacked_copy = true);

// The decode path's per-expert hybrid (skewed routing, bench/NOTES.md next steps item 10): in a
// forward that the mean rows per expert keep on the decode kernels, an expert with at least
// `busy_rows` slots runs on the 4-bit register kernel (it converts its weights once per 256 rows
// where the decode kernel converts them once per 32-slot chunk), the others stay on the decode
// kernel. It needs both GEMMs on the register kernel (g1, g2). hybrid_max_tokens: the batches it
// can take, those below either GEMM's switch to the prefill kernels (the workspace's act-rows piece
// holds their slots); 0 for layers without it or loaded for fewer tokens than the repacked copy
// needs (repacked_copy_from_tokens). hybrid_busy_rows: the threshold a forward of
// `num_slots` slots uses, 0 for none: `requested` (ForwardOptions::hybrid_busy_rows, or
// QMOE_HYBRID_ROWS; off by default, bench/NOTES.md "Thirty-eighth session": at 32 slots it gave
// DeepSeek-V3 and gpt-oss-120b 0.71-0.82 of the layer time at 128 skewed tokens but cost
// Mixtral-8x7B 1.03-1.04x at 32 and the 7168 x 256 experts up to 1.18x, measured with the whole
// forward unchained; it is now chained, with its register kernels plain launches inside the chain
// and its gather of the busy experts' rows only) where the layer has the hybrid and some expert can
// reach it.
int64_t hybrid_max_tokens(const MoeLayer& layer, const LayerGemmPlan& prefill_plan, int max_tokens);
int hybrid_busy_rows(GroupedKernel g1, GroupedKernel g2, int64_t num_slots, int requested);

// The tensor-core kernel's shape: 8 warps per block, each owning kMmaTilesPerWarp tiles of 16 rows;
// a step is 4 lanes x one 16-byte chunk of a row.
inline constexpr int kMmaWarps = 8;
inline constexpr int kMmaTilesPerWarp = 2;
// Its work items: each expert's sorted slots in chunks of kMmaChunkSlots (a multiple of every
// slots-per-pass), a block row each, so an expert with many slots (skewed routing) spreads over
// blocks instead of looping over its weights in one. mma_max_chunks: their most for `num_slots`
// slots over `num_experts` local experts (at most one partial chunk per expert), the grid's rows.
// (Other sizes only for A/B runs, QMOE_MMA_CHUNK_SLOTS: 8 or 16, the smaller passes, or a multiple of
// kMmaChunkSlots; the workspace holds the chunks of the smallest, kMmaMinChunkSlots.)
inline constexpr int kMmaChunkSlots = 32;
inline constexpr int kMmaMinChunkSlots = 8;
inline int64_t mma_max_chunks(int64_t num_slots, int64_t num_experts, int chunk_slots = kMmaChunkSlots) {
  return std::min(num_experts, num_slots) + num_slots / chunk_slots;
}
// A launch's most grid rows (gridDim.y).
inline constexpr int64_t kMaxGridRows = 65535;
// A forward's chunk size: `at_least` (kMmaChunkSlots, or an A/B run's size), or the smallest
// multiple of kMmaChunkSlots above it whose chunks fit the grid's rows (past ~2M slots, forced
// decode only; ~0.5M with chunks of 8).
int mma_chunk_slots(int64_t num_slots, int64_t num_experts, int at_least = kMmaChunkSlots);
// The launch heuristic's tuning constants are in gemm_tuning.h (only the planner includes them, so
// retuning rebuilds no kernel).

// Whether the tensor-core kernel, which indexes its 16-bit input rows (input_rows x cols) in
// 16-byte chunks with 32-bit ints, takes them; the backend falls back to the CUDA-core kernels if
// not.
bool mma_takes_input_rows(int64_t input_rows, int64_t cols);

// Elements per 16-byte chunk of a row in the kernel that plan_gemm_kernel picked.
int mma_elems_per_chunk(const GemmLayout& L);

struct MmaLaunch {
  int k_splits = 1;        // warps sharing a row tile's reduction
  int m_tiles = 1;         // row tiles per block (k_splits * m_tiles = kMmaWarps)
  int64_t row_blocks = 0;  // grid x: blocks over the rows (grid y: active experts)
  int slots_per_pass = 8;  // 8, 16 or 32 slots per pass over the weights (an expert with more loops)
};
// Where the tensor-core kernel applies the weights' scales: once (in the decoded weights or the
// epilogue), or to each step's products (codes with per-step scales: FP8 blocks, W4A8 with INT8
// activations; a second accumulator set).
enum class MmaScaling { kOnce, kPerStep };
// Blocks per SM the tensor-core kernel's register budget is set for (its __launch_bounds__): with one
// n-tile 3 for quantized weights (two pipelined register stages, 80 registers) and 4 for dense ones
// (64); 2 with more n-tiles or with per-step scales.
constexpr int mma_blocks_per_sm(int n_tiles, bool pipelined, MmaScaling scaling) {
  return n_tiles > 1 || scaling == MmaScaling::kPerStep ? 2 : pipelined ? 3 : 4;
}
// num_slots = tokens * top_k, known on the host (the routing is not); num_sms: the device's SMs.
MmaLaunch plan_mma_launch(const GemmLayout& L, int64_t num_slots, int num_local_experts, int num_sms,
                          MmaScaling scaling);
// Whether a chained tensor-core decode GEMM of num_slots slots (tokens * top_k) lets the next kernel
// launch only after its passes rather than right after its wait (launch.cuh; gemm_tuning.h).
bool mma_release_late(int64_t num_slots, int top_k);
// Distinct experts a uniform routing of num_slots slots is expected to touch.
double expected_active_experts(int64_t num_slots, int num_local_experts);

}  // namespace qmoe
