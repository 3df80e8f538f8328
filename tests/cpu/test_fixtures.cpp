// Every fixture checkpoint (real compressed-tensors output, tools/make_fixtures.py): the dispatch
// decision, the routing, and the CPU backend and reference against torch's float64 forward over
// the weights that compressed-tensors itself dequantized.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "qmoe/checkpoint.h"
#include "qmoe/compare.h"
#include "qmoe/error.h"
#include "qmoe/moe.h"
#include "routing/routing.h"
#include "test_util.h"

namespace qmoe {
namespace {

// The vLLM class each fixture's MoE layers get on sm90, worked out by hand from vLLM's dispatcher
// (vllm-moe-system.md §1.3); "error:" marks a rejection.
const std::map<std::string, std::string>& expected_sm90() {
  static const std::map<std::string, std::string> m = {
      {"w4a16_g128", "CompressedTensorsWNA16MarlinMoEMethod"},
      {"w4a16_asym", "CompressedTensorsWNA16MarlinMoEMethod"},
      {"w4a16_actorder_group", "CompressedTensorsWNA16MarlinMoEMethod"},
      {"w4a16_actorder_weight", "CompressedTensorsWNA16MarlinMoEMethod"},
      {"w4a16_g32", "CompressedTensorsWNA16MarlinMoEMethod"},
      {"w4a16_channel", "CompressedTensorsWNA16MarlinMoEMethod"},
      {"w8a16", "CompressedTensorsWNA16MarlinMoEMethod"},
      {"nvfp4", "CompressedTensorsW4A4Nvfp4MoEMethod"},
      {"nvfp4a16", "CompressedTensorsW4A4Nvfp4MoEMethod"},
      {"mxfp4a16", "CompressedTensorsW4A4Mxfp4MoEMethod"},
      {"fp8_static", "CompressedTensorsW8A8Fp8MoEMethod"},
      {"fp8_tensor_dynamic", "CompressedTensorsW8A8Fp8MoEMethod"},
      {"fp8_dynamic", "CompressedTensorsW8A8Fp8MoEMethod"},
      {"int8_w8a8", "CompressedTensorsW8A8Int8MoEMethod"},
      {"w4a8_fp8", "CompressedTensorsW4A8Fp8MoEMethod"},
      // W4A8 with int8 activations goes to the FP8 CUTLASS method on sm90 (types are not checked),
      // whose constructor needs the intermediate size to be a multiple of 256.
      {"w4a8_int_packed", "error:intermediate_size_per_partition=128 must be divisible by 256"},
      {"w4a8_int_intq", "error:intermediate_size_per_partition=128 must be divisible by 256"},
      {"unquantized", "UnquantizedFusedMoEMethod"},
      {"ignored_layer", "CompressedTensorsWNA16MarlinMoEMethod"},  // layer 0; layer 1 below
      {"mixtral_w4a16_channel", "CompressedTensorsWNA16MarlinMoEMethod"},
      {"mixtral_fp8_dynamic", "CompressedTensorsW8A8Fp8MoEMethod"},
      {"deepseek_fp8_block", "CompressedTensorsW8A8Fp8MoEMethod"},
      {"deepseek_nvfp4", "CompressedTensorsW4A4Nvfp4MoEMethod"},
      {"deepseek_w4a16", "CompressedTensorsWNA16MarlinMoEMethod"},
      // Router weight on input makes the layer Marlin-incompatible: the Triton WNA16 method.
      {"llama4_w4a16", "CompressedTensorsWNA16MoEMethod"},
      {"gptoss_mxfp4a16", "CompressedTensorsW4A4Mxfp4MoEMethod"},
  };
  return m;
}

// On the CPU target the exact-sm90 W4A8 rule is off: W4A8 layers reach the int8-activation method.
std::string expected_class(const std::string& fixture, int layer, Target target) {
  if (fixture == "ignored_layer" && layer == 1) return "UnquantizedFusedMoEMethod";
  if (target == Target::kCpu && fixture.rfind("w4a8", 0) == 0) return "CompressedTensorsW4A8Int8MoEMethod";
  return expected_sm90().at(fixture);
}

struct FixtureCase {
  std::string name;
  int layer;
};

std::vector<FixtureCase> all_cases() {
  const auto manifest = nlohmann::json::parse(test::read_text(test::data_dir() + "/fixtures/manifest.json"));
  std::vector<FixtureCase> cases;
  for (const auto& f : manifest)
    for (int layer : f.at("layers")) cases.push_back({f.at("name").get<std::string>(), layer});
  return cases;
}

class Fixture : public ::testing::TestWithParam<FixtureCase> {};

TEST(FixtureManifest, CoversEveryFixtureWithAnExpectedMethod) {
  const auto cases = all_cases();
  EXPECT_GE(cases.size(), 26u);
  for (const auto& c : cases) EXPECT_TRUE(expected_sm90().count(c.name)) << c.name;
}

TEST_P(Fixture, DecisionRoutingAndForwardMatchTorch) {
  const FixtureCase& c = GetParam();
  const std::string dir = test::fixture_dir(c.name);
  const Checkpoint ckpt(dir);
  const ModelConfig config = load_model_config(ckpt.config_path());
  std::map<std::string, Tensor> io = read_safetensors(dir + "/io.safetensors");
  const Tensor& x = io.at("hidden_states");
  const Tensor& logits = io.at("router_logits");
  const bool first_layer = c.layer == config.moe.moe_layers.front();

  for (Target target : {Target::kSm90, Target::kCpu}) {
    SCOPED_TRACE(c.name + " layer " + std::to_string(c.layer) + " target " + to_string(target));
    const std::string want = expected_class(c.name, c.layer, target);
    LoadOptions options;
    options.target = target;
    if (want.rfind("error:", 0) == 0) {
      try {
        load_moe_layer(ckpt, config, c.layer, options);
        ADD_FAILURE() << "expected rejection: " << want;
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), want.substr(6));
      }
      continue;
    }
    const MoeLayer layer = load_moe_layer(ckpt, config, c.layer, options);
    EXPECT_EQ(layer.decision.vllm_class, want);

    // Routing: identical ids to the fixture's torch routing; weights to fp32 rounding.
    const routing::TopK topk =
        routing::route(logits.data<float>(), static_cast<int>(logits.dim(0)), layer.num_experts, layer.top_k,
                       layer.routing, layer.correction_bias.empty() ? nullptr : layer.correction_bias.data<float>());
    const Tensor& ids = io.at("topk_ids");
    const Tensor& weights = io.at("topk_weights");
    ASSERT_EQ(static_cast<size_t>(ids.numel()), topk.ids.size());
    for (int64_t i = 0; i < ids.numel(); ++i) {
      EXPECT_EQ(topk.ids[i], ids.data<int32_t>()[i]) << "slot " << i;
      EXPECT_NEAR(topk.weights[i], weights.data<float>()[i], 1e-6) << "slot " << i;
    }

    // W4AFP8 checkpoints on the CPU target run with int8 activations, which the fixture does not
    // emulate; the other cases compare with torch's float64 forward.
    const bool comparable = !(target == Target::kCpu && c.name == "w4a8_fp8");
    const std::string key = !first_layer ? "expected_layer" + std::to_string(c.layer)
                            : layer.act_quant != ActQuant::kNone ? "expected_actq"
                                                                 : "expected";
    auto backend = make_backend("cpu", 2);
    ForwardOptions fp32;
    fp32.round_intermediate = false;
    if (comparable) {
      ASSERT_TRUE(io.count(key)) << key;
      const Tensor out = backend->forward(layer, x, logits, fp32);
      const OutputDiff d = compare_outputs(out, io.at(key));
      EXPECT_TRUE(d.finite);
      EXPECT_LE(d.rel_l2, tolerance_rel_l2(layer, fp32, fixture_comparison(layer, key))) << "vs " << key;
      const OutputDiff dr = compare_outputs(reference_forward(layer, x, logits, fp32), io.at(key));
      EXPECT_LE(dr.rel_l2, tolerance_rel_l2(layer, fp32, fixture_comparison(layer, key))) << "reference vs " << key;
    }

    // Layers whose kernels keep weights unrounded (NVFP4, W8A8 styles) still decode them exactly
    // like compressed-tensors: with the reference's rounding forced on, weight-only ones match
    // torch's forward on the library's dequantized weights tightly.
    if (comparable && !layer.round_weights_to_scale_dtype && layer.act_quant == ActQuant::kNone) {
      MoeLayer rounded = layer;
      rounded.round_weights_to_scale_dtype = true;
      const OutputDiff d = compare_outputs(backend->forward(rounded, x, logits, fp32), io.at(key));
      EXPECT_LE(d.rel_l2, tolerance_rel_l2(rounded, fp32, Comparison::kVsFloat64Expected)) << "rounded weights";
    }

    // vLLM's rounding points: backend against reference.
    const ForwardOptions vllm_like;
    const Tensor out = backend->forward(layer, x, logits, vllm_like);
    const OutputDiff d = compare_outputs(out, reference_forward(layer, x, logits, vllm_like));
    EXPECT_TRUE(d.finite);
    EXPECT_LE(d.rel_l2, tolerance_rel_l2(layer, vllm_like, Comparison::kBackendVsReference));
  }
}

TEST(FixtureNvfp4, ExactW4A4OptionMatchesTheActivationEmulation) {
  for (const std::string name : {"nvfp4", "deepseek_nvfp4"}) {
    SCOPED_TRACE(name);
    const std::string dir = test::fixture_dir(name);
    const Checkpoint ckpt(dir);
    const ModelConfig config = load_model_config(ckpt.config_path());
    std::map<std::string, Tensor> io = read_safetensors(dir + "/io.safetensors");
    LoadOptions options;
    options.nvfp4_exact_w4a4 = true;
    const MoeLayer layer = load_moe_layer(ckpt, config, 0, options);
    ASSERT_EQ(layer.act_quant, ActQuant::kNvfp4);
    ForwardOptions fp32;
    fp32.round_intermediate = false;
    const Tensor out = make_backend("cpu")->forward(layer, io.at("hidden_states"), io.at("router_logits"), fp32);
    const OutputDiff d = compare_outputs(out, io.at("expected_actq"));
    EXPECT_LE(d.rel_l2, tolerance_rel_l2(layer, fp32, fixture_comparison(layer, "expected_actq")));
    // And the activation quantization really changes the result (the option is not a no-op).
    EXPECT_GT(compare_outputs(out, io.at("expected")).rel_l2, 1e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(All, Fixture, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<FixtureCase>& info) {
                           return info.param.name + "_layer" + std::to_string(info.param.layer);
                         });

}  // namespace
}  // namespace qmoe
