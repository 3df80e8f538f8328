// The CUDA backend's kernel plan (config/gemm_plan.h): which grouped GEMM each scheme gets and the
// tensor-core launch shape. Pure functions, so they are tested here, on the CPU; the kernels
// themselves are tested on the GPU (tests/cuda).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "config/gemm_plan.h"
#include "config/gemm_tuning.h"
#include "cpu/moe_math.h"
#include "qmoe/compare.h"
#include "qmoe/synthetic.h"

namespace qmoe {
namespace {

GemmInput input_of(const cpu::ActQuantParams& q, int act_kind = 0, bool exactly_16_bit = true) {
  return {static_cast<int>(q.kind), q.kind == ActQuant::kFp8Group ? q.group_size : 0, act_kind, exactly_16_bit};
}

struct SchemeCase {
  const char* scheme;
  GemmKernel kernel;  // both projections, bf16 model
};

TEST(GemmPlan, EverySyntheticSchemeGetsItsKernel) {
  const MoeShape shape{"small", 4, 2, 256, 128};
  const SchemeCase cases[] = {
      {"bf16", GemmKernel::kTensorCore16},
      {"w4a16_g128", GemmKernel::kTensorCore16},
      {"w4a16_g32", GemmKernel::kTensorCore16},
      {"w4a16_asym_g128", GemmKernel::kTensorCore16},
      {"w8a16", GemmKernel::kTensorCore16},
      {"mxfp4", GemmKernel::kTensorCore16},
      {"nvfp4a16", GemmKernel::kTensorCore16},
      {"nvfp4_w4a4", GemmKernel::kCudaCore},  // NVFP4 activations have no code path
      {"fp8_tensor", GemmKernel::kTensorCoreCodes},
      {"fp8_channel", GemmKernel::kTensorCoreCodes},
      {"fp8_block", GemmKernel::kTensorCoreCodes},
      {"int8", GemmKernel::kTensorCoreCodes},
      {"w4a8_fp8", GemmKernel::kTensorCoreCodes},
      {"w4a8_int8", GemmKernel::kTensorCoreCodes},
      {"w4a8_int8_channel", GemmKernel::kTensorCoreCodes},
  };
  ASSERT_EQ(std::size(cases), synthetic_schemes().size());
  for (const SchemeCase& c : cases) {
    const MoeLayer layer = synthetic_layer(c.scheme, shape, 7, 1);
    const ExpertWeights& ew = layer.experts[0];
    const GemmLayout w13 = gemm_layout_of(ew.w13, layer.round_weights_to_scale_dtype);
    const GemmLayout w2 = gemm_layout_of(ew.w2, layer.round_weights_to_scale_dtype);
    EXPECT_EQ(plan_gemm_kernel(w13, false, input_of(cpu::gemm1_act_quant(layer))), c.kernel) << c.scheme << " w13";
    EXPECT_EQ(plan_gemm_kernel(w2, false, input_of(cpu::gemm2_act_quant(layer))), c.kernel) << c.scheme << " w2";
  }
}

GemmLayout layout_of_scheme(const std::string& scheme) {
  const MoeLayer layer = synthetic_layer(scheme, {"small", 4, 2, 256, 128}, 3, 1);
  return gemm_layout_of(layer.experts[0].w13, layer.round_weights_to_scale_dtype);
}

// `layer` with act order: every weight gets a g_idx (in order; its presence is what plans care about).
MoeLayer with_act_order(MoeLayer layer) {
  for (ExpertWeights& ew : layer.experts)
    for (QuantWeight* w : {&ew.w13, &ew.w2}) {
      w->g_idx = Tensor(DType::kI32, {w->cols});
      for (int64_t c = 0; c < w->cols; ++c) w->g_idx.data<int32_t>()[c] = static_cast<int32_t>(c / w->group_size);
    }
  return layer;
}

// repacked_weight_bytes of a [rows, cols] weight (INT4: scales per `group` columns, 0 for one per row).
int64_t repacked(GroupedKernel kind, int64_t rows, int64_t cols, bool zero_points = false, int64_t group = 32) {
  GemmLayout L;
  L.rows = rows;
  L.cols = cols;
  L.has_zero_point = zero_points;
  L.strategy = static_cast<int>(group == 0 ? Strategy::kChannel : Strategy::kGroup);
  L.group_size = group;
  return repacked_weight_bytes(kind, L);
}

TEST(GemmPlan, InputsTheTensorCoresCannotTakeFallBack) {
  const GemmLayout int4 = layout_of_scheme("w4a16_g128"), dense = layout_of_scheme("bf16");
  const GemmLayout mxfp4 = layout_of_scheme("mxfp4"), fp8 = layout_of_scheme("fp8_channel");
  const GemmLayout block = layout_of_scheme("fp8_block");
  // F32 models, f16 inputs against bf16 scales or weights, MXFP4 (bf16 values) on f16 inputs.
  for (const GemmLayout& L : {int4, dense, mxfp4}) {
    EXPECT_EQ(plan_gemm_kernel(L, false, {0, 0, 2, true}), GemmKernel::kCudaCore);
    EXPECT_EQ(plan_gemm_kernel(L, false, {0, 0, 1, true}), GemmKernel::kCudaCore);
    // Inputs not exactly 16-bit (fp32 intermediates after a rescale or the activation).
    EXPECT_EQ(plan_gemm_kernel(L, false, {0, 0, 0, false}), GemmKernel::kCudaCore);
    // Act order: groups are not contiguous in k.
    EXPECT_EQ(plan_gemm_kernel(L, true, {0, 0, 0, true}), GemmKernel::kCudaCore);
  }
  // An f16 model with f16 scales takes the f16 kernel.
  GemmLayout int4_f16 = int4;
  int4_f16.scale_kind = 1;
  EXPECT_EQ(plan_gemm_kernel(int4_f16, false, {0, 0, 1, true}), GemmKernel::kTensorCore16);
  // Codes do not depend on the 16-bit-ness of the unquantized input.
  EXPECT_EQ(plan_gemm_kernel(fp8, false, {static_cast<int>(ActQuant::kFp8PerToken), 0, 0, false}),
            GemmKernel::kTensorCoreCodes);
  // Per-group FP8 activations need groups of whole 64-column steps, and a block weight (or none).
  const int group = static_cast<int>(ActQuant::kFp8Group);
  EXPECT_EQ(plan_gemm_kernel(block, false, {group, 128, 0, true}), GemmKernel::kTensorCoreCodes);
  EXPECT_EQ(plan_gemm_kernel(block, false, {group, 32, 0, true}), GemmKernel::kCudaCore);
  EXPECT_EQ(plan_gemm_kernel(fp8, false, {group, 128, 0, true}), GemmKernel::kCudaCore);
  // NVFP4 weight-only keeps its weights unrounded; a rounded NVFP4 layout is not the kernel's.
  GemmLayout nvfp4 = layout_of_scheme("nvfp4a16");
  nvfp4.round_to_scale_dtype = true;
  EXPECT_EQ(plan_gemm_kernel(nvfp4, false, {0, 0, 0, true}), GemmKernel::kCudaCore);
  // A group layout without a group size is never given to the kernel.
  GemmLayout no_group = int4;
  no_group.group_size = 0;
  EXPECT_EQ(plan_gemm_kernel(no_group, false, {0, 0, 0, true}), GemmKernel::kCudaCore);
}

GemmLayout sized(const GemmLayout& base, int64_t rows, int64_t cols) {
  GemmLayout L = base;
  L.rows = rows;
  L.cols = cols;
  return L;
}

constexpr int kH200Sms = 132;

TEST(GemmPlan, LaunchShapeOfModelProjections) {
  const GemmLayout int4 = layout_of_scheme("w4a16_g128"), fp8 = layout_of_scheme("fp8_channel");
  const GemmLayout mxfp4 = layout_of_scheme("mxfp4");
  EXPECT_EQ(mma_elems_per_chunk(int4), 32);
  EXPECT_EQ(mma_elems_per_chunk(fp8), 16);
  EXPECT_EQ(mma_elems_per_chunk(layout_of_scheme("bf16")), 8);
  // Qwen3-30B-A3B w13 at 1 token: 2048 / 32 = 64 chunks, 16 steps of 4 chunks. Slices of 8 steps
  // would leave 12 blocks x ~7.8 experts, far below 3 waves: short slices (4 warps per row tile, 24
  // blocks of 64 rows) still leave ~187 blocks, under half a wave: 2-step slices, all 8 warps on one
  // row tile of 32 rows, 1536 / 32 = 48 blocks.
  MmaLaunch m = plan_mma_launch(sized(int4, 1536, 2048), 8, 128, kH200Sms, MmaScaling::kOnce);
  EXPECT_EQ(m.k_splits, 8);
  EXPECT_EQ(m.m_tiles, 1);
  EXPECT_EQ(m.row_blocks, 48);
  EXPECT_EQ(m.slots_per_pass, 8);
  // Its w2: 768 columns are 6 steps: single-step slices, 4 warps per row tile, 2 tiles per block,
  // 2048 / 64 = 32 blocks (8 with 4-step slices).
  m = plan_mma_launch(sized(int4, 2048, 768), 8, 128, kH200Sms, MmaScaling::kOnce);
  EXPECT_EQ(m.k_splits, 4);
  EXPECT_EQ(m.m_tiles, 2);
  EXPECT_EQ(m.row_blocks, 32);
  // Mixtral w2 FP8: 14336 / 16 = 896 chunks, 224 steps: all 8 warps split the reduction.
  m = plan_mma_launch(sized(fp8, 4096, 14336), 2, 8, kH200Sms, MmaScaling::kOnce);
  EXPECT_EQ(m.k_splits, 8);
  EXPECT_EQ(m.row_blocks, 4096 / 32);
  // gpt-oss w13 MXFP4 at 1 token: 2880 / 32 = 90 chunks, 23 steps (the last partial); a short grid:
  // 4-way split.
  m = plan_mma_launch(sized(mxfp4, 5760, 2880), 4, 128, kH200Sms, MmaScaling::kOnce);
  EXPECT_EQ(m.k_splits, 4);
  EXPECT_EQ(m.row_blocks, 5760 / 64);
}

TEST(GemmPlan, SlotsPerPassFollowTheExpectedLoad) {
  const GemmLayout L = sized(layout_of_scheme("w4a16_g128"), 512, 2048);
  // Mean slots per expert m; pass size >= m + kMmaSlotSigmas sqrt(m) + 1 (truncated), capped by the
  // slots.
  ASSERT_EQ(kMmaSlotSigmas, 1.0);
  EXPECT_EQ(plan_mma_launch(L, 8, 128, kH200Sms, MmaScaling::kOnce).slots_per_pass, 8);    // Qwen3, 1 token
  EXPECT_EQ(plan_mma_launch(L, 512, 128, kH200Sms, MmaScaling::kOnce).slots_per_pass, 8);   // Qwen3, 64 tokens: 4 + 2 + 1
  EXPECT_EQ(plan_mma_launch(L, 1024, 128, kH200Sms, MmaScaling::kOnce).slots_per_pass, 16); // Qwen3, 128 tokens: 8 + 2.8 + 1
  EXPECT_EQ(plan_mma_launch(L, 16, 8, kH200Sms, MmaScaling::kOnce).slots_per_pass, 8);      // Mixtral, 8 tokens: 2 + 1.4 + 1
  EXPECT_EQ(plan_mma_launch(L, 64, 8, kH200Sms, MmaScaling::kOnce).slots_per_pass, 16);     // Mixtral, 32 tokens: 8 + 2.8 + 1
  EXPECT_EQ(plan_mma_launch(L, 56, 8, kH200Sms, MmaScaling::kOnce).slots_per_pass, 16);     // 7 + 2.6 + 1 (0 sigmas: 8)
  EXPECT_EQ(plan_mma_launch(L, 48, 8, kH200Sms, MmaScaling::kOnce).slots_per_pass, 16);     // 6 + 2.4 + 1 (0 sigmas: 8)
  EXPECT_EQ(plan_mma_launch(L, 128, 8, kH200Sms, MmaScaling::kOnce).slots_per_pass, 32);    // Mixtral, 64 tokens: 16 + 4 + 1
  EXPECT_EQ(plan_mma_launch(L, 2, 256, kH200Sms, MmaScaling::kOnce).slots_per_pass, 8);
  EXPECT_EQ(plan_mma_launch(L, 4096, 8, kH200Sms, MmaScaling::kOnce).slots_per_pass, 32);  // more loop over the weights
}

// The decode kernel's chunks: kMmaChunkSlots, a multiple of every slots-per-pass, and their most
// per forward (the grid's rows) bounds every routing: one partial chunk per active expert at most.
TEST(GemmPlan, DecodeChunksFitTheGrid) {
  for (int per_pass : {8, 16, 32}) EXPECT_EQ(kMmaChunkSlots % per_pass, 0);
  // A brute-force bound: every expert count's worst routing of S slots over E experts (one expert
  // with S - (E - 1) slots, the rest one each; or all equal) takes at most mma_max_chunks.
  for (int64_t E : {1, 8, 128, 384}) {
    for (int64_t S : {1, 7, 31, 32, 33, 64, 100, 1000, 8800}) {
      const int64_t active = std::min(E, S);
      const int64_t busy = S - (active - 1);
      const int64_t skewed = (busy + kMmaChunkSlots - 1) / kMmaChunkSlots + (active - 1);
      int64_t even = 0;
      for (int64_t e = 0; e < active; ++e) {
        const int64_t rows = S / active + (e < S % active ? 1 : 0);
        even += (rows + kMmaChunkSlots - 1) / kMmaChunkSlots;
      }
      EXPECT_LE(skewed, mma_max_chunks(S, E)) << E << " experts, " << S << " slots";
      EXPECT_LE(even, mma_max_chunks(S, E)) << E << " experts, " << S << " slots";
    }
  }
  // Chunks of kMmaChunkSlots while their grid fits, then the smallest multiple that fits; at least
  // the caller's size (the A/B override).
  EXPECT_EQ(mma_chunk_slots(8, 128), kMmaChunkSlots);
  EXPECT_EQ(mma_chunk_slots(16384 * 8, 256), kMmaChunkSlots);
  EXPECT_EQ(mma_chunk_slots(16384 * 8, 256, 1 << 30), 1 << 30);
  EXPECT_EQ(mma_chunk_slots(16384 * 8, 256, kMmaMinChunkSlots), kMmaMinChunkSlots);
  // (The workspace holds the smallest chunks' list.)
  EXPECT_GE(mma_max_chunks(1000, 128, kMmaMinChunkSlots), mma_max_chunks(1000, 128));
  EXPECT_EQ(kMmaChunkSlots % kMmaMinChunkSlots, 0);
  for (int64_t E : {8, 384, 1024}) {
    for (int64_t S : {int64_t{2'000'000}, int64_t{2'100'000}, int64_t{10'000'000}, int64_t{2'147'483'000}}) {
      const int chunk = mma_chunk_slots(S, E);
      EXPECT_EQ(chunk % kMmaChunkSlots, 0);
      EXPECT_LE(mma_max_chunks(S, E, chunk), kMaxGridRows) << E << " experts, " << S << " slots";
      if (chunk > kMmaChunkSlots) EXPECT_GT(mma_max_chunks(S, E, chunk - kMmaChunkSlots), kMaxGridRows) << S;
      else EXPECT_LE(mma_max_chunks(S, E), kMaxGridRows);
      const int small = mma_chunk_slots(S, E, kMmaMinChunkSlots);
      EXPECT_LE(mma_max_chunks(S, E, small), kMaxGridRows) << E << " experts, " << S << " slots, chunks of 8";
      EXPECT_TRUE(small == kMmaMinChunkSlots || small % kMmaChunkSlots == 0) << small;
    }
  }
}

TEST(GemmPlan, SliceLengthFollowsTheGridSize) {
  const GemmLayout int4 = layout_of_scheme("w4a16_g128");
  // DeepSeek-V3 w13 (4096 x 7168, 56 steps): at 1 token 8 slots touch ~7.9 of 256 experts; 8-step
  // slices (64 rows per block) would give ~506 blocks, under 3 waves of 3 x 132: 4-step slices.
  MmaLaunch m = plan_mma_launch(sized(int4, 4096, 7168), 8, 256, kH200Sms, MmaScaling::kOnce);
  EXPECT_EQ(m.k_splits, 8);
  EXPECT_EQ(m.row_blocks, 4096 / 32);
  // At 8 tokens ~56.9 experts x 64 blocks: long slices.
  m = plan_mma_launch(sized(int4, 4096, 7168), 64, 256, kH200Sms, MmaScaling::kOnce);
  EXPECT_EQ(m.k_splits, 4);
  EXPECT_EQ(m.row_blocks, 4096 / 64);
  // Mixtral w13 (28672 x 4096, 32 steps): 1 token (2 slots, ~1.9 experts x 448 blocks) short,
  // 8 tokens (16 slots, ~7.1 experts) long.
  EXPECT_EQ(plan_mma_launch(sized(int4, 28672, 4096), 2, 8, kH200Sms, MmaScaling::kOnce).k_splits, 8);
  EXPECT_EQ(plan_mma_launch(sized(int4, 28672, 4096), 16, 8, kH200Sms, MmaScaling::kOnce).k_splits, 4);
  // A device with fewer SMs fills with fewer blocks.
  EXPECT_EQ(plan_mma_launch(sized(int4, 28672, 4096), 2, 8, 16, MmaScaling::kOnce).k_splits, 4);
}

// Grids under half a wave split the reduction further, down to single-step slices: Qwen3-30B-A3B's
// w2 (2048 x 768: 6 steps) at 1 token, 8 of 128 experts: 4-step slices leave one warp per row tile
// (256 rows per block, 8 x 8 = 64 blocks), 2-step slices 128 blocks, single steps 4 warps per tile
// (64 rows, 256 blocks, ~0.65 of a wave).
TEST(GemmPlan, GridsUnderHalfAWaveSplitTheReductionFurther) {
  const GemmLayout int4 = layout_of_scheme("w4a16_g128");
  ASSERT_EQ(kMmaMinGridWaves, 0.5);
  MmaLaunch m = plan_mma_launch(sized(int4, 2048, 768), 8, 128, kH200Sms, MmaScaling::kOnce);
  EXPECT_EQ(m.k_splits, 4);
  EXPECT_EQ(m.row_blocks, 2048 / 64);
  // w13 (1536 x 2048: 16 steps): 4-step slices give 24 x 8 = 192 blocks (< 198), 2-step slices 48 x 8.
  m = plan_mma_launch(sized(int4, 1536, 2048), 8, 128, kH200Sms, MmaScaling::kOnce);
  EXPECT_EQ(m.k_splits, 8);
  EXPECT_EQ(m.row_blocks, 1536 / 32);
  // 2 tokens (~15.1 experts): w13's 24 row blocks make ~362 blocks, over half a wave: 4-step slices;
  // w2's 8 row blocks (~121) go to 2-step slices (16 row blocks, ~242).
  m = plan_mma_launch(sized(int4, 1536, 2048), 16, 128, kH200Sms, MmaScaling::kOnce);
  EXPECT_EQ(m.k_splits, 4);
  m = plan_mma_launch(sized(int4, 2048, 768), 16, 128, kH200Sms, MmaScaling::kOnce);
  EXPECT_EQ(m.k_splits, 2);
  EXPECT_EQ(m.row_blocks, 2048 / 128);
  // DeepSeek-V3 at TP8, w2 (7168 x 256: 2 steps) at 1 token: 28 x 8 = 224 blocks, over half a wave.
  EXPECT_EQ(plan_mma_launch(sized(int4, 7168, 256), 8, 256, kH200Sms, MmaScaling::kOnce).k_splits, 1);
  // Mixtral's w2 (4096 x 14336) at 1 token: 128 x ~1.9 = 240 blocks, over half a wave (and already
  // at 8 warps per tile): unchanged.
  m = plan_mma_launch(sized(int4, 4096, 14336), 2, 8, kH200Sms, MmaScaling::kOnce);
  EXPECT_EQ(m.k_splits, 8);
  EXPECT_EQ(m.row_blocks, 4096 / 32);
  // Every launch keeps at least one step per warp and all warps of a block busy.
  for (int64_t cols : {256, 512, 768, 2048}) {
    const MmaLaunch l = plan_mma_launch(sized(int4, 2048, cols), 1, 128, kH200Sms, MmaScaling::kOnce);
    EXPECT_EQ(l.k_splits * l.m_tiles, kMmaWarps);
    EXPECT_GE((cols / 32 + 3) / 4, l.k_splits) << cols;
  }
}

// A wave is what the launched instance keeps resident: 3 blocks per SM for one n-tile of quantized
// weights, 4 for dense weights, 2 with per-step scales or more n-tiles (mma_blocks_per_sm).
TEST(GemmPlan, WavesCountTheLaunchedInstancesBlocksPerSm) {
  EXPECT_EQ(mma_blocks_per_sm(1, true, MmaScaling::kOnce), 3);
  EXPECT_EQ(mma_blocks_per_sm(1, false, MmaScaling::kOnce), 4);
  EXPECT_EQ(mma_blocks_per_sm(1, true, MmaScaling::kPerStep), 2);
  EXPECT_EQ(mma_blocks_per_sm(2, true, MmaScaling::kOnce), 2);
  EXPECT_EQ(mma_blocks_per_sm(4, false, MmaScaling::kOnce), 2);
  const GemmLayout int4 = layout_of_scheme("w4a16_g128"), dense = layout_of_scheme("bf16");
  // Qwen3-30B-A3B w2 (2048 x 768: 6 steps) at 3 tokens, ~22.2 of 128 experts: 4-step slices give 8
  // row blocks, ~178 blocks, under half of a 3-block wave (198) but over half of a 2-block one
  // (132): W4A8's per-step-scaled kernel keeps one warp per tile, W4A16's splits into 2-step slices.
  EXPECT_EQ(plan_mma_launch(sized(int4, 2048, 768), 24, 128, kH200Sms, MmaScaling::kPerStep).k_splits, 1);
  EXPECT_EQ(plan_mma_launch(sized(int4, 2048, 768), 24, 128, kH200Sms, MmaScaling::kOnce).k_splits, 2);
  // Mixtral w13 (28672 x 4096: 32 steps) at 1 token, ~1.9 experts: 8-step slices give 448 row blocks,
  // 840 blocks, over 3 waves of 2 blocks per SM (792) but under 3 waves of 3 (1188): W4A8 keeps the
  // long slices, W4A16 takes 4-step ones.
  EXPECT_EQ(plan_mma_launch(sized(int4, 28672, 4096), 2, 8, kH200Sms, MmaScaling::kPerStep).k_splits, 4);
  EXPECT_EQ(plan_mma_launch(sized(int4, 28672, 4096), 2, 8, kH200Sms, MmaScaling::kOnce).k_splits, 8);
  // Dense weights run 4 blocks per SM, so their half wave is larger: Qwen3-30B-A3B's bf16 w2 (24
  // steps of 32 columns) at 1 token, ~7.8 experts: 4-step slices give 32 row blocks, ~249 blocks,
  // over half of a 3-block wave (198) but under half of a 4-block one (264): 2-step slices.
  const MmaLaunch d = plan_mma_launch(sized(dense, 2048, 768), 8, 128, kH200Sms, MmaScaling::kOnce);
  EXPECT_EQ(d.k_splits, 8);
  EXPECT_EQ(d.row_blocks, 2048 / 32);
}

TEST(GemmPlan, ChainedDecodeGemmsReleaseLateUpToSixteenTokens) {
  EXPECT_TRUE(mma_release_late(1, 8));
  EXPECT_TRUE(mma_release_late(int64_t{kReleaseLateMaxTokens} * 8, 8));
  EXPECT_FALSE(mma_release_late(int64_t{kReleaseLateMaxTokens} * 8 + 1, 8));
  EXPECT_TRUE(mma_release_late(int64_t{kReleaseLateMaxTokens} * 2, 2));
  EXPECT_FALSE(mma_release_late(int64_t{kReleaseLateMaxTokens} * 2 + 2, 2));
}

TEST(GemmPlan, ExpectedActiveExperts) {
  EXPECT_DOUBLE_EQ(expected_active_experts(0, 8), 0.0);
  EXPECT_DOUBLE_EQ(expected_active_experts(1, 8), 1.0);
  EXPECT_NEAR(expected_active_experts(2, 8), 8.0 * (1.0 - 49.0 / 64.0), 1e-12);  // 1.875
  EXPECT_NEAR(expected_active_experts(100000, 8), 8.0, 1e-9);
}

TEST(GemmPlan, LaunchShapeInvariants) {
  const GemmLayout base = layout_of_scheme("w4a16_g128");
  for (int64_t cols : {32, 64, 128, 256, 512, 768, 1440, 2048, 2880, 4096, 7168, 14336})
    for (int64_t rows : {1, 31, 32, 100, 256, 1536, 28672})
      for (int64_t slots : {1, 64, 4096}) {
        const MmaLaunch m = plan_mma_launch(sized(base, rows, cols), slots, 16, kH200Sms, MmaScaling::kOnce);
        const int64_t steps = (cols / 32 + 3) / 4;
        EXPECT_EQ(m.k_splits * m.m_tiles, kMmaWarps);
        EXPECT_EQ(m.k_splits & (m.k_splits - 1), 0);
        // The split keeps at least one step per warp (kMmaLongSlice or kMmaShortSlice ones unless the
        // grid is under half a wave: GridsUnderHalfAWaveSplitTheReductionFurther).
        if (m.k_splits > 1) EXPECT_GE(steps, int64_t{m.k_splits});
        if (m.k_splits < kMmaWarps) EXPECT_LT(steps, int64_t{2} * m.k_splits * kMmaLongSlice);
        const int64_t rows_per_block = 16 * kMmaTilesPerWarp * m.m_tiles;
        EXPECT_GE(m.row_blocks * rows_per_block, rows);
        EXPECT_LT((m.row_blocks - 1) * rows_per_block, rows);
      }
}

TEST(GemmPlan, LayerPlanFollowsDtypeAndRounding) {
  MoeLayer layer = synthetic_layer("w4a16_g128", {"small", 4, 1, 256, 128}, 5, 1);
  LayerGemmPlan p = plan_layer_gemms(layer, 0, true);
  EXPECT_EQ(p.k1, GemmKernel::kTensorCore16);
  EXPECT_EQ(p.k2, GemmKernel::kTensorCore16);
  EXPECT_EQ(p.w13.rows, 256);  // gate and up stacked
  EXPECT_EQ(p.w2.cols, 128);
  // fp32 intermediates: the activation output is not 16-bit, the hidden states still are.
  p = plan_layer_gemms(layer, 0, false);
  EXPECT_EQ(p.k1, GemmKernel::kTensorCore16);
  EXPECT_EQ(p.k2, GemmKernel::kCudaCore);
  // A router weight on the input rescales the hidden states: 16-bit only when rounded back.
  layer.routing.router_weight_on_input = true;
  EXPECT_EQ(plan_layer_gemms(layer, 0, false).k1, GemmKernel::kCudaCore);
  EXPECT_EQ(plan_layer_gemms(layer, 0, true).k1, GemmKernel::kTensorCore16);
  // F32 hidden states; f16 hidden states against bf16 scales.
  EXPECT_EQ(plan_layer_gemms(layer, 2, true).k1, GemmKernel::kCudaCore);
  EXPECT_EQ(plan_layer_gemms(layer, 1, true).k2, GemmKernel::kCudaCore);
  // Activation codes, with the per-group FP8 group size carried to the kernel.
  const MoeLayer block = synthetic_layer("fp8_block", {"small", 4, 1, 256, 128}, 5, 1);
  p = plan_layer_gemms(block, 0, false);
  EXPECT_EQ(p.k1, GemmKernel::kTensorCoreCodes);
  EXPECT_EQ(p.k2, GemmKernel::kTensorCoreCodes);
  EXPECT_EQ(p.in1.act_group, 128);
  EXPECT_EQ(p.in1.act_quant, static_cast<int>(ActQuant::kFp8Group));
}

TEST(GemmPlan, EightBitCodesWithZeroPointsFallBack) {
  // vLLM's W8A8 methods take symmetric weights only; a layer with 8-bit zero points built some other
  // way must not reach the code kernels, which have none. INT4 (W4A8) handles them.
  MoeLayer int8 = synthetic_layer("int8", {"small", 4, 1, 256, 128}, 5, 1);
  EXPECT_EQ(plan_layer_gemms(int8, 0, true).k1, GemmKernel::kTensorCoreCodes);
  for (ExpertWeights& ew : int8.experts) ew.w13.zero_point = Tensor(DType::kI8, {ew.w13.rows, 1});
  EXPECT_EQ(plan_layer_gemms(int8, 0, true).k1, GemmKernel::kCudaCore);
  EXPECT_EQ(plan_layer_gemms(int8, 0, true).k2, GemmKernel::kTensorCoreCodes);
  MoeLayer w4a8 = synthetic_layer("w4a8_int8", {"small", 4, 1, 256, 128}, 5, 1);
  for (ExpertWeights& ew : w4a8.experts) ew.w13.zero_point = Tensor(DType::kI8, {ew.w13.rows, 2});
  EXPECT_EQ(plan_layer_gemms(w4a8, 0, true).k1, GemmKernel::kTensorCoreCodes);
}

TEST(GemmPlan, LayoutSaysWhetherWeightsHaveZeroPoints) {
  // The tensor-core kernels pick their zero-point variant from this flag, so a per-tensor zero point
  // (1-D, zp_cols 0) must set it too.
  EXPECT_FALSE(layout_of_scheme("w4a16_g128").has_zero_point);
  const GemmLayout asym = layout_of_scheme("w4a16_asym_g128");
  EXPECT_TRUE(asym.has_zero_point);
  EXPECT_GT(asym.zp_cols, 0);
  QuantWeight w = synthetic_layer("w4a16_g128", {"small", 4, 1, 256, 128}, 5, 1).experts[0].w13;
  w.strategy = Strategy::kTensor;
  w.group_size = 0;
  w.scale = Tensor(DType::kBF16, {1});
  w.zero_point = Tensor(DType::kI8, {1});
  const GemmLayout tensor_zero = gemm_layout_of(w, true);
  EXPECT_TRUE(tensor_zero.has_zero_point);
  EXPECT_EQ(tensor_zero.zp_cols, 0);
}

TEST(GemmPlan, InputsBeyondThirtyTwoBitOffsetsFallBack) {
  // 2^31 16-byte chunks of 16-bit input rows.
  EXPECT_TRUE(mma_takes_input_rows(65536 * 8, 7168));
  EXPECT_TRUE(mma_takes_input_rows((int64_t{1} << 20) - 1, 16384));
  EXPECT_FALSE(mma_takes_input_rows(int64_t{1} << 20, 16384));
}

TEST(GemmPlan, ExpertsBeyondThirtyTwoBitOffsetsFallBack) {
  const GemmLayout int4 = layout_of_scheme("w4a16_g128");
  const GemmInput bf16_in{};
  // 2^31 16-byte chunks (32 GiB) per expert is where the kernel's 32-bit offsets end.
  EXPECT_EQ(plan_gemm_kernel(sized(int4, int64_t{1} << 20, 32 * 2047), false, bf16_in), GemmKernel::kTensorCore16);
  EXPECT_EQ(plan_gemm_kernel(sized(int4, int64_t{1} << 20, 32 * 2048), false, bf16_in), GemmKernel::kCudaCore);
}

TEST(GemmPlan, PrefillKernelsOfEveryScheme) {
  // FP8 and INT8 W8A8 with one weight scale per tensor or channel and one input scale per row, FP8
  // with 128 x 128 weight blocks, unquantized bf16, symmetric W4A16 and W8A16 with groups of >= 64,
  // and W4A8 (FP8 or INT8 activations) have prefill kernels; the other weight-only schemes of bf16
  // models (groups of 32, zero points, FP4) run the bf16 one on weights dequantized at forward
  // time; NVFP4 with NVFP4 activations keeps the decode kernels at every size (for now).
  for (const std::string& scheme : synthetic_schemes()) {
    const MoeLayer layer = synthetic_layer(scheme, {"small", 4, 2, 256, 128}, 7, 1);
    const LayerGemmPlan p = plan_layer_gemms(layer, 0, true);
    // (W4A8-FP8 layers hold vLLM's effective FP8 weights: w4a8_fp8_as_fp8_channel.)
    const GroupedKernel want = scheme == "fp8_tensor" || scheme == "fp8_channel" || scheme == "w4a8_fp8"
                                   ? GroupedKernel::kFp8
                               : scheme == "int8"                                ? GroupedKernel::kInt8
                               : scheme == "bf16"                                ? GroupedKernel::kBf16
                               : scheme == "fp8_block"                           ? GroupedKernel::kFp8Block
                               : scheme == "w8a16"                               ? GroupedKernel::kInt8Bf16
                               : scheme == "w4a8_int8" || scheme == "w4a8_int8_channel" ? GroupedKernel::kInt4Int8Regs
                               : scheme == "nvfp4_w4a4"                          ? GroupedKernel::kNone
                               : scheme == "mxfp4"                               ? GroupedKernel::kMxfp4Bf16
                               : scheme == "nvfp4a16"                            ? GroupedKernel::kNvfp4Bf16
                               : scheme == "w4a16_g128" || scheme == "w4a16_g32" || scheme == "w4a16_asym_g128"
                                   ? GroupedKernel::kInt4RegsBf16
                                                                                 : GroupedKernel::kDequantBf16;
    EXPECT_EQ(p.g1, want) << scheme;
    EXPECT_EQ(p.g2, want) << scheme;
  }
  // bf16 with fp32 intermediates: GEMM2's input is not 16-bit, so only GEMM1 has one; bf16 weights
  // with f16 hidden states have none (F16ModelsPrefillKernels has the f16 models).
  const MoeLayer bf16 = synthetic_layer("bf16", {"small", 4, 2, 256, 128}, 7, 1);
  EXPECT_EQ(plan_layer_gemms(bf16, 0, false).g1, GroupedKernel::kBf16);
  EXPECT_EQ(plan_layer_gemms(bf16, 0, false).g2, GroupedKernel::kNone);
  EXPECT_EQ(plan_layer_gemms(bf16, 1, true).g1, GroupedKernel::kNone);
  // Biases (gpt-oss) are added after the prefill GEMM: they change no kernel.
  MoeLayer biased = synthetic_layer("mxfp4", {"small", 4, 2, 256, 128}, 7, 1);
  for (ExpertWeights& ew : biased.experts) {
    ew.w13_bias = Tensor(DType::kF32, {ew.w13.rows});
    ew.w2_bias = Tensor(DType::kF32, {ew.w2.rows});
  }
  EXPECT_EQ(plan_layer_gemms(biased, 0, true).g1, GroupedKernel::kMxfp4Bf16);
  EXPECT_EQ(plan_layer_gemms(biased, 0, true).g2, GroupedKernel::kMxfp4Bf16);
}

TEST(GemmPlan, Int4RegistersPrefillKernel) {
  // Every INT4 layout it reads (groups of 32 as Kimi-K2's, of 128, zero points) takes the 4-bit
  // register kernel; CUTLASS's mixed-input kernel only those it does not read (inputs not exactly
  // bf16, k a multiple of 32 but not of 64); act order, f32 products, f16 scales: neither.
  const GemmKernel mma = GemmKernel::kTensorCore16;
  const GemmLayout g32 = layout_of_scheme("w4a16_g32"), asym = layout_of_scheme("w4a16_asym_g128");
  ASSERT_TRUE(asym.has_zero_point);
  EXPECT_EQ(plan_grouped_kernel(g32, false, GemmInput{}, mma), GroupedKernel::kInt4RegsBf16);
  EXPECT_EQ(plan_grouped_kernel(asym, false, GemmInput{}, mma), GroupedKernel::kInt4RegsBf16);
  const GemmLayout g128 = layout_of_scheme("w4a16_g128");
  EXPECT_EQ(plan_grouped_kernel(g128, false, GemmInput{}, mma), GroupedKernel::kInt4RegsBf16);
  EXPECT_EQ(plan_grouped_kernel(g128, false, GemmInput{0, 0, 0, false}, mma), GroupedKernel::kInt4Bf16);
  GemmLayout channel_k96 = g128;
  channel_k96.strategy = static_cast<int>(Strategy::kChannel);
  channel_k96.cols = 96;
  channel_k96.scale_cols = 1;
  EXPECT_EQ(plan_grouped_kernel(channel_k96, false, GemmInput{}, mma), GroupedKernel::kInt4Bf16);
  channel_k96.cols = 128;
  EXPECT_EQ(plan_grouped_kernel(channel_k96, false, GemmInput{}, mma), GroupedKernel::kInt4RegsBf16);
  EXPECT_EQ(plan_grouped_kernel(g32, true, GemmInput{}, mma), GroupedKernel::kDequantBf16);  // g_idx
  EXPECT_TRUE(int4_registers_fit(g128, false, GemmInput{}));
  EXPECT_TRUE(int4_registers_fit(g32, false, GemmInput{}));
  EXPECT_FALSE(int4_registers_fit(g32, true, GemmInput{}));
  GemmInput f16_rows;
  f16_rows.act_kind = 1;
  EXPECT_FALSE(int4_registers_fit(g32, false, f16_rows));
  EXPECT_FALSE(int4_registers_fit(layout_of_scheme("w8a16"), false, GemmInput{}));
  GemmLayout unrounded = g32, f16_scales = g32, k96 = g32;
  unrounded.round_to_scale_dtype = false;
  f16_scales.scale_kind = 1;
  k96.cols = 96;
  k96.scale_cols = 3;
  EXPECT_NE(plan_grouped_kernel(unrounded, false, GemmInput{}, mma), GroupedKernel::kInt4RegsBf16);
  EXPECT_NE(plan_grouped_kernel(f16_scales, false, GemmInput{}, mma), GroupedKernel::kInt4RegsBf16);
  EXPECT_EQ(plan_grouped_kernel(k96, false, GemmInput{}, mma), GroupedKernel::kDequantBf16);
  EXPECT_TRUE(dequantizes_in_registers(GroupedKernel::kInt4RegsBf16));
  EXPECT_TRUE(takes_16bit_rows(GroupedKernel::kInt4RegsBf16));
  // Measured crossovers: 7 rows per expert for few experts; with many, by GEMM2's reduction (7 / 8
  // / 8: RegisterKernelSwitchFollowsTheReduction).
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kInt4RegsBf16, 8, 2, 14336), 28);    // Mixtral-8x7B
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kInt4RegsBf16, 384, 8, 256), 384);  // Kimi-K2 TP8
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kInt4RegsBf16, 128, 8, 768), 128);  // Qwen3-30B-A3B
  // Its copy: codes, bf16 scales as words (4 bytes per 32 weights; with zero points, where the groups
  // are a multiple of 64 or per row, per 128: one word per k-tile), zero points as many again.
  EXPECT_EQ(repacked(GroupedKernel::kInt4RegsBf16, 256, 128), 256 * 64 + 256 * 16);
  EXPECT_EQ(repacked(GroupedKernel::kInt4RegsBf16, 256, 128, true), 256 * 64 + 256 * 32);
  EXPECT_EQ(repacked(GroupedKernel::kInt4RegsBf16, 256, 256, false, 128), 256 * 128 + 256 * 32);
  EXPECT_EQ(repacked(GroupedKernel::kInt4RegsBf16, 256, 256, true, 64), 256 * 128 + 256 * 16);
  EXPECT_EQ(repacked(GroupedKernel::kInt4RegsBf16, 256, 256, true, 128), 256 * 128 + 256 * 16);
  EXPECT_EQ(repacked(GroupedKernel::kInt4RegsBf16, 200, 192, false, 0), 256 * 96 + 256 * 24);
  EXPECT_EQ(repacked(GroupedKernel::kInt4RegsBf16, 200, 192, true, 0), 256 * 96 + 256 * 12);
  EXPECT_EQ(repacked(GroupedKernel::kInt4RegsBf16, 256, 192, true, 96), 256 * 96 + 256 * 48);
  EXPECT_EQ(to_string(GroupedKernel::kInt4RegsBf16), "grouped wgmma (BF16) on INT4 weights dequantized in registers");
}

TEST(GemmPlan, Mxfp4PrefillKernel) {
  // bf16 rows exactly, k a multiple of 64 (the kernel's k-tile); else the dequantized path.
  const GemmKernel mma = GemmKernel::kTensorCore16;
  GemmLayout mxfp4 = layout_of_scheme("mxfp4");
  ASSERT_EQ(mxfp4.cols % 64, 0);
  EXPECT_EQ(plan_grouped_kernel(mxfp4, false, GemmInput{}, mma), GroupedKernel::kMxfp4Bf16);
  EXPECT_EQ(plan_grouped_kernel(mxfp4, false, {0, 0, 1, true}, mma), GroupedKernel::kNone);    // f16 rows
  EXPECT_EQ(plan_grouped_kernel(mxfp4, false, {0, 0, 0, false}, mma), GroupedKernel::kNone);   // fp32 rows
  GemmLayout k96 = mxfp4;
  k96.cols = 96;
  k96.scale_cols = 3;
  EXPECT_EQ(plan_grouped_kernel(k96, false, GemmInput{}, mma), GroupedKernel::kDequantBf16);
  // Only the loader's layout: groups of 32 e8m0 scales, [rows, cols / 32], in order.
  GemmLayout g64 = mxfp4, f32_scales = mxfp4, padded = mxfp4;
  g64.group_size = 64;
  g64.scale_cols = mxfp4.cols / 64;
  f32_scales.scale_kind = 2;
  padded.scale_cols += 1;
  for (const GemmLayout& L : {g64, f32_scales, padded})
    EXPECT_NE(plan_grouped_kernel(L, false, GemmInput{}, mma), GroupedKernel::kMxfp4Bf16);
  EXPECT_NE(plan_grouped_kernel(mxfp4, true, GemmInput{}, mma), GroupedKernel::kMxfp4Bf16);  // g_idx
  // 16-bit rows, no input scales; its two tiles, 128 input rows up to kMxfp4Tiles.max_rows_for_128 rows
  // per expert; its crossover in rows per expert.
  EXPECT_TRUE(takes_16bit_rows(GroupedKernel::kMxfp4Bf16));
  EXPECT_FALSE(dequantizes_weights(GroupedKernel::kMxfp4Bf16));
  EXPECT_EQ(grouped_scales_per_row(GroupedKernel::kMxfp4Bf16, 2880), 0);
  for (int t = 0; t < kGroupedTiles; ++t) {
    const auto tile = static_cast<GroupedTile>(t);
    EXPECT_EQ(grouped_tile_built(GroupedKernel::kMxfp4Bf16, tile), tile != GroupedTile::kMedium);
    EXPECT_FALSE(grouped_tile_swapped(GroupedKernel::kMxfp4Bf16, tile));  // (no CUTLASS problem sizes)
  }
  EXPECT_EQ(tile_config(GroupedKernel::kMxfp4Bf16, GroupedTile::kSmall), "persistent 128x128 (weight rows x input rows)");
  EXPECT_EQ(tile_config(GroupedKernel::kMxfp4Bf16, GroupedTile::kWide), "persistent 128x192 (weight rows x input rows)");
  EXPECT_EQ(tile_config(GroupedKernel::kMxfp4Bf16, GroupedTile::kLarge), "persistent 128x256 (weight rows x input rows)");
  EXPECT_EQ(tile_config(GroupedKernel::kMxfp4Bf16, GroupedTile::kTiny), "persistent 128x32 (weight rows x input rows)");
  EXPECT_EQ(tile_config(GroupedKernel::kMxfp4Bf16, GroupedTile::kTiny48), "persistent 128x64 (weight rows x input rows)");
  EXPECT_EQ(tile_config(GroupedKernel::kMxfp4Bf16, GroupedTile::kMedium), "none");
  // (Each format its own switches, measured: 128 rows below a mean of 128, then 192 in a range
  // around 128-176 where the routing's spread leaves most experts within one such tile, then 256;
  // MXFP4 takes 256 between its 128- and 192-row ranges. 320 rows around 244-312, every format,
  // again around 504-624 (NVFP4: 528-592), and around 768-920 (not NVFP4).)
  for (const auto& [kind, w] : {std::pair{GroupedKernel::kMxfp4Bf16, kMxfp4Tiles}, std::pair{GroupedKernel::kNvfp4Bf16, kNvfp4Tiles},
                                std::pair{GroupedKernel::kInt4RegsBf16, kInt4RegsTiles}}) {
    EXPECT_LT(w.max_rows_for_128, 128);
    EXPECT_LT(w.wide.from, 132);
    EXPECT_GT(w.wide.until, 160);
    auto tile_at = [&](int64_t slots) { return plan_grouped_tile(kind, slots, 128, 4096); };
    // 32 input rows below until_32 rows per expert, then 64 below until_64, then 128.
    EXPECT_EQ(tile_at(128), GroupedTile::kTiny);
    EXPECT_EQ(tile_at(int64_t{w.until_32} * 128 - 1), GroupedTile::kTiny);
    ASSERT_GT(w.until_64, w.until_32);
    EXPECT_EQ(tile_at(int64_t{w.until_32} * 128), GroupedTile::kTiny48);
    EXPECT_EQ(tile_at(int64_t{w.until_64} * 128 - 1), GroupedTile::kTiny48);
    EXPECT_EQ(tile_at(int64_t{w.until_64} * 128), GroupedTile::kSmall);
    EXPECT_EQ(tile_at(int64_t{w.max_rows_for_128} * 128), GroupedTile::kSmall);
    EXPECT_EQ(tile_at(int64_t{w.max_rows_for_128} * 128 + 1),
              w.wide.from > w.max_rows_for_128 ? GroupedTile::kLarge : GroupedTile::kWide);
    if (w.wide.from > w.max_rows_for_128) {
      EXPECT_EQ(tile_at(int64_t{w.wide.from} * 128 - 1), GroupedTile::kLarge);
      EXPECT_EQ(tile_at(int64_t{w.wide.from} * 128), GroupedTile::kWide);
    }
    EXPECT_EQ(tile_at(int64_t{w.wide.until} * 128 - 1), GroupedTile::kWide);
    EXPECT_EQ(tile_at(int64_t{w.wide.until} * 128), GroupedTile::kLarge);
    // 320 rows where 256-row tiles would take one more per expert than 320-row ones: a mean near
    // 256 (one 320 against two 256), near 512 (two against three) and, but for NVFP4, near 768
    // (three against four).
    ASSERT_LT(w.wide.until, w.huge[0].from);
    const int ranges = kind == GroupedKernel::kNvfp4Bf16 ? 2 : 3;
    if (ranges == 2) EXPECT_EQ(w.huge[2].until, 0);
    for (int range = 0; range < ranges; ++range) {
      const RowRange& r = w.huge[range];
      if (range > 0) EXPECT_LT(w.huge[range - 1].until, r.from);
      EXPECT_GT(r.from, (range + 1) * 240);
      EXPECT_LE(r.until, (range + 1) * 320);
      EXPECT_LT(r.from, r.until);
      EXPECT_EQ(tile_at(int64_t{r.from} * 128 - 1), GroupedTile::kLarge);
      EXPECT_EQ(tile_at(int64_t{r.from} * 128), GroupedTile::kHuge);
      EXPECT_EQ(tile_at(int64_t{r.until} * 128 - 1), GroupedTile::kHuge);
      EXPECT_EQ(tile_at(int64_t{r.until} * 128), GroupedTile::kLarge);
    }
    EXPECT_EQ(tile_at(int64_t{700} * 128), GroupedTile::kLarge);
    EXPECT_EQ(tile_at(int64_t{1024} * 128), GroupedTile::kLarge);
  }
  EXPECT_EQ(plan_grouped_tile(GroupedKernel::kInt4Int8Regs, int64_t{256} * 128, 128, 4096), GroupedTile::kSmall);
  EXPECT_EQ(tile_config(GroupedKernel::kMxfp4Bf16, GroupedTile::kHuge), "persistent 128x320 (weight rows x input rows)");
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kMxfp4Bf16, 128, 4, 2880), (int64_t{kGroupedMinRowsPerExpertMxfp4LongReduction} * 128 + 3) / 4);
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kMxfp4Bf16, 8, 2, 14336), int64_t{kGroupedMinRowsPerExpertMxfp4FewExperts} * 4);
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kMxfp4Bf16, 8, 2, 14336), 28);   // Mixtral-8x7B: 7 rows per expert
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kMxfp4Bf16, 128, 4, 2880), 192);  // gpt-oss-120b: 6
  // NVFP4 as vLLM's weight-only layers scale it (fp32 products: not rounded to the scale dtype), fp8
  // scales per 16 in order: the same kernel; rounded to bf16, the dequantized path.
  GemmLayout nvfp4 = layout_of_scheme("nvfp4a16");
  ASSERT_FALSE(nvfp4.round_to_scale_dtype);
  EXPECT_EQ(plan_grouped_kernel(nvfp4, false, GemmInput{}, mma), GroupedKernel::kNvfp4Bf16);
  GemmLayout nvfp4_rounded = nvfp4, nvfp4_g32 = nvfp4;
  nvfp4_rounded.round_to_scale_dtype = true;
  nvfp4_g32.group_size = 32;
  nvfp4_g32.scale_cols = nvfp4.cols / 32;
  EXPECT_EQ(plan_grouped_kernel(nvfp4_rounded, false, GemmInput{}, mma), GroupedKernel::kDequantBf16);
  EXPECT_NE(plan_grouped_kernel(nvfp4_g32, false, GemmInput{}, mma), GroupedKernel::kNvfp4Bf16);
  EXPECT_NE(plan_grouped_kernel(nvfp4, true, GemmInput{}, mma), GroupedKernel::kNvfp4Bf16);  // g_idx
  EXPECT_TRUE(dequantizes_in_registers(GroupedKernel::kNvfp4Bf16));
  EXPECT_TRUE(dequantizes_in_registers(GroupedKernel::kMxfp4Bf16));
  EXPECT_FALSE(dequantizes_in_registers(GroupedKernel::kDequantBf16));
  EXPECT_TRUE(takes_16bit_rows(GroupedKernel::kNvfp4Bf16));
  for (int t = 0; t < kGroupedTiles; ++t) {
    const auto tile = static_cast<GroupedTile>(t);
    EXPECT_EQ(grouped_tile_built(GroupedKernel::kNvfp4Bf16, tile), grouped_tile_built(GroupedKernel::kMxfp4Bf16, tile));
    EXPECT_EQ(tile_config(GroupedKernel::kNvfp4Bf16, tile), tile_config(GroupedKernel::kMxfp4Bf16, tile));
  }
  // Measured crossovers: 6 rows per expert for few experts; with many, 5 for long reductions (5 / 6
  // for medium / short ones: RegisterKernelSwitchFollowsTheReduction).
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kNvfp4Bf16, 8, 2, 14336), 24);     // Mixtral-8x7B
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kNvfp4Bf16, 128, 4, 2880), 160);  // gpt-oss-120b: 5
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kNvfp4Bf16, 129, 4, 2880), 162);  // (5 * 129 / 4 rounded up)
  // The repacked copy: rows padded to 128, codes and scales (gpt-oss-120b's w2: 2880 x 2880; NVFP4's
  // scales are bf16 words, 4 bytes per 32 weights).
  EXPECT_EQ(repacked(GroupedKernel::kNvfp4Bf16, 256, 128), 256 * 64 + 256 * 16);
  EXPECT_EQ(repacked(GroupedKernel::kMxfp4Bf16, 256, 128), 256 * 64 + 256 * 4);
  EXPECT_EQ(repacked(GroupedKernel::kMxfp4Bf16, 2880, 2880), int64_t{2944} * 1440 + int64_t{2944} * 90);
}

TEST(GemmPlan, PrefillKernelNeedsItsLayout) {
  const GemmLayout fp8 = layout_of_scheme("fp8_channel");
  const GemmInput per_token{static_cast<int>(ActQuant::kFp8PerToken), 0, 0, true};
  const GemmKernel codes = GemmKernel::kTensorCoreCodes;
  EXPECT_EQ(plan_grouped_kernel(fp8, false, per_token, codes), GroupedKernel::kFp8);
  for (ActQuant q : {ActQuant::kFp8PerTensorDynamic, ActQuant::kFp8Static})
    EXPECT_EQ(plan_grouped_kernel(fp8, false, {static_cast<int>(q), 0, 0, true}, codes), GroupedKernel::kFp8);
  // Per-group inputs, act order, a decode kernel without codes, rows or columns TMA cannot address
  // in 16-byte units: none.
  EXPECT_EQ(plan_grouped_kernel(fp8, false, {static_cast<int>(ActQuant::kFp8Group), 128, 0, true}, codes),
            GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(fp8, true, per_token, codes), GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(fp8, false, per_token, GemmKernel::kCudaCore), GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(sized(fp8, 256, 136), false, per_token, codes), GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(sized(fp8, 258, 256), false, per_token, codes), GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(sized(fp8, 2880, 2880), false, per_token, codes), GroupedKernel::kFp8);
  // Block-scaled FP8 weights: 128 x 128 blocks with inputs in groups of 128 columns only (k not a
  // multiple of 128 is fine: partial last blocks).
  const GemmLayout block = layout_of_scheme("fp8_block");
  const GemmInput groups128{static_cast<int>(ActQuant::kFp8Group), 128, 0, true};
  EXPECT_EQ(plan_grouped_kernel(block, false, groups128, codes), GroupedKernel::kFp8Block);
  EXPECT_EQ(plan_grouped_kernel(sized(block, 2880, 2880), false, groups128, codes), GroupedKernel::kFp8Block);
  EXPECT_EQ(plan_grouped_kernel(block, false, per_token, codes), GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(block, false, {static_cast<int>(ActQuant::kFp8Group), 64, 0, true}, codes),
            GroupedKernel::kNone);
  GemmLayout block64 = block;
  block64.block_rows = block64.block_cols = 64;
  EXPECT_EQ(plan_grouped_kernel(block64, false, groups128, codes), GroupedKernel::kNone);
  // Scales per sorted row: one per 128 columns (rounded up) for block-scaled inputs.
  EXPECT_EQ(grouped_scales_per_row(GroupedKernel::kFp8Block, 7168), 56);
  EXPECT_EQ(grouped_scales_per_row(GroupedKernel::kFp8Block, 2880), 23);
  EXPECT_EQ(grouped_scales_per_row(GroupedKernel::kFp8, 7168), 1);
  EXPECT_EQ(grouped_scales_per_row(GroupedKernel::kInt4Bf16, 7168), 0);
}

TEST(GemmPlan, Int4PrefillKernelNeedsItsLayout) {
  // CUTLASS's mixed-input kernel: INT4 layouts the register kernel does not read (Int4RegistersPrefillKernel),
  // here bf16 inputs that are not exactly bf16.
  const GemmLayout int4 = layout_of_scheme("w4a16_g128");
  const GemmInput bf16_in{}, rounded_in{0, 0, 0, false};
  const GemmKernel mma = GemmKernel::kTensorCore16;
  EXPECT_EQ(plan_grouped_kernel(int4, false, rounded_in, mma), GroupedKernel::kInt4Bf16);
  EXPECT_EQ(plan_grouped_kernel(int4, false, bf16_in, mma), GroupedKernel::kInt4RegsBf16);
  EXPECT_TRUE(takes_16bit_rows(GroupedKernel::kInt4Bf16));
  EXPECT_FALSE(takes_16bit_rows(GroupedKernel::kFp8));
  // Channel scales (one group of k) and groups that are multiples of the 64-wide k-tiles.
  GemmLayout channel = int4, g64 = int4, g32 = int4, asym = int4, f16_scales = int4;
  channel.strategy = static_cast<int>(Strategy::kChannel);
  g64.group_size = 64;
  EXPECT_EQ(plan_grouped_kernel(channel, false, rounded_in, mma), GroupedKernel::kInt4Bf16);
  EXPECT_EQ(plan_grouped_kernel(g64, false, rounded_in, mma), GroupedKernel::kInt4Bf16);
  // Groups of 32 and zero points whose scale tensors are g128's (a layout the 4-bit register kernel
  // does not read: Int4RegistersPrefillKernel has the consistent ones), act order (whose decode
  // kernel is the CUDA-core one): the bf16 kernel on dequantized weights. f16 scales or inputs, k not
  // in 16-byte int4 rows, rows not in 16-byte scale rows: none.
  g32.group_size = 32;
  asym.has_zero_point = true;
  f16_scales.scale_kind = 1;
  EXPECT_EQ(plan_grouped_kernel(g32, false, bf16_in, mma), GroupedKernel::kDequantBf16);
  EXPECT_EQ(plan_grouped_kernel(asym, false, bf16_in, mma), GroupedKernel::kDequantBf16);
  EXPECT_EQ(plan_grouped_kernel(int4, true, bf16_in, GemmKernel::kCudaCore), GroupedKernel::kDequantBf16);
  EXPECT_EQ(plan_grouped_kernel(f16_scales, false, bf16_in, mma), GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(int4, false, {0, 0, 1, true}, mma), GroupedKernel::kNone);
  // The dequantization kernel indexes an expert's 8-column chunks in 32 bits: 2^31 chunks do not fit.
  EXPECT_EQ(plan_grouped_kernel(sized(g32, int64_t{1} << 17, int64_t{1} << 16), false, bf16_in, mma),
            GroupedKernel::kDequantBf16);
  EXPECT_EQ(plan_grouped_kernel(sized(g32, int64_t{1} << 18, int64_t{1} << 16), false, bf16_in, mma), GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(sized(g32, (int64_t{1} << 18) - 4, int64_t{1} << 16), false, bf16_in, mma),
            GroupedKernel::kDequantBf16);
  // (Dequantized, these take the bf16 kernel, whose rows are 16 bytes from 8 columns.)
  EXPECT_EQ(plan_grouped_kernel(sized(channel, 256, 48), false, bf16_in, mma), GroupedKernel::kDequantBf16);
  EXPECT_EQ(plan_grouped_kernel(sized(channel, 260, 256), false, bf16_in, mma), GroupedKernel::kDequantBf16);
  EXPECT_EQ(plan_grouped_kernel(sized(channel, 256, 40), false, bf16_in, mma), GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(sized(channel, 2880, 2880), false, bf16_in, mma), GroupedKernel::kInt4Bf16);
  // INT8 weight-only, packed (made signed at load) or int8 storage: the same kernel on int8 codes,
  // with the same limits (16-byte rows are 16 columns of int8).
  GemmLayout int8 = layout_of_scheme("w8a16"), int8_storage = int8, int8_asym = int8, int8_g32 = int8;
  int8_storage.format = static_cast<int>(WeightFormat::kIntUnpacked);
  int8_asym.has_zero_point = true;
  int8_g32.group_size = 32;
  EXPECT_EQ(plan_grouped_kernel(int8, false, bf16_in, mma), GroupedKernel::kInt8Bf16);
  EXPECT_EQ(plan_grouped_kernel(int8_storage, false, bf16_in, mma), GroupedKernel::kInt8Bf16);
  EXPECT_EQ(plan_grouped_kernel(sized(int8, 256, 136), false, bf16_in, mma), GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(int8_asym, false, bf16_in, mma), GroupedKernel::kDequantBf16);
  EXPECT_EQ(plan_grouped_kernel(int8_g32, false, bf16_in, mma), GroupedKernel::kDequantBf16);
  EXPECT_TRUE(takes_16bit_rows(GroupedKernel::kInt8Bf16));
  EXPECT_TRUE(dequantizes_weights(GroupedKernel::kInt8Bf16));
  EXPECT_FALSE(dequantizes_weights(GroupedKernel::kBf16));
}

TEST(GemmPlan, F16ModelsPrefillKernels) {
  // f16 models (f16 scales, dense f16 weights, f16 hidden states): unquantized experts take the f16
  // kernel, symmetric INT4 / INT8 with groups of >= 64 the mixed-input kernels in f16, the other integer and
  // FP8 weight-only layouts the f16 kernel on weights dequantized to f16, the
  // activation-quantizing schemes their code kernels (the hidden dtype only feeds the quantization);
  // MXFP4 and NVFP4 (scales beyond f16's range) keep the decode kernels.
  for (const std::string& scheme : synthetic_schemes()) {
    const MoeLayer bf16 = synthetic_layer(scheme, {"small", 4, 2, 256, 128}, 7, 1);
    const MoeLayer f16 = as_f16_model(bf16);
    const LayerGemmPlan p = plan_layer_gemms(f16, 1, true), codes = plan_layer_gemms(bf16, 0, true);
    const GroupedKernel want = scheme == "bf16"         ? GroupedKernel::kF16
                               : scheme == "w4a16_g128" ? GroupedKernel::kInt4F16
                               : scheme == "w8a16"      ? GroupedKernel::kInt8F16
                               : scheme == "w4a16_g32" || scheme == "w4a16_asym_g128" ? GroupedKernel::kDequantF16
                               : scheme == "mxfp4" || scheme == "nvfp4a16" || scheme == "nvfp4_w4a4" ? GroupedKernel::kNone
                               // (f16 scales: the int8 register kernel's repack reads bf16 ones)
                               : scheme == "w4a8_int8" || scheme == "w4a8_int8_channel" ? GroupedKernel::kInt4Codes
                                                       : codes.g1;
    EXPECT_EQ(p.g1, want) << scheme;
    EXPECT_EQ(p.g2, want) << scheme;
    // Each projection has one prefill kernel whatever the hidden dtype (CudaMoeLayer builds one): the
    // other dtypes plan it too or none.
    for (const MoeLayer* layer : {&bf16, &f16}) {
      std::set<GroupedKernel> g1, g2;
      for (int kind = 0; kind < 3; ++kind)
        for (bool round : {true, false}) {
          const LayerGemmPlan q = plan_layer_gemms(*layer, kind, round);
          if (q.g1 != GroupedKernel::kNone) g1.insert(q.g1);
          if (q.g2 != GroupedKernel::kNone) g2.insert(q.g2);
        }
      EXPECT_LE(g1.size(), 1u) << scheme << (layer == &f16 ? " f16" : " bf16");
      EXPECT_LE(g2.size(), 1u) << scheme << (layer == &f16 ? " f16" : " bf16");
    }
  }
  // The f16 kernels take f16 rows and no scales; the dequantizing one runs the f16 GEMM's tiles.
  EXPECT_TRUE(takes_16bit_rows(GroupedKernel::kF16));
  EXPECT_TRUE(takes_16bit_rows(GroupedKernel::kDequantF16));
  EXPECT_TRUE(dequantizes_to_workspace(GroupedKernel::kDequantF16));
  EXPECT_TRUE(dequantizes_weights(GroupedKernel::kInt4F16));
  EXPECT_TRUE(dequantizes_weights(GroupedKernel::kInt8F16));
  EXPECT_TRUE(takes_16bit_rows(GroupedKernel::kInt4F16));
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kInt4F16, 8, 2, 14336), grouped_min_tokens(GroupedKernel::kInt4Bf16, 8, 2, 14336));
  EXPECT_FALSE(dequantizes_to_workspace(GroupedKernel::kF16));
  EXPECT_EQ(gemm_of(GroupedKernel::kDequantF16), GroupedKernel::kF16);
  EXPECT_EQ(gemm_of(GroupedKernel::kDequantBf16), GroupedKernel::kBf16);
  EXPECT_EQ(grouped_scales_per_row(GroupedKernel::kF16, 256), 0);
  EXPECT_EQ(tile_config(GroupedKernel::kDequantF16, GroupedTile::kLarge), tile_config(GroupedKernel::kF16, GroupedTile::kLarge));
  EXPECT_EQ(plan_grouped_tile(GroupedKernel::kF16, 4096 * 2, 8, 4096), plan_grouped_tile(GroupedKernel::kBf16, 4096 * 2, 8, 4096));
  // (The f16 dequantized path's switch is its own: 128 rows per expert.)
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kDequantF16, 8, 2, 14336), kGroupedMinRowsPerExpertDequantF16 * 8 / 2);
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kF16, 8, 2, 14336), grouped_min_tokens(GroupedKernel::kBf16, 8, 2, 14336));
  // Exactly f16: integer / FP8 codes times f16 scales rounded to f16; not bf16 scales, unrounded
  // products, FP4 formats; and only with f16 inputs that are exactly f16.
  const GemmKernel mma = GemmKernel::kTensorCore16;
  const GemmInput f16_in{0, 0, 1, true};
  GemmLayout g32 = layout_of_scheme("w4a16_g32"), fp8 = layout_of_scheme("fp8_channel");
  g32.scale_kind = 1;
  fp8.scale_kind = 1;
  fp8.round_to_scale_dtype = true;
  EXPECT_TRUE(dequantizes_to_f16_exactly(g32));
  EXPECT_TRUE(dequantizes_to_f16_exactly(fp8));
  EXPECT_FALSE(dequantizes_to_bf16_exactly(g32));
  EXPECT_EQ(plan_grouped_kernel(g32, false, f16_in, mma), GroupedKernel::kDequantF16);
  GemmLayout g128 = layout_of_scheme("w4a16_g128"), g128_asym = g128;
  g128.scale_kind = 1;
  g128_asym.scale_kind = 1;
  g128_asym.has_zero_point = true;
  EXPECT_EQ(plan_grouped_kernel(g128, false, f16_in, mma), GroupedKernel::kInt4F16);
  EXPECT_EQ(plan_grouped_kernel(g128_asym, false, f16_in, mma), GroupedKernel::kDequantF16);  // zero points
  EXPECT_EQ(plan_grouped_kernel(g128, false, GemmInput{}, mma), GroupedKernel::kNone);       // bf16 inputs
  EXPECT_EQ(plan_grouped_kernel(g32, true, f16_in, GemmKernel::kCudaCore), GroupedKernel::kDequantF16);  // act order
  EXPECT_EQ(plan_grouped_kernel(fp8, false, f16_in, mma), GroupedKernel::kDequantF16);
  EXPECT_EQ(plan_grouped_kernel(g32, false, GemmInput{}, mma), GroupedKernel::kNone);      // bf16 inputs
  EXPECT_EQ(plan_grouped_kernel(g32, false, {0, 0, 1, false}, mma), GroupedKernel::kNone);  // not exactly f16
  GemmLayout unrounded = g32, bf16_scales = g32;
  unrounded.round_to_scale_dtype = false;
  bf16_scales.scale_kind = 0;
  EXPECT_FALSE(dequantizes_to_f16_exactly(unrounded));
  EXPECT_FALSE(dequantizes_to_f16_exactly(bf16_scales));
  EXPECT_FALSE(dequantizes_to_f16_exactly(layout_of_scheme("mxfp4")));
  EXPECT_EQ(plan_grouped_kernel(unrounded, false, f16_in, mma), GroupedKernel::kNone);
  GemmLayout dense = layout_of_scheme("bf16");
  EXPECT_EQ(plan_grouped_kernel(dense, false, f16_in, mma), GroupedKernel::kNone);  // bf16 weights
  dense.data_kind = 1;
  EXPECT_EQ(plan_grouped_kernel(dense, false, f16_in, mma), GroupedKernel::kF16);
  EXPECT_EQ(plan_grouped_kernel(dense, false, GemmInput{}, GemmKernel::kCudaCore), GroupedKernel::kNone);
  // A checkpoint's hidden dtype follows its scales (or dense weights): f16 models plan f16.
  EXPECT_EQ(implied_act_kind(as_f16_model(synthetic_layer("w4a16_g128", {"small", 4, 2, 256, 128}, 7, 1))), 1);
  EXPECT_EQ(implied_act_kind(as_f16_model(synthetic_layer("bf16", {"small", 4, 2, 256, 128}, 7, 1))), 1);
  EXPECT_EQ(implied_act_kind(synthetic_layer("w4a16_g128", {"small", 4, 2, 256, 128}, 7, 1)), 0);
  EXPECT_EQ(implied_act_kind(synthetic_layer("mxfp4", {"small", 4, 2, 256, 128}, 7, 1)), 0);
  // The workspace is sized as bf16's (2 bytes a weight).
  const MoeLayer f16_g32 = as_f16_model(synthetic_layer("w4a16_g32", {"small", 4, 2, 256, 128}, 7, 1));
  const DequantBatches b = plan_dequant_batches(plan_layer_gemms(f16_g32, 1, true), 4, int64_t{1} << 30);
  EXPECT_EQ(b.w13, 4);
  EXPECT_EQ(b.workspace_bytes, 4 * 2 * 256 * 256);
}

// A CudaMoeLayer's scratch: every piece sized from the layer and max_tokens, aligned, disjoint; the
// prefill pieces only where a prefill kernel exists; the dequantized batches only past their switch.
TEST(GemmPlan, LayerWorkspacePieces) {
  using W = LayerWorkspace;
  const MoeLayer fp8 = synthetic_layer("fp8_channel", {"small", 4, 2, 256, 128}, 7, 1);
  const W w = plan_layer_workspace(fp8, 8, int64_t{1} << 30);
  EXPECT_EQ(w.bytes[W::kX], 4 * 8 * 256);
  EXPECT_EQ(w.bytes[W::kU], 4 * 8 * 2 * 2 * 128);  // gated: gate and up
  EXPECT_EQ(w.bytes[W::kY], 4 * 8 * 2 * 256);
  EXPECT_EQ(w.bytes[W::kSortedRows], 8 * 2 * 256);  // FP8 codes, one byte each
  // Per sorted row: its input scale (per token), then at the tail every row's routing weight (the
  // terms instances read them from the last max_tokens * top_k floats).
  EXPECT_EQ(w.bytes[W::kSortedScales], 4 * 8 * 2 * (1 + 1));
  // 128 x 128 blocks: ceil(256 / 128) scales per row.
  const MoeLayer block = synthetic_layer("fp8_block", {"small", 4, 2, 256, 128}, 7, 1);
  EXPECT_EQ(plan_layer_workspace(block, 8, int64_t{1} << 30).bytes[W::kSortedScales], 4 * 8 * 2 * (2 + 1));
  EXPECT_EQ(w.bytes[W::kCounts], 4 * 4);
  EXPECT_EQ(w.bytes[W::kDequantized], 0);
  int64_t end = 0;
  for (int p = 0; p < W::kPieces; ++p) {
    EXPECT_EQ(w.offset[p] % 256, 0) << p;
    EXPECT_GE(w.offset[p], end) << p;
    end = w.offset[p] + w.bytes[p];
  }
  EXPECT_GE(w.total_bytes, end);
  EXPECT_LT(w.total_bytes, end + 256 * W::kPieces);
  EXPECT_GT(plan_layer_workspace(fp8, 64, 0).total_bytes, w.total_bytes);  // grows with max_tokens
  // No prefill kernel (NVFP4 activations): no sorted rows.
  const MoeLayer w4a4 = synthetic_layer("nvfp4_w4a4", {"small", 4, 2, 256, 128}, 7, 1);
  EXPECT_EQ(plan_layer_workspace(w4a4, 8, int64_t{1} << 30).bytes[W::kSortedRows], 0);
  // 16-bit rows for bf16 prefill; the dequantized batches past the switch and with a budget only.
  const MoeLayer g32 = as_f16_model(synthetic_layer("w4a16_g32", {"small", 4, 2, 256, 128}, 7, 1));
  const int from = static_cast<int>(grouped_min_tokens(GroupedKernel::kDequantF16, 4, 2, 128));
  EXPECT_EQ(plan_layer_workspace(g32, from - 1, int64_t{1} << 30).bytes[W::kDequantized], 0);
  const W dq = plan_layer_workspace(g32, from, int64_t{1} << 30);
  EXPECT_EQ(dq.bytes[W::kDequantized], 4 * 2 * 256 * 256);  // every expert's w13 in f16
  EXPECT_EQ(dq.dequant.w13, 4);
  EXPECT_EQ(dq.bytes[W::kSortedRows], int64_t{from} * 2 * 256 * 2);
  EXPECT_EQ(plan_layer_workspace(g32, from, 0).bytes[W::kDequantized], 0);
  EXPECT_EQ(plan_layer_workspace(g32, from, 0).dequant.w13, 0);
}

// The decode path's per-expert hybrid: a threshold only where both GEMMs have the 4-bit register
// kernel and some expert can reach it; its workspace (bf16 act rows of the batches below both
// GEMMs' switches, a busy count per local expert) only for layers loaded past those switches.
TEST(GemmPlan, PerExpertHybridThresholdAndWorkspace) {
  using W = LayerWorkspace;
  const GroupedKernel mx = GroupedKernel::kMxfp4Bf16, i4 = GroupedKernel::kInt4RegsBf16;
  EXPECT_EQ(hybrid_busy_rows(mx, mx, 4096, 128), 128);
  EXPECT_EQ(hybrid_busy_rows(i4, mx, 128, 128), 128);
  EXPECT_EQ(hybrid_busy_rows(mx, mx, 127, 128), 0);  // no expert can have 128 slots
  EXPECT_EQ(hybrid_busy_rows(mx, mx, 4096, 0), 0);    // off
  EXPECT_EQ(hybrid_busy_rows(mx, mx, 4096, -1), 0);
  EXPECT_EQ(hybrid_busy_rows(GroupedKernel::kFp8, mx, 4096, 128), 0);
  EXPECT_EQ(hybrid_busy_rows(mx, GroupedKernel::kNone, 4096, 128), 0);

  const MoeLayer mxfp4 = synthetic_layer("mxfp4", {"small", 16, 4, 256, 128}, 7, 1);
  const LayerGemmPlan plan = plan_prefill_kernels(mxfp4);
  ASSERT_TRUE(dequantizes_in_registers(plan.g1) && dequantizes_in_registers(plan.g2));
  const int64_t switch1 = grouped_min_tokens(plan.g1, 16, 4, 128, has_row_scales(plan.w13));
  const int64_t switch2 = grouped_min_tokens(plan.g2, 16, 4, 128, has_row_scales(plan.w2));
  const int64_t below = std::min(switch1, switch2) - 1;  // both GEMMs on the decode kernels
  const int copy_from = static_cast<int>(repacked_copy_from_tokens(mxfp4));
  ASSERT_GE(copy_from, std::max(switch1, switch2));
  EXPECT_EQ(hybrid_max_tokens(mxfp4, plan, copy_from - 1), 0);  // no repacked copy
  EXPECT_EQ(hybrid_max_tokens(mxfp4, plan, copy_from), below);
  EXPECT_EQ(hybrid_max_tokens(mxfp4, plan, 100000), below);
  const W w = plan_layer_workspace(mxfp4, 100000, int64_t{1} << 30);
  EXPECT_EQ(w.bytes[W::kHybridRows], 2 * below * 4 * 128);
  EXPECT_EQ(w.bytes[W::kBusyCounts], 4 * 16);
  EXPECT_EQ(plan_layer_workspace(mxfp4, copy_from - 1, int64_t{1} << 30).bytes[W::kHybridRows], 0);
  const MoeLayer fp8 = synthetic_layer("fp8_channel", {"small", 4, 2, 256, 128}, 7, 1);
  EXPECT_EQ(hybrid_max_tokens(fp8, plan_prefill_kernels(fp8), 100000), 0);
  EXPECT_EQ(plan_layer_workspace(fp8, 100000, int64_t{1} << 30).bytes[W::kBusyCounts], 0);
}

TEST(GemmPlan, DequantizedPrefillNeedsBf16ExactWeightsAndInputs) {
  // Every dequantized weight must be a bf16 (the CPU's value), and the input rows exactly bf16.
  const GemmKernel mma = GemmKernel::kTensorCore16;
  const GemmInput bf16_in{};
  GemmLayout mxfp4 = layout_of_scheme("mxfp4"), nvfp4_f32 = layout_of_scheme("nvfp4a16"), g32 = layout_of_scheme("w4a16_g32");
  GemmLayout nvfp4 = nvfp4_f32;
  nvfp4.round_to_scale_dtype = true;  // bf16(e2m1 * fp8(s) / global)
  EXPECT_TRUE(dequantizes_to_bf16_exactly(mxfp4));
  EXPECT_TRUE(dequantizes_to_bf16_exactly(nvfp4));
  EXPECT_TRUE(dequantizes_to_bf16_exactly(g32));
  EXPECT_EQ(plan_grouped_kernel(mxfp4, false, bf16_in, mma), GroupedKernel::kMxfp4Bf16);  // its own kernel
  EXPECT_EQ(plan_grouped_kernel(nvfp4, false, bf16_in, mma), GroupedKernel::kDequantBf16);
  // NVFP4 scaled in fp32 (as vLLM's weight-only NVFP4 layers are): not bf16 values, but e2m1 *
  // fp8(s) is, with the global divisor applied to the output rows.
  EXPECT_FALSE(dequantizes_to_bf16_exactly(nvfp4_f32));
  EXPECT_TRUE(dequant_divides_by_global_scale(nvfp4_f32));
  EXPECT_FALSE(dequant_divides_by_global_scale(nvfp4));
  GemmLayout nvfp4_g4 = nvfp4_f32;
  nvfp4_g4.group_size = 4;
  EXPECT_FALSE(dequant_divides_by_global_scale(nvfp4_g4));
  EXPECT_EQ(plan_grouped_kernel(nvfp4_g4, false, bf16_in, mma), GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(nvfp4_f32, false, bf16_in, mma), GroupedKernel::kNvfp4Bf16);  // its own kernel
  GemmLayout nvfp4_k96 = nvfp4_f32;
  nvfp4_k96.cols = 96;
  nvfp4_k96.scale_cols = 6;
  EXPECT_EQ(plan_grouped_kernel(nvfp4_k96, false, bf16_in, mma), GroupedKernel::kDequantBf16);
  EXPECT_EQ(plan_grouped_kernel(nvfp4_f32, true, bf16_in, GemmKernel::kCudaCore), GroupedKernel::kNone);
  // f32 scales, unrounded integer products: the values are not bf16s.
  GemmLayout g32_f32 = g32, g32_unrounded = g32;
  g32_f32.scale_kind = 2;
  g32_unrounded.round_to_scale_dtype = false;
  for (const GemmLayout& L : {g32_f32, g32_unrounded}) {
    EXPECT_FALSE(dequantizes_to_bf16_exactly(L));
    EXPECT_EQ(plan_grouped_kernel(L, false, bf16_in, mma), GroupedKernel::kNone);
  }
  // f16 models, fp32 inputs (not exactly 16-bit), quantized inputs: none.
  EXPECT_EQ(plan_grouped_kernel(g32, false, {0, 0, 1, true}, mma), GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(g32, false, {0, 0, 0, false}, GemmKernel::kCudaCore), GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(g32, false, {static_cast<int>(ActQuant::kFp8PerToken), 0, 0, true},
                                GemmKernel::kTensorCoreCodes),
            GroupedKernel::kNone);
  // The bf16 kernel's rows and tiles (not the mixed-input kernel's), and its own crossover.
  EXPECT_TRUE(takes_16bit_rows(GroupedKernel::kDequantBf16));
  EXPECT_FALSE(dequantizes_weights(GroupedKernel::kDequantBf16));
  EXPECT_EQ(grouped_scales_per_row(GroupedKernel::kDequantBf16, 4096), 0);
  for (int t = 0; t < kGroupedTiles; ++t) {
    const auto tile = static_cast<GroupedTile>(t);
    EXPECT_EQ(grouped_tile_built(GroupedKernel::kDequantBf16, tile), grouped_tile_built(GroupedKernel::kBf16, tile));
    EXPECT_EQ(tile_config(GroupedKernel::kDequantBf16, tile), tile_config(GroupedKernel::kBf16, tile));
  }
  for (int64_t slots : {64, 1024, 8192, 65536})
    EXPECT_EQ(plan_grouped_tile(GroupedKernel::kDequantBf16, slots, 128, 4096), plan_grouped_tile(GroupedKernel::kBf16, slots, 128, 4096));
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kDequantBf16, 128, 8, 768),
            (int64_t{kGroupedMinRowsPerExpertDequant} * 128 + 7) / 8);
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kDequantBf16, 8, 2, 14336), int64_t{kGroupedMinRowsPerExpertDequant} * 4);
}

TEST(GemmPlan, DequantizedBatchesOfALayer) {
  // 8 experts, w13 256 x 256 and w2 256 x 128 bf16 (128 KiB and 64 KiB per expert), W4A16 g32 with
  // act order.
  const MoeLayer mx = with_act_order(synthetic_layer("w4a16_g32", {"small", 8, 2, 256, 128}, 7, 1));
  const LayerGemmPlan plan = plan_layer_gemms(mx, 0, true);
  const DequantBatches all = plan_dequant_batches(plan, 8, int64_t{1} << 30);
  EXPECT_EQ(all.w13, 8);
  EXPECT_EQ(all.w2, 8);
  EXPECT_EQ(all.workspace_bytes, 8 * 2 * 256 * 256);
  const DequantBatches small = plan_dequant_batches(plan, 8, 3 * 2 * 256 * 256);
  EXPECT_EQ(small.w13, 3);
  EXPECT_EQ(small.w2, 6);
  EXPECT_EQ(small.workspace_bytes, 3 * 2 * 256 * 256);
  const DequantBatches one = plan_dequant_batches(plan, 8, 0);  // at least one expert
  EXPECT_EQ(one.w13, 1);
  EXPECT_EQ(one.workspace_bytes, 2 * 256 * 256);
  const LayerGemmPlan fp8 = plan_layer_gemms(synthetic_layer("fp8_channel", {"small", 8, 2, 256, 128}, 7, 1), 0, true);
  EXPECT_EQ(plan_dequant_batches(fp8, 8, int64_t{1} << 30).workspace_bytes, 0);
}

TEST(GemmPlan, DequantizedBatchesFitTheWorkspace) {
  const int64_t mib = int64_t{1} << 20;
  EXPECT_EQ(dequant_batch_experts(100 * mib, 8, 1024 * mib), 8);   // all experts fit
  EXPECT_EQ(dequant_batch_experts(235 * mib, 8, 1024 * mib), 4);   // Mixtral's w13: 4 of 235 MiB
  EXPECT_EQ(dequant_batch_experts(2048 * mib, 8, 1024 * mib), 1);  // at least one expert
  EXPECT_EQ(dequant_batch_experts(mib, 256, 16 * mib), 16);
  EXPECT_EQ(dequant_batch_experts(mib, 0, 16 * mib), 1);
}

TEST(GemmPlan, W4A8PrefillKernelNeedsItsLayout) {
  // W4A8 with INT8 activations, bf16 or fp32 scales per group of a multiple of 128 or per row, k a
  // multiple of 128: the register kernel on int8 MMAs. Otherwise row-wise FP8 or INT8 activation codes (taken
  // as bf16 values, one scale per row) x int4 weights with groups of >= 64 or channel scales, of any
  // scale dtype. (W4A8-FP8 checkpoints load as FP8 weights, w4a8_fp8_as_fp8_channel; int4 weights
  // with FP8 activations come from layers built otherwise.)
  const GemmLayout w4 = layout_of_scheme("w4a8_int8");
  const GemmKernel codes = GemmKernel::kTensorCoreCodes;
  const GemmInput fp8_in{static_cast<int>(ActQuant::kFp8PerToken), 0, 0, true};
  const GemmInput int8_in{static_cast<int>(ActQuant::kInt8PerToken), 0, 0, true};
  EXPECT_EQ(plan_grouped_kernel(w4, false, fp8_in, codes), GroupedKernel::kInt4Codes);
  EXPECT_EQ(plan_grouped_kernel(w4, false, int8_in, codes), GroupedKernel::kInt4Int8Regs);
  GemmLayout f32_scales = w4, asym = w4, g32 = w4, g64 = w4, g256 = w4, channel = w4, short_k = w4;
  f32_scales.scale_kind = 2;
  asym.has_zero_point = true;
  g32.group_size = 32;
  g64.group_size = 64;
  g256.group_size = 256;
  g256.scale_cols = g256.cols / 256;
  channel.strategy = static_cast<int>(Strategy::kChannel);
  channel.scale_cols = 1;
  short_k.cols = 192;  // (groups of 64 then)
  short_k.group_size = 64;
  EXPECT_EQ(plan_grouped_kernel(g256, false, int8_in, codes), GroupedKernel::kInt4Int8Regs);
  EXPECT_EQ(plan_grouped_kernel(channel, false, int8_in, codes), GroupedKernel::kInt4Int8Regs);
  EXPECT_EQ(plan_grouped_kernel(g64, false, int8_in, codes), GroupedKernel::kInt4Codes);
  EXPECT_EQ(plan_grouped_kernel(short_k, false, int8_in, codes), GroupedKernel::kInt4Codes);
  EXPECT_EQ(plan_grouped_kernel(f32_scales, false, int8_in, codes), GroupedKernel::kInt4Int8Regs);
  GemmLayout f16_scales = w4;  // (the register kernel reads bf16 or fp32 scales)
  f16_scales.scale_kind = 1;
  EXPECT_EQ(plan_grouped_kernel(f16_scales, false, int8_in, codes), GroupedKernel::kInt4Codes);
  EXPECT_EQ(plan_grouped_kernel(asym, false, int8_in, codes), GroupedKernel::kNone);
  GemmLayout partial_groups = w4;  // (scales for fewer groups than the columns hold)
  partial_groups.scale_cols -= 1;
  EXPECT_NE(plan_grouped_kernel(partial_groups, false, int8_in, codes), GroupedKernel::kInt4Int8Regs);
  GemmLayout rounded = w4;  // (weights rounded to bf16: the bf16 kernel's products)
  ASSERT_FALSE(w4.round_to_scale_dtype);
  rounded.round_to_scale_dtype = true;
  EXPECT_EQ(plan_grouped_kernel(rounded, false, int8_in, codes), GroupedKernel::kInt4Codes);
  EXPECT_FALSE(takes_16bit_rows(GroupedKernel::kInt4Int8Regs));
  EXPECT_TRUE(dequantizes_in_registers(GroupedKernel::kInt4Int8Regs));
  EXPECT_EQ(grouped_scales_per_row(GroupedKernel::kInt4Int8Regs, 4096), 1);
  for (int t = 0; t < kGroupedTiles; ++t)  // (int32 sums beside the fp32 ones: 128 input rows a tile)
    EXPECT_EQ(grouped_tile_built(GroupedKernel::kInt4Int8Regs, static_cast<GroupedTile>(t)),
              static_cast<GroupedTile>(t) == GroupedTile::kSmall);
  EXPECT_EQ(plan_grouped_tile(GroupedKernel::kInt4Int8Regs, 8192 * 8, 8, 4096), GroupedTile::kSmall);
  // Codes as the checkpoint's (half a byte per weight) and a bf16 (fp32) scale per row and 128
  // columns, rows padded to 128.
  EXPECT_EQ(repacked_weight_bytes(GroupedKernel::kInt4Int8Regs, w4), (w4.rows + 127) / 128 * 128 * (w4.cols / 2 + w4.cols / 64));
  EXPECT_EQ(repacked_weight_bytes(GroupedKernel::kInt4Int8Regs, f32_scales),
            (w4.rows + 127) / 128 * 128 * (w4.cols / 2 + w4.cols / 32));
  EXPECT_EQ(plan_grouped_kernel(f32_scales, false, fp8_in, codes), GroupedKernel::kInt4Codes);
  EXPECT_EQ(plan_grouped_kernel(asym, false, fp8_in, codes), GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(g32, false, fp8_in, codes), GroupedKernel::kNone);
  EXPECT_EQ(plan_grouped_kernel(w4, false, {static_cast<int>(ActQuant::kFp8Group), 128, 0, true}, codes),
            GroupedKernel::kNone);
  EXPECT_TRUE(takes_16bit_rows(GroupedKernel::kInt4Codes));
  EXPECT_EQ(grouped_scales_per_row(GroupedKernel::kInt4Codes, 4096), 1);
  EXPECT_EQ(grouped_scales_per_row(GroupedKernel::kInt4Bf16, 4096), 0);
}

// With many experts the 4-bit register kernel's switches go by GEMM2's reduction (the layer's
// intermediate size per partition), in three tiers with the values measured on one shape each. Few
// experts keep one switch whatever the reduction.
TEST(GemmPlan, RegisterKernelSwitchFollowsTheReduction) {
  const GroupedKernel mx = GroupedKernel::kMxfp4Bf16, nv = GroupedKernel::kNvfp4Bf16;
  const GroupedKernel int4 = GroupedKernel::kInt4RegsBf16;
  // gpt-oss-120b (128 experts, top-4, intermediate 2880): 6, 5 and 7 rows per expert.
  EXPECT_EQ(grouped_min_tokens(mx, 128, 4, 2880), 6 * 128 / 4);
  EXPECT_EQ(grouped_min_tokens(nv, 128, 4, 2880), 5 * 128 / 4);
  EXPECT_EQ(grouped_min_tokens(int4, 128, 4, 2880), 7 * 128 / 4);
  // Qwen3-30B-A3B (128, top-8, 768): 7, 5 and 8.
  EXPECT_EQ(grouped_min_tokens(mx, 128, 8, 768), 7 * 128 / 8);
  EXPECT_EQ(grouped_min_tokens(nv, 128, 8, 768), 5 * 128 / 8);
  EXPECT_EQ(grouped_min_tokens(int4, 128, 8, 768), 8 * 128 / 8);
  // DeepSeek-V3 and Kimi-K2 at TP8 (256 / 384, top-8, 256): 7, 6 and 8.
  EXPECT_EQ(grouped_min_tokens(mx, 256, 8, 256), 7 * 256 / 8);
  EXPECT_EQ(grouped_min_tokens(nv, 384, 8, 256), 6 * 384 / 8);
  EXPECT_EQ(grouped_min_tokens(int4, 256, 8, 256), 8 * 256 / 8);
  // The tier edges: kRegsMinInterLongReduction and kRegsMinInterMediumReduction belong to the longer tier.
  // (Checked on a format whose values differ across each edge since the forty-fourth session: INT4
  // at the long one, NVFP4 at the medium one.)
  EXPECT_EQ(grouped_min_tokens(int4, 128, 8, kRegsMinInterLongReduction), grouped_min_tokens(int4, 128, 8, 2880));
  EXPECT_EQ(grouped_min_tokens(int4, 128, 8, kRegsMinInterLongReduction - 1), grouped_min_tokens(int4, 128, 8, 768));
  EXPECT_NE(grouped_min_tokens(int4, 128, 8, kRegsMinInterLongReduction - 1), grouped_min_tokens(int4, 128, 8, 2880));
  EXPECT_EQ(grouped_min_tokens(nv, 128, 8, kRegsMinInterMediumReduction), grouped_min_tokens(nv, 128, 8, 768));
  EXPECT_EQ(grouped_min_tokens(nv, 128, 8, kRegsMinInterMediumReduction - 1), grouped_min_tokens(nv, 128, 8, 256));
  EXPECT_NE(grouped_min_tokens(nv, 128, 8, kRegsMinInterMediumReduction - 1), grouped_min_tokens(nv, 128, 8, 768));
  // Few experts (Mixtral-8x7B): one switch whatever the reduction.
  for (int inter : {256, 768, 14336}) {
    EXPECT_EQ(grouped_min_tokens(mx, 8, 2, inter), kGroupedMinRowsPerExpertMxfp4FewExperts * 4);
    EXPECT_EQ(grouped_min_tokens(nv, 8, 2, inter), kGroupedMinRowsPerExpertNvfp4FewExperts * 4);
    EXPECT_EQ(grouped_min_tokens(int4, 8, 2, inter), kGroupedMinRowsPerExpertInt4RegsFewExperts * 4);
  }
}

TEST(GemmPlan, PrefillFromTheCrossover) {
  // Each prefill kernel from its measured token count, whatever the layer's experts; decode batches
  // below stay on the decode kernels.
  const std::pair<GroupedKernel, int> crossovers[] = {{GroupedKernel::kFp8, kGroupedMinTokensFp8},
                                                      {GroupedKernel::kInt8, kGroupedMinTokensInt8},
                                                      {GroupedKernel::kBf16, kGroupedMinTokensBf16}};
  for (const auto& [kind, min_tokens] : crossovers) {
    EXPECT_GT(min_tokens, 1) << to_string(kind);  // one token decodes
    for (auto [experts, top_k] : {std::pair{8, 2}, std::pair{256, 8}}) {
      EXPECT_EQ(grouped_min_tokens(kind, experts, top_k, 2048), min_tokens) << to_string(kind);
      EXPECT_FALSE(use_grouped_kernel(kind, min_tokens - 1, experts, top_k, 2048)) << to_string(kind);
      EXPECT_TRUE(use_grouped_kernel(kind, min_tokens, experts, top_k, 2048)) << to_string(kind);
      EXPECT_TRUE(use_grouped_kernel(kind, 16384, experts, top_k, 2048)) << to_string(kind);
    }
  }
  EXPECT_FALSE(use_grouped_kernel(GroupedKernel::kNone, 16384, 8, 2, 14336));
  // FP8 128 x 128 blocks: the blockwise prefill kernel from one token (it was faster at 1-64).
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kFp8Block, 256, 8, 2048), kGroupedMinTokensFp8Block);
  EXPECT_TRUE(use_grouped_kernel(GroupedKernel::kFp8Block, 1, 256, 8, 2048));
  EXPECT_FALSE(use_grouped_kernel(GroupedKernel::kFp8Block, 0, 256, 8, 2048));
  // W4A16 from kGroupedMinRowsPerExpertInt4 mean rows per expert (its own value for few experts): Mixtral
  // (8 experts, top-2) at few_rows * 4 tokens, DeepSeek-V3 (256, top-8) at rows * 32.
  const GroupedKernel int4 = GroupedKernel::kInt4Bf16;
  const int rows = kGroupedMinRowsPerExpertInt4, few_rows = kGroupedMinRowsPerExpertInt4FewExperts;
  EXPECT_EQ(grouped_min_tokens(int4, 8, 2, 14336), few_rows * 4);
  EXPECT_EQ(grouped_min_tokens(int4, 256, 8, 2048), rows * 32);
  EXPECT_EQ(grouped_min_tokens(int4, kInt4FewExperts + 1, 1, 2048), rows * (kInt4FewExperts + 1));
  EXPECT_FALSE(use_grouped_kernel(int4, few_rows * 4 - 1, 8, 2, 14336));
  EXPECT_TRUE(use_grouped_kernel(int4, few_rows * 4, 8, 2, 14336));
  EXPECT_FALSE(use_grouped_kernel(int4, rows * 4, 256, 8, 2048));
  EXPECT_GE(grouped_min_tokens(int4, 1, 8, 2048), 2);  // never a single token
  // W8A16 by the same measure, with its own (lower) thresholds.
  const GroupedKernel int8 = GroupedKernel::kInt8Bf16;
  EXPECT_EQ(grouped_min_tokens(int8, 256, 8, 2048), kGroupedMinRowsPerExpertInt8 * 32);
  EXPECT_EQ(grouped_min_tokens(int8, 8, 2, 14336), kGroupedMinRowsPerExpertInt8FewExperts * 4);
  EXPECT_LE(kGroupedMinRowsPerExpertInt8, kGroupedMinRowsPerExpertInt4);
  // W4A8 likewise.
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kInt4Codes, 256, 8, 2048), kGroupedMinRowsPerExpertW4A8 * 32);
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kInt4Codes, 8, 2, 14336), kGroupedMinRowsPerExpertW4A8FewExperts * 4);
  // W4A8-INT8's int8 register kernel: Mixtral (6 rows: 24 tokens), DeepSeek-V3 (inter 2048: one row,
  // 32 tokens), Qwen3-30B-A3B (inter 768: two rows, 32 tokens), DeepSeek-V3 TP8 (inter 256: two rows).
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kInt4Int8Regs, 8, 2, 14336), 24);
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kInt4Int8Regs, 256, 8, 2048), 32);
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kInt4Int8Regs, 128, 8, 768), 32);
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kInt4Int8Regs, 256, 8, 256), 64);
  // With one scale per row its decode kernel runs longer: 9 rows on Mixtral (36 tokens), 5 with many
  // experts (DeepSeek-V3 160 tokens, Qwen3-30B-A3B 80, DeepSeek-V3 TP8 160).
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kInt4Int8Regs, 8, 2, 14336, true), 36);
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kInt4Int8Regs, 256, 8, 2048, true), 160);
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kInt4Int8Regs, 128, 8, 768, true), 80);
  EXPECT_EQ(grouped_min_tokens(GroupedKernel::kInt4Int8Regs, 256, 8, 256, true), 160);
  EXPECT_FALSE(use_grouped_kernel(GroupedKernel::kInt4Int8Regs, 35, 8, 2, 14336, true));
  EXPECT_TRUE(use_grouped_kernel(GroupedKernel::kInt4Int8Regs, 36, 8, 2, 14336, true));
  // (only that kernel's switch depends on it)
  for (GroupedKernel kind : {GroupedKernel::kFp8, GroupedKernel::kFp8Block, GroupedKernel::kInt8, GroupedKernel::kBf16,
                             GroupedKernel::kF16, GroupedKernel::kInt4Bf16, GroupedKernel::kInt4F16, GroupedKernel::kInt8Bf16,
                             GroupedKernel::kInt8F16, GroupedKernel::kInt4Codes, GroupedKernel::kDequantBf16,
                             GroupedKernel::kDequantF16, GroupedKernel::kMxfp4Bf16, GroupedKernel::kNvfp4Bf16,
                             GroupedKernel::kInt4RegsBf16, GroupedKernel::kNone})
    for (auto [experts, top_k, inter] : {std::tuple{8, 2, 14336}, std::tuple{256, 8, 2048}, std::tuple{128, 8, 768}})
      EXPECT_EQ(grouped_min_tokens(kind, experts, top_k, inter, true), grouped_min_tokens(kind, experts, top_k, inter))
          << to_string(kind);
  // The layouts: the synthetic per-row scheme has one scale per row, the g128 one does not; the plan
  // summary (inspect --cuda-plan) takes the per-row switch.
  const MoeLayer channel = synthetic_layer("w4a8_int8_channel", {"small", 8, 2, 256, 128}, 3, 1);
  const MoeLayer grouped = synthetic_layer("w4a8_int8", {"small", 8, 2, 256, 128}, 3, 1);
  EXPECT_TRUE(has_row_scales(plan_layer_gemms(channel, 0, true).w13));
  EXPECT_FALSE(has_row_scales(plan_layer_gemms(grouped, 0, true).w13));
  // (w2's 128 columns are one group of 128: one scale per row, but the group layout's switch, as its
  // decode kernel is the group one)
  EXPECT_FALSE(has_row_scales(plan_layer_gemms(grouped, 0, true).w2));
  const CudaPlanSummary c = summarize_cuda_plan(channel, 0), g = summarize_cuda_plan(grouped, 0);
  EXPECT_EQ(c.w13.prefill_from_tokens, kGroupedMinRowsPerExpertInt4Int8RowScalesFewExperts * 4);
  EXPECT_EQ(c.w2.prefill_from_tokens, kGroupedMinRowsPerExpertInt4Int8RowScalesFewExperts * 4);
  EXPECT_EQ(g.w13.prefill_from_tokens, kGroupedMinRowsPerExpertInt4Int8FewExperts * 4);
  EXPECT_EQ(g.w2.prefill_from_tokens, kGroupedMinRowsPerExpertInt4Int8FewExperts * 4);
}

TEST(GemmPlan, PrefillTileFollowsRowsPerExpert) {
  // Mean rows per expert: Qwen3-30B-A3B (128 experts, top-8) at 1024 tokens has 64, Mixtral (8,
  // top-2) at 4096 tokens 1024, DeepSeek-V3 (256, top-8) at 16 tokens 0.5. k: the GEMM's reduction.
  for (GroupedKernel kind : {GroupedKernel::kFp8, GroupedKernel::kInt8, GroupedKernel::kBf16}) {
    for (int64_t k : {int64_t{7168}, int64_t{kBf16MinReductionFor256}, int64_t{256}}) {
      // bf16 on a short reduction (the TP8 shapes' GEMM2): 128 x 192 pingpong; else 128 x 256.
      const GroupedTile large = kind == GroupedKernel::kBf16 && k < kBf16MinReductionFor256 ? GroupedTile::kLarge
                                                                                           : GroupedTile::kHuge;
      EXPECT_EQ(plan_grouped_tile(kind, int64_t{kGroupedMinRowsFor128} * 128 - 1, 128, k), GroupedTile::kSmall);
      EXPECT_EQ(plan_grouped_tile(kind, int64_t{kGroupedMinRowsFor128} * 128, 128, k), large);
      EXPECT_EQ(plan_grouped_tile(kind, 16384 * 2, 8, k), large);
      // The swapped 128 x 192 tile in its range of mean rows, whatever the reduction.
      EXPECT_EQ(plan_grouped_tile(kind, int64_t{kWideMinRowsPerExpert} * 128 - 1, 128, k), large);
      EXPECT_EQ(plan_grouped_tile(kind, int64_t{kWideMinRowsPerExpert} * 128, 128, k), GroupedTile::kWide);
      EXPECT_EQ(plan_grouped_tile(kind, int64_t{kWideMaxRowsPerExpert} * 128 - 1, 128, k), GroupedTile::kWide);
      EXPECT_EQ(plan_grouped_tile(kind, int64_t{kWideMaxRowsPerExpert} * 128, 128, k), large);
      EXPECT_EQ(plan_grouped_tile(kind, 8192 * 8, 384, k), GroupedTile::kWide);  // Kimi-K2 at 8192: 170.7 rows
      EXPECT_EQ(plan_grouped_tile(kind, 16 * 8, 256, k), GroupedTile::kSmall);
      EXPECT_EQ(plan_grouped_tile(kind, 0, 0, k), GroupedTile::kSmall);
    }
  }
  EXPECT_EQ(plan_grouped_tile(GroupedKernel::kBf16, 8192 * 8, 256, 256), GroupedTile::kLarge);
  EXPECT_EQ(plan_grouped_tile(GroupedKernel::kBf16, 8192 * 8, 256, 7168), GroupedTile::kHuge);
  EXPECT_EQ(plan_grouped_tile(GroupedKernel::kInt8, 8192 * 8, 256, 256), GroupedTile::kHuge);
  EXPECT_EQ(plan_grouped_tile(GroupedKernel::kBf16, 8192 * 8, 256, kBf16MinReductionFor256 - 1), GroupedTile::kLarge);
  // f16 and the dequantized kinds run bf16's tiles, the short-reduction rule included.
  for (GroupedKernel kind : {GroupedKernel::kF16, GroupedKernel::kDequantBf16, GroupedKernel::kDequantF16})
    for (int64_t k : {int64_t{256}, int64_t{7168}})
      EXPECT_EQ(plan_grouped_tile(kind, 8192 * 8, 256, k), plan_grouped_tile(GroupedKernel::kBf16, 8192 * 8, 256, k));
  // FP8 block: 64-row pingpong tiles, then 128 x 128 (DeepSeek-V3 at 4096 tokens: 128 rows); the
  // cluster-less third tile is never planned.
  const GroupedKernel block = GroupedKernel::kFp8Block;
  EXPECT_EQ(plan_grouped_tile(block, int64_t{kFp8BlockMinRowsForMedium} * 256 - 1, 256, 4096), GroupedTile::kSmall);
  EXPECT_EQ(plan_grouped_tile(block, int64_t{kFp8BlockMinRowsForMedium} * 256, 256, 4096), GroupedTile::kMedium);
  EXPECT_EQ(plan_grouped_tile(block, 16384 * 8, 8, 4096), GroupedTile::kMedium);
  EXPECT_EQ(tile_config(block, GroupedTile::kLarge), "coop 128x128 cluster 1x1");
  // W4A16 has its own thresholds (its tiles differ): 128 x 32, then 128 x 48 for a few rows per expert.
  const GroupedKernel int4 = GroupedKernel::kInt4Bf16;
  EXPECT_EQ(plan_grouped_tile(int4, 0, 0, 4096), GroupedTile::kTiny);
  EXPECT_EQ(plan_grouped_tile(int4, int64_t{kInt4MinRowsForTiny48} * 8 - 1, 8, 4096), GroupedTile::kTiny);
  EXPECT_EQ(plan_grouped_tile(int4, int64_t{kInt4MinRowsForTiny48} * 8, 8, 4096), GroupedTile::kTiny48);
  EXPECT_EQ(plan_grouped_tile(int4, int64_t{kInt4MinRowsForSmall} * 8 - 1, 8, 4096), GroupedTile::kTiny48);
  EXPECT_EQ(plan_grouped_tile(int4, int64_t{kInt4MinRowsForSmall} * 8, 8, 4096), GroupedTile::kSmall);
  EXPECT_EQ(plan_grouped_tile(GroupedKernel::kInt4Codes, 16 * 256, 256, 4096), GroupedTile::kTiny);
  // Mixtral at 128 tokens (32 rows per expert) and DeepSeek-V3 at 1024: 128 x 48.
  EXPECT_EQ(plan_grouped_tile(GroupedKernel::kInt4Codes, 128 * 2, 8, 4096), GroupedTile::kTiny48);
  EXPECT_EQ(plan_grouped_tile(GroupedKernel::kInt8Bf16, 1024 * 8, 256, 4096), GroupedTile::kTiny48);
  EXPECT_LT(kInt4MinRowsForTiny48, kInt4MinRowsForSmall);
  EXPECT_LT(kInt4MinRowsForSmall, kInt4MinRowsForMedium);
  EXPECT_EQ(plan_grouped_tile(int4, int64_t{kInt4MinRowsForMedium} * 256 - 1, 256, 4096), GroupedTile::kSmall);
  EXPECT_EQ(plan_grouped_tile(int4, int64_t{kInt4MinRowsForMedium} * 256, 256, 4096), GroupedTile::kMedium);
  EXPECT_EQ(plan_grouped_tile(int4, int64_t{kInt4MinRowsForLarge} * 8 - 1, 8, 4096), GroupedTile::kMedium);
  EXPECT_EQ(plan_grouped_tile(int4, int64_t{kInt4MinRowsForLarge} * 8, 8, 4096), GroupedTile::kLarge);
  EXPECT_LT(kInt4MinRowsForMedium, kInt4MinRowsForLarge);
  EXPECT_EQ(plan_grouped_tile(GroupedKernel::kInt8Bf16, int64_t{kInt4MinRowsForLarge} * 8, 8, 4096), GroupedTile::kLarge);
  EXPECT_EQ(to_string(GroupedTile::kLarge), "large");
  EXPECT_EQ(tile_config(GroupedKernel::kFp8, GroupedTile::kLarge), "pingpong 128x192 cluster 1x2");
  EXPECT_EQ(tile_config(int4, GroupedTile::kLarge), "coop 128x256 cluster 2x1 (weight rows x input rows)");
  // The fourth tile exists for the FP8, INT8 and BF16 kernels only.
  EXPECT_EQ(to_string(GroupedTile::kHuge), "huge");
  EXPECT_EQ(tile_config(GroupedKernel::kInt8, GroupedTile::kHuge), "coop 128x256 cluster 1x2");
  EXPECT_TRUE(grouped_tile_built(GroupedKernel::kFp8, GroupedTile::kHuge));
  EXPECT_TRUE(grouped_tile_built(GroupedKernel::kBf16, GroupedTile::kHuge));
  EXPECT_FALSE(grouped_tile_built(int4, GroupedTile::kHuge));
  EXPECT_FALSE(grouped_tile_built(block, GroupedTile::kHuge));
  EXPECT_FALSE(grouped_tile_built(GroupedKernel::kNone, GroupedTile::kSmall));
  EXPECT_TRUE(grouped_tile_built(block, GroupedTile::kLarge));
  EXPECT_EQ(tile_config(int4, GroupedTile::kHuge), "none");
  // The fifth only for the kernels that dequantize weights.
  EXPECT_EQ(to_string(GroupedTile::kTiny), "tiny");
  EXPECT_TRUE(grouped_tile_built(int4, GroupedTile::kTiny));
  EXPECT_TRUE(grouped_tile_built(GroupedKernel::kInt4Codes, GroupedTile::kTiny));
  EXPECT_TRUE(grouped_tile_built(GroupedKernel::kInt8Bf16, GroupedTile::kTiny));
  EXPECT_FALSE(grouped_tile_built(GroupedKernel::kFp8, GroupedTile::kTiny));
  EXPECT_FALSE(grouped_tile_built(block, GroupedTile::kTiny));
  EXPECT_FALSE(grouped_tile_built(GroupedKernel::kBf16, GroupedTile::kTiny));
  EXPECT_EQ(tile_config(int4, GroupedTile::kTiny), "coop 128x32 (weight rows x input rows)");
  EXPECT_EQ(tile_config(GroupedKernel::kFp8, GroupedTile::kTiny), "none");
  // The sixth too.
  EXPECT_EQ(to_string(GroupedTile::kTiny48), "tiny48");
  EXPECT_TRUE(grouped_tile_built(GroupedKernel::kInt4Codes, GroupedTile::kTiny48));
  EXPECT_TRUE(grouped_tile_built(GroupedKernel::kInt8Bf16, GroupedTile::kTiny48));
  EXPECT_FALSE(grouped_tile_built(GroupedKernel::kInt8, GroupedTile::kTiny48));
  EXPECT_FALSE(grouped_tile_built(block, GroupedTile::kTiny48));
  EXPECT_EQ(tile_config(int4, GroupedTile::kTiny48), "coop 128x48 (weight rows x input rows)");
  EXPECT_EQ(tile_config(GroupedKernel::kBf16, GroupedTile::kTiny48), "none");
  // The seventh for FP8, INT8 and BF16 only, swapped.
  EXPECT_EQ(to_string(GroupedTile::kWide), "wide");
  EXPECT_TRUE(grouped_tile_built(GroupedKernel::kBf16, GroupedTile::kWide));
  EXPECT_TRUE(grouped_tile_built(GroupedKernel::kF16, GroupedTile::kWide));
  EXPECT_TRUE(grouped_tile_built(GroupedKernel::kFp8, GroupedTile::kWide));
  EXPECT_TRUE(grouped_tile_built(GroupedKernel::kDequantBf16, GroupedTile::kWide));
  EXPECT_FALSE(grouped_tile_built(int4, GroupedTile::kWide));
  EXPECT_FALSE(grouped_tile_built(block, GroupedTile::kWide));
  EXPECT_TRUE(grouped_tile_built(GroupedKernel::kInt4RegsBf16, GroupedTile::kWide));
  EXPECT_FALSE(grouped_tile_built(GroupedKernel::kInt4Int8Regs, GroupedTile::kWide));
  // The register kernel's 320-row tile (kHuge), built for its bf16 formats only.
  EXPECT_TRUE(grouped_tile_built(GroupedKernel::kInt4RegsBf16, GroupedTile::kHuge));
  EXPECT_TRUE(grouped_tile_built(GroupedKernel::kMxfp4Bf16, GroupedTile::kHuge));
  EXPECT_FALSE(grouped_tile_built(GroupedKernel::kInt4Int8Regs, GroupedTile::kHuge));
  EXPECT_EQ(tile_config(GroupedKernel::kNvfp4Bf16, GroupedTile::kHuge), "persistent 128x320 (weight rows x input rows)");
  EXPECT_EQ(tile_config(GroupedKernel::kInt8, GroupedTile::kWide),
            "swapped coop 128x192 cluster 2x1 (weight rows x input rows)");
  EXPECT_EQ(tile_config(int4, GroupedTile::kWide), "none");
  // Which tiles compute the product transposed (problem_mnk as (n, m_e, k)).
  EXPECT_TRUE(grouped_tile_swapped(int4, GroupedTile::kSmall));
  EXPECT_TRUE(grouped_tile_swapped(GroupedKernel::kInt4Codes, GroupedTile::kTiny));
  EXPECT_TRUE(grouped_tile_swapped(GroupedKernel::kBf16, GroupedTile::kWide));
  EXPECT_TRUE(grouped_tile_swapped(GroupedKernel::kDequantBf16, GroupedTile::kWide));
  for (GroupedKernel kind : {GroupedKernel::kFp8, GroupedKernel::kInt8, GroupedKernel::kF16, GroupedKernel::kDequantF16})
    EXPECT_TRUE(grouped_tile_swapped(kind, GroupedTile::kWide)) << to_string(kind);
  EXPECT_FALSE(grouped_tile_swapped(GroupedKernel::kFp8, GroupedTile::kTiny));
  EXPECT_FALSE(grouped_tile_swapped(GroupedKernel::kFp8, GroupedTile::kSmall));
  EXPECT_FALSE(grouped_tile_swapped(GroupedKernel::kBf16, GroupedTile::kHuge));
  EXPECT_FALSE(grouped_tile_swapped(block, GroupedTile::kTiny));
  EXPECT_FALSE(grouped_tile_swapped(GroupedKernel::kMxfp4Bf16, GroupedTile::kSmall));
}

TEST(GemmPlan, WithoutARepackedCopyOneCopyOfTheWeights) {
  // Without a repacked copy the register kernel's layouts take kernels that read the checkpoint's
  // weights (W4A16 g128 and channel: CUTLASS's mixed-input kernel; W4A8-INT8: the bf16 kernel on
  // its codes) or a bounded workspace (the dequantized path); every other scheme's plan is the same.
  for (const std::string& scheme : synthetic_schemes()) {
    const MoeLayer layer = synthetic_layer(scheme, {"small", 4, 2, 256, 128}, 7, 1);
    const LayerGemmPlan with_copy = plan_layer_gemms(layer, 0, true), one_copy = plan_layer_gemms(layer, 0, true, false);
    const GroupedKernel want = !dequantizes_in_registers(with_copy.g1) ? with_copy.g1
                               : scheme == "w4a16_g128"                ? GroupedKernel::kInt4Bf16
                               : scheme == "w4a8_int8" || scheme == "w4a8_int8_channel" ? GroupedKernel::kInt4Codes
                                                                                         : GroupedKernel::kDequantBf16;
    EXPECT_EQ(one_copy.g1, want) << scheme;
    EXPECT_EQ(one_copy.g2, want) << scheme;
    EXPECT_FALSE(dequantizes_in_registers(plan_prefill_kernels(layer, false).g1)) << scheme;
    const CudaPlanSummary s = summarize_cuda_plan(layer, 0, false);
    EXPECT_EQ(s.repacked_weight_bytes, 0) << scheme;
    EXPECT_EQ(s.w13.prefill, to_string(want)) << scheme;
    if (dequantizes_to_workspace(want)) {
      EXPECT_GT(s.dequant_workspace_bytes, 0) << scheme;
      EXPECT_GT(plan_layer_workspace(layer, 4096, kDefaultDequantWorkspaceBytes, false).bytes[LayerWorkspace::kDequantized], 0)
          << scheme;
    }
    // (The default allows the copy: the workspace of the dequantized path is then not allocated.)
    if (dequantizes_in_registers(with_copy.g1))
      EXPECT_EQ(plan_layer_workspace(layer, 4096, kDefaultDequantWorkspaceBytes).bytes[LayerWorkspace::kDequantized], 0)
          << scheme;
  }
  // A CudaMoeLayer makes the copy only if asked, with a nonzero budget, for at most
  // kMaxRegisterKernelExperts local experts; otherwise it plans as without it.
  const MoeLayer w4 = synthetic_layer("w4a16_g128", {"small", 4, 2, 256, 128}, 7, 1);
  EXPECT_TRUE(repacked_copy_possible(w4, kDefaultDequantWorkspaceBytes, true));
  EXPECT_FALSE(repacked_copy_possible(w4, kDefaultDequantWorkspaceBytes, false));
  EXPECT_FALSE(repacked_copy_possible(w4, 0, true));
  MoeLayer many = w4;
  many.num_local_experts = kMaxRegisterKernelExperts + 1;
  EXPECT_FALSE(repacked_copy_possible(many, kDefaultDequantWorkspaceBytes, true));
  many.num_local_experts = kMaxRegisterKernelExperts;
  EXPECT_TRUE(repacked_copy_possible(many, kDefaultDequantWorkspaceBytes, true));
  // The W4A8-INT8 bf16 kernel rounds its weights: a prefill forward without a copy is held to its
  // looser bound (moves codes), with the copy to the backends' own.
  const MoeLayer w4a8 = synthetic_layer("w4a8_int8", {"small", 4, 2, 256, 128}, 7, 1);
  ForwardOptions prefill;
  prefill.gemm_path = GemmPath::kPrefill;
  EXPECT_FALSE(cuda_prefill_moves_codes(w4a8, prefill));
  EXPECT_TRUE(cuda_prefill_moves_codes(w4a8, prefill, -1, false));
}

// The summary `qmoe inspect --cuda-plan` prints: each GEMM's kernels, the crossover and each tile
// with the batch it takes over from, as the planner functions give them; nothing for a scheme
// without prefill kernels.
// From which batch a layer holds the repacked copy (repacked_copy_from_tokens): every
// register-kernel layout (W4A16 with groups of >= 64 or channel scales too: CUTLASS's mixed-input
// kernel runs without the copy, or on a GEMM whose k is not a multiple of 64) from the register
// kernel's own crossover, the later of its register-kernel GEMMs'; layers without one never.
TEST(GemmPlan, RepackedCopyFromTokens) {
  struct Case {
    const char* scheme;
    MoeShape shape;
    int64_t from_tokens;
  };
  const int64_t never = std::numeric_limits<int64_t>::max();
  for (const Case& c : {
           // Few experts; a long, a medium and a short reduction with many (rows x experts / top-k,
           // rounded up).
           Case{"w4a16_g128", {"mixtral-like", 8, 2, 256, 512}, int64_t{kGroupedMinRowsPerExpertInt4RegsFewExperts} * 8 / 2},
           Case{"w4a16_g128", {"deepseek-like", 64, 6, 256, 2048}, (int64_t{kGroupedMinRowsPerExpertInt4RegsLongReduction} * 64 + 5) / 6},
           Case{"w4a16_g128", {"qwen3-like", 32, 8, 256, 768}, int64_t{kGroupedMinRowsPerExpertInt4RegsMediumReduction} * 32 / 8},
           Case{"w4a16_g128", {"tp8-like", 64, 8, 256, 256}, int64_t{kGroupedMinRowsPerExpertInt4RegsShortReduction} * 64 / 8},
           Case{"w4a16_g32", {"mixtral-like", 8, 2, 256, 128}, int64_t{kGroupedMinRowsPerExpertInt4RegsFewExperts} * 8 / 2},
           Case{"w4a16_asym_g128", {"mixtral-like", 8, 2, 256, 128}, int64_t{kGroupedMinRowsPerExpertInt4RegsFewExperts} * 8 / 2},
           Case{"w4a8_int8", {"mixtral-like", 8, 2, 256, 128}, int64_t{kGroupedMinRowsPerExpertInt4Int8FewExperts} * 8 / 2},
           Case{"mxfp4", {"mixtral-like", 8, 2, 256, 128}, int64_t{kGroupedMinRowsPerExpertMxfp4FewExperts} * 8 / 2},
           Case{"nvfp4a16", {"long-like", 32, 4, 256, 2048}, int64_t{kGroupedMinRowsPerExpertNvfp4LongReduction} * 32 / 4},
           // No register kernel.
           Case{"fp8_channel", {"mixtral-like", 8, 2, 256, 128}, never},
       }) {
    const MoeLayer layer = synthetic_layer(c.scheme, c.shape, 7, 1);
    EXPECT_EQ(repacked_copy_from_tokens(layer), c.from_tokens) << c.scheme << " " << c.shape.name;
  }
  // Only the register-kernel GEMMs count: W4A16 g32 whose w2 reduction (96) is no multiple of 64
  // plans w2 on the dequantized path, so the copy comes at w13's crossover.
  const MoeLayer odd = synthetic_layer("w4a16_g32", {"odd-inter", 8, 2, 256, 96}, 7, 1);
  const LayerGemmPlan odd_plan = plan_prefill_kernels(odd, true);
  ASSERT_EQ(odd_plan.g1, GroupedKernel::kInt4RegsBf16);
  ASSERT_FALSE(dequantizes_in_registers(odd_plan.g2));
  EXPECT_EQ(repacked_copy_from_tokens(odd), grouped_min_tokens(odd_plan.g1, 8, 2, 96, has_row_scales(odd_plan.w13)));
}

TEST(GemmPlan, CudaPlanSummary) {
  // Each entry's batch is exactly where the planner's tile changes.
  // (k: the GEMM's reduction, hidden for w13 and inter for w2.)
  auto expect_exact_switches = [](const CudaPlanSummary::Gemm& g, GroupedKernel kind, const MoeLayer& L, int64_t k) {
    ASSERT_FALSE(g.tiles.empty());
    EXPECT_EQ(g.tiles.front().first, g.prefill_from_tokens);
    auto tile_at = [&](int64_t tokens) {
      return tile_config(kind, plan_grouped_tile(kind, tokens * L.top_k, L.num_experts, k));
    };
    for (size_t i = 0; i < g.tiles.size(); ++i) {
      EXPECT_EQ(tile_at(g.tiles[i].first), g.tiles[i].second);
      if (i > 0) EXPECT_NE(tile_at(g.tiles[i].first - 1), g.tiles[i].second);
    }
    EXPECT_EQ(tile_at(kPlanSummaryMaxTokens), g.tiles.back().second);
  };
  const MoeLayer fp8 = synthetic_layer("fp8_channel", {"qwen3-like", 128, 8, 256, 128}, 7, 1);
  const CudaPlanSummary s = summarize_cuda_plan(fp8, 0);
  for (const CudaPlanSummary::Gemm* g : {&s.w13, &s.w2}) {
    EXPECT_EQ(g->decode, to_string(GemmKernel::kTensorCoreCodes));
    EXPECT_EQ(g->prefill, to_string(GroupedKernel::kFp8));
    EXPECT_EQ(g->prefill_from_tokens, kGroupedMinTokensFp8);
    expect_exact_switches(*g, GroupedKernel::kFp8, fp8, g == &s.w13 ? fp8.hidden : fp8.inter);
    // 64 x 128 pingpong, then from 64 rows per expert (1024 tokens x top-8 over 128 experts) FP8's
    // 128 x 256, the swapped 128 x 192 in its range of rows, and 128 x 256 again.
    ASSERT_EQ(g->tiles.size(), 4u);
    EXPECT_EQ(g->tiles[0].second, tile_config(GroupedKernel::kFp8, GroupedTile::kSmall));
    EXPECT_EQ(g->tiles[1].first, int64_t{kGroupedMinRowsFor128} * 128 / 8);
    EXPECT_EQ(g->tiles[1].second, tile_config(GroupedKernel::kFp8, GroupedTile::kHuge));
    EXPECT_EQ(g->tiles[2].first, int64_t{kWideMinRowsPerExpert} * 128 / 8);
    EXPECT_EQ(g->tiles[2].second, tile_config(GroupedKernel::kFp8, GroupedTile::kWide));
    EXPECT_EQ(g->tiles[3].first, int64_t{kWideMaxRowsPerExpert} * 128 / 8);
    EXPECT_EQ(g->tiles[3].second, tile_config(GroupedKernel::kFp8, GroupedTile::kHuge));
  }
  // W4A16 g128 on 8 experts, top-2: the 4-bit register kernel from its own crossover in rows per
  // expert (CUTLASS's mixed-input kernel runs without the copy), 32 input rows, then 64, 128,
  // 192 past a mean of kInt4RegsTiles.max_rows_for_128 rows per expert, 256 from the end of its
  // `wide` range, then 320 in each `huge` range and 256 after it.
  const MoeLayer w4 = synthetic_layer("w4a16_g128", {"mixtral-like", 8, 2, 256, 512}, 7, 1);
  const CudaPlanSummary m = summarize_cuda_plan(w4, 0);
  EXPECT_EQ(m.w13.prefill, to_string(GroupedKernel::kInt4RegsBf16));
  EXPECT_EQ(m.w13.prefill_from_tokens, int64_t{kGroupedMinRowsPerExpertInt4RegsFewExperts} * 8 / 2);
  EXPECT_EQ(m.w13.prefill_from_tokens, repacked_copy_from_tokens(w4));
  EXPECT_EQ(m.w2.prefill_from_tokens, m.w13.prefill_from_tokens);
  expect_exact_switches(m.w13, GroupedKernel::kInt4RegsBf16, w4, w4.hidden);
  // Without the copy: CUTLASS's kernel alone, from its crossover.
  const CudaPlanSummary m_one = summarize_cuda_plan(w4, 0, false);
  EXPECT_EQ(m_one.w13.prefill, to_string(GroupedKernel::kInt4Bf16));
  EXPECT_EQ(m_one.w13.prefill_from_tokens, int64_t{kGroupedMinRowsPerExpertInt4FewExperts} * 8 / 2);
  ASSERT_EQ(m.w13.tiles.size(), 11u);
  EXPECT_EQ(m.w13.tiles[0].second, tile_config(GroupedKernel::kInt4RegsBf16, GroupedTile::kTiny));
  EXPECT_EQ(m.w13.tiles[1].first, int64_t{kInt4RegsTiles.until_32} * 8 / 2);
  EXPECT_EQ(m.w13.tiles[1].second, tile_config(GroupedKernel::kInt4RegsBf16, GroupedTile::kTiny48));
  EXPECT_EQ(m.w13.tiles[2].first, int64_t{kInt4RegsTiles.until_64} * 8 / 2);
  EXPECT_EQ(m.w13.tiles[2].second, tile_config(GroupedKernel::kInt4RegsBf16, GroupedTile::kSmall));
  EXPECT_EQ(m.w13.tiles[3].first, int64_t{kInt4RegsTiles.max_rows_for_128} * 8 / 2 + 1);
  EXPECT_EQ(m.w13.tiles[3].second, tile_config(GroupedKernel::kInt4RegsBf16, GroupedTile::kWide));
  EXPECT_EQ(m.w13.tiles[4].first, int64_t{kInt4RegsTiles.wide.until} * 8 / 2);
  EXPECT_EQ(m.w13.tiles[4].second, tile_config(GroupedKernel::kInt4RegsBf16, GroupedTile::kLarge));
  for (int r = 0; r < 3; ++r) {  // 320 rows in each huge range, 256 after it
    EXPECT_EQ(m.w13.tiles[5 + 2 * r].first, int64_t{kInt4RegsTiles.huge[r].from} * 8 / 2);
    EXPECT_EQ(m.w13.tiles[5 + 2 * r].second, tile_config(GroupedKernel::kInt4RegsBf16, GroupedTile::kHuge));
    EXPECT_EQ(m.w13.tiles[6 + 2 * r].first, int64_t{kInt4RegsTiles.huge[r].until} * 8 / 2);
    EXPECT_EQ(m.w13.tiles[6 + 2 * r].second, m.w13.tiles[4].second);
  }
  // W4A16 g32 with act order: the bf16 kernel on dequantized weights from its own crossover, with the
  // bf16 tiles.
  const MoeLayer mx = with_act_order(synthetic_layer("w4a16_g32", {"gpt-oss-like", 8, 4, 256, 128}, 7, 1));
  const CudaPlanSummary n = summarize_cuda_plan(mx, 0);
  EXPECT_EQ(n.w2.prefill, to_string(GroupedKernel::kDequantBf16));
  EXPECT_EQ(n.w2.prefill_from_tokens, grouped_min_tokens(GroupedKernel::kDequantBf16, 8, 4, 128));
  expect_exact_switches(n.w2, GroupedKernel::kDequantBf16, mx, mx.inter);
  expect_exact_switches(n.w13, GroupedKernel::kDequantBf16, mx, mx.hidden);
  // w2's reduction (inter 128) is short: 128 x 192; w13's (hidden 256) too.
  ASSERT_FALSE(n.w2.tiles.empty());
  EXPECT_EQ(n.w2.tiles.back().second, tile_config(GroupedKernel::kBf16, GroupedTile::kLarge));
  // Its workspace at the default budget: every expert of the larger projection (w13: 256 x 256 bf16),
  // also from a layer loaded with only expert 0 local (as inspect loads it).
  EXPECT_EQ(n.dequant_workspace_bytes, 8 * 2 * 256 * 256);
  EXPECT_EQ(m.dequant_workspace_bytes, 0);
  MoeLayer one_local = mx;
  one_local.num_local_experts = 1;
  one_local.experts.resize(1);
  one_local.expert_map = {0, -1, -1, -1, -1, -1, -1, -1};
  EXPECT_EQ(summarize_cuda_plan(one_local, 0).dequant_workspace_bytes, n.dequant_workspace_bytes);
  EXPECT_EQ(n.repacked_weight_bytes, 0);
  // MXFP4: its own kernel from its crossover, 32, 64, 128, 256, 192 then 256 input rows; its repacked weights for
  // every expert (also from a layer loaded with only expert 0 local), no workspace.
  const MoeLayer mxfp4 = synthetic_layer("mxfp4", {"gpt-oss-like", 8, 4, 256, 128}, 7, 1);
  const CudaPlanSummary f = summarize_cuda_plan(mxfp4, 0);
  EXPECT_EQ(f.w13.prefill, to_string(GroupedKernel::kMxfp4Bf16));
  EXPECT_EQ(f.w13.prefill_from_tokens, grouped_min_tokens(GroupedKernel::kMxfp4Bf16, 8, 4, 128));
  expect_exact_switches(f.w13, GroupedKernel::kMxfp4Bf16, mxfp4, mxfp4.hidden);
  // (32 and 64 from its crossover, then 128, 256, 192 in its range, then 256, 320 in its ranges, 256
  // after each.)
  ASSERT_EQ(f.w13.tiles.size(), 12u);
  EXPECT_EQ(f.w13.tiles[0].first, f.w13.prefill_from_tokens);
  EXPECT_LT(f.w13.prefill_from_tokens, int64_t{kMxfp4Tiles.until_32} * 8 / 4);
  EXPECT_EQ(f.w13.tiles[0].second, tile_config(GroupedKernel::kMxfp4Bf16, GroupedTile::kTiny));
  EXPECT_EQ(f.w13.tiles[1].first, int64_t{kMxfp4Tiles.until_32} * 8 / 4);
  EXPECT_EQ(f.w13.tiles[1].second, tile_config(GroupedKernel::kMxfp4Bf16, GroupedTile::kTiny48));
  EXPECT_EQ(f.w13.tiles[2].first, int64_t{kMxfp4Tiles.until_64} * 8 / 4);
  EXPECT_EQ(f.w13.tiles[2].second, tile_config(GroupedKernel::kMxfp4Bf16, GroupedTile::kSmall));
  const auto& g = f.w13.tiles;
  EXPECT_EQ(g[3].first, int64_t{kMxfp4Tiles.max_rows_for_128} * 8 / 4 + 1);
  EXPECT_EQ(g[4].first, int64_t{kMxfp4Tiles.wide.from} * 8 / 4);
  EXPECT_EQ(g[4].second, tile_config(GroupedKernel::kMxfp4Bf16, GroupedTile::kWide));
  EXPECT_EQ(g[5].first, int64_t{kMxfp4Tiles.wide.until} * 8 / 4);
  EXPECT_EQ(g[6].first, int64_t{kMxfp4Tiles.huge[0].from} * 8 / 4);
  EXPECT_EQ(g[6].second, tile_config(GroupedKernel::kMxfp4Bf16, GroupedTile::kHuge));
  EXPECT_EQ(g[7].first, int64_t{kMxfp4Tiles.huge[0].until} * 8 / 4);
  EXPECT_EQ(g[8].first, int64_t{kMxfp4Tiles.huge[1].from} * 8 / 4);
  EXPECT_EQ(g[8].second, tile_config(GroupedKernel::kMxfp4Bf16, GroupedTile::kHuge));
  EXPECT_EQ(g[9].first, int64_t{kMxfp4Tiles.huge[1].until} * 8 / 4);
  EXPECT_EQ(g[10].first, int64_t{kMxfp4Tiles.huge[2].from} * 8 / 4);
  EXPECT_EQ(g[10].second, tile_config(GroupedKernel::kMxfp4Bf16, GroupedTile::kHuge));
  EXPECT_EQ(g[11].first, int64_t{kMxfp4Tiles.huge[2].until} * 8 / 4);
  EXPECT_EQ(f.dequant_workspace_bytes, 0);
  EXPECT_EQ(f.repacked_weight_bytes, 8 * (repacked(GroupedKernel::kMxfp4Bf16, 256, 256) + repacked(GroupedKernel::kMxfp4Bf16, 256, 128)));
  MoeLayer mxfp4_one_local = mxfp4;
  mxfp4_one_local.num_local_experts = 1;
  mxfp4_one_local.experts.resize(1);
  mxfp4_one_local.expert_map = {0, -1, -1, -1, -1, -1, -1, -1};
  EXPECT_EQ(summarize_cuda_plan(mxfp4_one_local, 0).repacked_weight_bytes, f.repacked_weight_bytes);
  // NVFP4 weight-only: the FP4 kernel too (its global scale applied in its epilogue).
  const CudaPlanSummary nv = summarize_cuda_plan(synthetic_layer("nvfp4a16", {"small", 8, 2, 256, 128}, 7, 1), 0);
  EXPECT_EQ(nv.w13.prefill, to_string(GroupedKernel::kNvfp4Bf16));
  EXPECT_EQ(nv.w13.prefill_from_tokens, grouped_min_tokens(GroupedKernel::kNvfp4Bf16, 8, 2, 128));
  EXPECT_EQ(nv.repacked_weight_bytes, 8 * (repacked(GroupedKernel::kNvfp4Bf16, 256, 256) +
                                           repacked(GroupedKernel::kNvfp4Bf16, 256, 128)));
}

// Which GEMM2s write the combine's bf16 terms: the 4-bit register kernel (biases too: it adds them
// in its epilogue), and the CUTLASS bf16 kernel without a bias, a global scale or n % 8 != 0; only
// for bf16 hidden states with rounded intermediates.
TEST(GemmPlan, Gemm2WritesTheCombinesTerms) {
  auto w2_of = [](const MoeLayer& layer) { return plan_layer_gemms(layer, 0, true); };
  const MoeLayer dense = synthetic_layer("bf16", {"small", 8, 2, 256, 128}, 7, 1);
  const LayerGemmPlan d = w2_of(dense);
  ASSERT_EQ(d.g2, GroupedKernel::kBf16);
  EXPECT_TRUE(cutlass_writes_terms(d.g2, d.w2, false));
  EXPECT_TRUE(gemm2_writes_terms(d.g2, d.w2, false, 0, true));
  EXPECT_FALSE(gemm2_writes_terms(d.g2, d.w2, false, 0, false));  // unrounded: fp32 rows
  EXPECT_FALSE(gemm2_writes_terms(d.g2, d.w2, false, 1, true));   // f16 hidden states
  EXPECT_FALSE(cutlass_writes_terms(d.g2, d.w2, true));           // a bias, added after the GEMM
  GemmLayout odd = d.w2;
  odd.rows = 260;  // n % 4 == 0 but not % 8
  EXPECT_FALSE(cutlass_writes_terms(d.g2, odd, false));
  EXPECT_TRUE(summarize_cuda_plan(dense, 0).w2.writes_terms);
  EXPECT_FALSE(summarize_cuda_plan(dense, 0).w13.writes_terms);
  // The bf16 kernel on dequantized weights (act order), and FP8 per channel.
  const MoeLayer act_order = with_act_order(synthetic_layer("w4a16_g32", {"gpt-oss-like", 8, 4, 256, 128}, 7, 1));
  const LayerGemmPlan a = w2_of(act_order);
  ASSERT_EQ(a.g2, GroupedKernel::kDequantBf16);
  EXPECT_TRUE(gemm2_writes_terms(a.g2, a.w2, false, 0, true));
  const LayerGemmPlan f = w2_of(synthetic_layer("fp8_channel", {"small", 8, 2, 256, 128}, 7, 1));
  EXPECT_TRUE(gemm2_writes_terms(f.g2, f.w2, false, 0, true));
  // The 4-bit register kernel, with or without biases; not unrounded.
  const LayerGemmPlan m = w2_of(synthetic_layer("mxfp4", {"gpt-oss-like", 8, 4, 256, 128}, 7, 1));
  ASSERT_EQ(m.g2, GroupedKernel::kMxfp4Bf16);
  EXPECT_TRUE(gemm2_writes_terms(m.g2, m.w2, true, 0, true));
  EXPECT_FALSE(gemm2_writes_terms(m.g2, m.w2, false, 0, false));
}

TEST(GemmPlan, KernelNames) {
  EXPECT_EQ(to_string(GroupedKernel::kFp8), "grouped wgmma (FP8)");
  EXPECT_EQ(to_string(GroupedKernel::kInt8), "grouped wgmma (INT8)");
  EXPECT_EQ(to_string(GroupedKernel::kBf16), "grouped wgmma (BF16)");
  EXPECT_EQ(to_string(GroupedKernel::kInt4Bf16), "grouped wgmma (INT4 weights dequantized to BF16)");
  EXPECT_EQ(to_string(GroupedKernel::kMxfp4Bf16), "grouped wgmma (BF16) on MXFP4 weights dequantized in registers");
  EXPECT_EQ(to_string(GroupedKernel::kNvfp4Bf16), "grouped wgmma (BF16) on NVFP4 weights dequantized in registers");
  EXPECT_EQ(to_string(GroupedKernel::kNone), "none");
  EXPECT_EQ(to_string(GemmKernel::kTensorCore16), "tensor-core (16-bit inputs)");
  EXPECT_EQ(to_string(GemmKernel::kTensorCoreCodes), "tensor-core (activation codes)");
  EXPECT_EQ(to_string(GemmKernel::kCudaCore), "CUDA-core GEMV/generic");
}

}  // namespace
}  // namespace qmoe
