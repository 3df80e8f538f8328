// Synthetic layers (the benchmark's) for every scheme: the CPU backend against the reference on
// fresh random weights and inputs, and the generator's own checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "config/gemm_plan.h"
#include "qmoe/compare.h"
#include "qmoe/error.h"
#include "qmoe/synthetic.h"
#include "routing/routing.h"

namespace qmoe {
namespace {

class SyntheticScheme : public ::testing::TestWithParam<std::string> {};

TEST_P(SyntheticScheme, CpuBackendMatchesTheReference) {
  const uint64_t seed = std::random_device{}();  // fresh data every run
  SCOPED_TRACE("seed " + std::to_string(seed));
  const MoeShape shape{"small", 8, 2, 256, 128};
  const MoeLayer layer = synthetic_layer(GetParam(), shape, seed, 2);
  ASSERT_EQ(static_cast<int>(layer.experts.size()), 8);
  Tensor x, logits;
  synthetic_inputs(layer, 13, seed, SyntheticRouting::kUniform, x, logits);
  auto cpu = make_backend("cpu", 2);
  for (bool round : {true, false}) {
    ForwardOptions options;
    options.round_intermediate = round;
    const Tensor out = cpu->forward(layer, x, logits, options);
    const OutputDiff d = compare_outputs(out, reference_forward(layer, x, logits, options));
    EXPECT_TRUE(d.finite);
    EXPECT_GT(d.max_abs_ref, 0.0);
    EXPECT_LE(d.rel_l2, tolerance_rel_l2(layer, options, Comparison::kBackendVsReference));
  }
}

INSTANTIATE_TEST_SUITE_P(All, SyntheticScheme, ::testing::ValuesIn(synthetic_schemes()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(Tolerance, CudaBoundWidensOnlyWhereAnFp8PrefillGemmRuns) {
  // Layers with FP8 prefill kernels (fp8_channel, fp8_tensor, fp8_block: the FP8 MMA) or W4A8 ones
  // (bf16-rounded weights) on the prefill path: forced, or automatic from their crossover. Everything
  // else keeps the backend bound.
  const MoeShape shape{"small", 4, 2, 256, 128};
  ForwardOptions automatic, decode, prefill;
  decode.gemm_path = GemmPath::kDecode;
  prefill.gemm_path = GemmPath::kPrefill;
  for (const std::string& scheme : synthetic_schemes()) {
    const MoeLayer layer = synthetic_layer(scheme, shape, 3, 1);
    const LayerGemmPlan plan = plan_layer_gemms(layer, 0, true);
    const GroupedKernel kind = plan.g1;
    const int64_t crossover = std::min<int64_t>(
        grouped_min_tokens(kind, shape.num_experts, shape.top_k, shape.inter, has_row_scales(plan.w13)), 1 << 20);
    const double base = tolerance_rel_l2(layer, automatic, Comparison::kBackendVsReference);
    // (w4a8_fp8 layers hold FP8 weights; w4a8_int8 runs integer sums per group, exact but for fp32's
    // rounding past 2^24, as INT8 W8A8)
    const bool moves_codes = scheme == "fp8_channel" || scheme == "fp8_tensor" || scheme == "fp8_block" ||
                             scheme == "w4a8_fp8";
    const double wide = !moves_codes ? base : 3e-2;
    // (1-3 tokens: a few outputs, so a few moved codes weigh more.)
    auto bound = [&](int64_t tokens) { return moves_codes && tokens > 0 && tokens <= 3 ? 6e-2 : wide; };
    EXPECT_EQ(tolerance_rel_l2(layer, prefill, Comparison::kCudaVsReference, 1), bound(1)) << scheme;
    EXPECT_EQ(tolerance_rel_l2(layer, prefill, Comparison::kCudaVsReference, 3), bound(3)) << scheme;
    EXPECT_EQ(tolerance_rel_l2(layer, prefill, Comparison::kCudaVsReference, 4), wide) << scheme;
    EXPECT_EQ(tolerance_rel_l2(layer, automatic, Comparison::kCudaVsReference, crossover), bound(crossover)) << scheme;
    EXPECT_EQ(tolerance_rel_l2(layer, automatic, Comparison::kCudaVsReference), wide) << scheme;
    EXPECT_EQ(tolerance_rel_l2(layer, automatic, Comparison::kCudaVsReference, crossover - 1), base) << scheme;
    EXPECT_EQ(tolerance_rel_l2(layer, decode, Comparison::kCudaVsReference, 4096), base) << scheme;
  }
}

TEST(Synthetic, ShapesAndErrors) {
  EXPECT_EQ(benchmark_shapes().size(), 6u);
  EXPECT_EQ(benchmark_shape("deepseek-v3").num_experts, 256);
  EXPECT_EQ(benchmark_shape("gpt-oss-120b").hidden, 2880);
  EXPECT_THROW(benchmark_shape("gpt-5"), Error);
  EXPECT_THROW(synthetic_layer("w3a16", {"s", 4, 1, 256, 128}, 1), Error);
  // 2880 is not a multiple of 128: group-128 schemes cannot hold gpt-oss' hidden size.
  EXPECT_THROW(synthetic_layer("w4a16_g128", {"s", 2, 1, 2880, 256}, 1), Error);
  // Same seed, same weights.
  const MoeLayer a = synthetic_layer("w4a16_g32", {"s", 2, 1, 256, 128}, 42, 1);
  const MoeLayer b = synthetic_layer("w4a16_g32", {"s", 2, 1, 256, 128}, 42, 2);
  ASSERT_EQ(a.experts[1].w2.data.size_bytes(), b.experts[1].w2.data.size_bytes());
  EXPECT_EQ(0, std::memcmp(a.experts[1].w2.data.raw(), b.experts[1].w2.data.raw(), a.experts[1].w2.data.size_bytes()));
}

// The bench's routings through the CPU routing, at the benchmark shapes' expert counts and top-k
// (only those fields of the layer are read), with softmax and sigmoid scoring.
TEST(Synthetic, RoutingsSendTokensWhereTheySay) {
  for (const MoeShape& shape : benchmark_shapes())
    for (Scoring scoring : {Scoring::kSoftmax, Scoring::kSigmoid})
      for (int64_t tokens : {int64_t{1}, int64_t{37}, int64_t{4096}}) {
        MoeLayer layer;
        layer.num_experts = shape.num_experts;
        layer.top_k = shape.top_k;
        layer.hidden = 64;
        layer.routing.scoring = scoring;
        SCOPED_TRACE(shape.name + " " + std::to_string(tokens) + " tokens");
        auto counts_of = [&](SyntheticRouting routing, std::vector<int32_t>* ids) {
          Tensor x, logits;
          synthetic_inputs(layer, tokens, 5, routing, x, logits);
          EXPECT_EQ(x.shape(), (std::vector<int64_t>{tokens, 64}));
          const routing::TopK topk = routing::route(logits.data<float>(), static_cast<int>(tokens), layer.num_experts,
                                                    layer.top_k, layer.routing, nullptr);
          std::vector<int64_t> counts(layer.num_experts, 0);
          for (int32_t id : topk.ids) ++counts[id];
          if (ids) *ids = topk.ids;
          return counts;
        };
        std::vector<int32_t> ids;
        const std::vector<int64_t> balanced = counts_of(SyntheticRouting::kBalanced, &ids);
        // Token t on experts (t * top_k + j) mod E, in some order.
        for (int64_t t = 0; t < tokens; ++t) {
          std::vector<int32_t> got(ids.begin() + t * layer.top_k, ids.begin() + (t + 1) * layer.top_k), want;
          for (int j = 0; j < layer.top_k; ++j) want.push_back(static_cast<int32_t>((t * layer.top_k + j) % layer.num_experts));
          std::sort(got.begin(), got.end());
          std::sort(want.begin(), want.end());
          ASSERT_EQ(got, want) << "token " << t;
        }
        const int64_t slots = tokens * layer.top_k, E = layer.num_experts;
        EXPECT_EQ(*std::max_element(balanced.begin(), balanced.end()), (slots + E - 1) / E);
        EXPECT_EQ(*std::min_element(balanced.begin(), balanced.end()), slots / E);
        if (tokens < 4096) continue;
        // With many tokens the uniform routing spreads (mean +- sqrt(mean)) and the skewed one
        // prefers low ids.
        const std::vector<int64_t> uniform = counts_of(SyntheticRouting::kUniform, nullptr);
        EXPECT_GT(*std::max_element(uniform.begin(), uniform.end()) - *std::min_element(uniform.begin(), uniform.end()), 1);
        EXPECT_GT(*std::min_element(uniform.begin(), uniform.end()), 0);
        const std::vector<int64_t> skewed = counts_of(SyntheticRouting::kSkewed, nullptr);
        EXPECT_GT(skewed[0], 2 * skewed[E - 1]);
        // The mild one too, less: its busiest expert below the skewed one's, above the uniform's.
        const std::vector<int64_t> mild = counts_of(SyntheticRouting::kMild, nullptr);
        EXPECT_GT(mild[0], mild[E - 1]);
        EXPECT_LT(*std::max_element(mild.begin(), mild.end()), *std::max_element(skewed.begin(), skewed.end()));
        EXPECT_GT(*std::max_element(mild.begin(), mild.end()), *std::max_element(uniform.begin(), uniform.end()));
      }
  EXPECT_EQ(parse_synthetic_routing("balanced"), SyntheticRouting::kBalanced);
  EXPECT_EQ(parse_synthetic_routing(to_string(SyntheticRouting::kSkewed)), SyntheticRouting::kSkewed);
  EXPECT_EQ(parse_synthetic_routing("mild"), SyntheticRouting::kMild);
  try {
    parse_synthetic_routing("zipf");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'zipf'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("balanced"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qmoe
