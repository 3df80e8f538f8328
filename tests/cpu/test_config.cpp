// config.json parsing: quantization_config (args, normalisation, validation, presets, groups) and
// the MoE hyper-parameters of each supported model family.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "qmoe/config.h"
#include "qmoe/error.h"

namespace qmoe {
namespace {

// The message of the qmoe::Error that f throws, or "<no error>".
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

bool throws_not_supported(const std::function<void()>& f) {
  try {
    f();
  } catch (const NotSupported&) {
    return true;
  } catch (const Error&) {
    return false;
  }
  return false;
}

// A quantization_config with one group "group_0" whose weights are `weights` (a JSON object body).
std::string one_group(const std::string& weights, const std::string& extra_group = "",
                      const std::string& format = "pack-quantized") {
  return R"({"quant_method": "compressed-tensors", "format": ")" + format +
         R"(", "config_groups": {"group_0": {"targets": ["Linear"], "weights": {)" + weights +
         "}" + extra_group + "}}}";
}

QuantArgs weights_of(const std::string& weights_body) {
  const QuantConfig c = parse_quant_config(one_group(weights_body), "q.json");
  EXPECT_EQ(c.groups.size(), 1u);
  return *c.groups.at(0).weights;
}

std::string weights_error(const std::string& weights_body) {
  return error_of([&] { parse_quant_config(one_group(weights_body), "q.json"); });
}

std::string input_error(const std::string& input_body) {
  return error_of([&] {
    parse_quant_config(one_group(R"("num_bits": 8, "type": "float")",
                                 R"(, "input_activations": {)" + input_body + "}",
                                 "float-quantized"),
                       "q.json");
  });
}

// ---- quantization_config: the top level ----

TEST(QuantConfig, ParsesTheNvfp4ExampleOfTheFormatNote) {
  const std::string text = R"({
    "config_groups": {
      "group_0": {
        "format": "nvfp4-pack-quantized",
        "input_activations": {"actorder": null, "block_structure": null, "dynamic": "local",
          "group_size": 16, "num_bits": 4, "observer": "static_minmax", "observer_kwargs": {},
          "scale_dtype": "torch.float8_e4m3fn", "strategy": "tensor_group", "symmetric": true,
          "type": "float", "zp_dtype": null},
        "output_activations": null,
        "targets": ["Linear"],
        "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": 16,
          "num_bits": 4, "observer": "memoryless_minmax", "observer_kwargs": {},
          "scale_dtype": "torch.float8_e4m3fn", "strategy": "tensor_group", "symmetric": true,
          "type": "float", "zp_dtype": null}
      }
    },
    "format": "nvfp4-pack-quantized",
    "global_compression_ratio": null,
    "ignore": ["lm_head", "model.layers.0.mlp.gate"],
    "kv_cache_scheme": null,
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed",
    "sparsity_config": {},
    "transform_config": {},
    "version": "0.14.0"
  })";
  const QuantConfig c = parse_quant_config(text, "q.json");
  EXPECT_EQ(c.quant_method, "compressed-tensors");
  EXPECT_EQ(c.version, "0.14.0");
  EXPECT_EQ(c.format, "nvfp4-pack-quantized");
  EXPECT_EQ(c.quantization_status, "compressed");
  EXPECT_EQ(c.ignore, (std::vector<std::string>{"lm_head", "model.layers.0.mlp.gate"}));
  EXPECT_TRUE(c.dropped_attention_groups.empty());
  ASSERT_EQ(c.groups.size(), 1u);
  const QuantScheme& g = c.groups[0];
  EXPECT_EQ(g.name, "group_0");
  EXPECT_EQ(g.targets, std::vector<std::string>{"Linear"});
  EXPECT_EQ(g.format, "nvfp4-pack-quantized");
  EXPECT_FALSE(g.output_activations.has_value());
  ASSERT_TRUE(g.weights && g.input_activations);
  EXPECT_EQ(g.weights->num_bits, 4);
  EXPECT_EQ(g.weights->type, QuantType::kFloat);
  EXPECT_EQ(g.weights->strategy, Strategy::kTensorGroup);
  EXPECT_EQ(g.weights->group_size, 16);
  EXPECT_EQ(g.weights->dynamic, DynamicMode::kStatic);
  EXPECT_EQ(g.weights->scale_dtype, "float8_e4m3fn");
  EXPECT_EQ(g.weights->zp_dtype, std::nullopt);
  EXPECT_EQ(g.input_activations->dynamic, DynamicMode::kLocal);
  EXPECT_TRUE(g.input_activations->is_dynamic());
}

TEST(QuantConfig, DefaultsOfAnEmptyArgsObject) {
  const QuantArgs a = weights_of("");
  EXPECT_EQ(a.num_bits, 8);
  EXPECT_EQ(a.type, QuantType::kInt);
  EXPECT_TRUE(a.symmetric);
  EXPECT_EQ(a.group_size, std::nullopt);
  EXPECT_EQ(a.strategy, Strategy::kTensor);
  EXPECT_EQ(a.block_structure, std::nullopt);
  EXPECT_EQ(a.dynamic, DynamicMode::kStatic);
  EXPECT_EQ(a.actorder, ActOrder::kNone);
  EXPECT_EQ(a.scale_dtype, std::nullopt);
  EXPECT_EQ(a.zp_dtype, std::nullopt);
}

TEST(QuantConfig, GroupOrderIsFileOrder) {
  const std::string text = R"({"quant_method": "compressed-tensors", "config_groups": {
      "group_2": {"targets": ["b"], "weights": {"num_bits": 4}},
      "group_10": {"targets": ["a"], "weights": {"num_bits": 8}},
      "alpha": {"targets": ["c"], "weights": null}}})";
  const QuantConfig c = parse_quant_config(text, "q.json");
  ASSERT_EQ(c.groups.size(), 3u);
  EXPECT_EQ(c.groups[0].name, "group_2");
  EXPECT_EQ(c.groups[1].name, "group_10");
  EXPECT_EQ(c.groups[2].name, "alpha");
  EXPECT_FALSE(c.groups[2].weights.has_value());
}

TEST(QuantConfig, UnknownKeysAreIgnoredAtEveryLevel) {
  const std::string text = R"({"quant_method": "compressed-tensors", "surprise": [1, 2],
      "config_groups": {"group_0": {"targets": ["Linear"], "new_field": {"x": 1},
        "weights": {"num_bits": 4, "group_size": 128, "observer": "minmax", "future": true}}}})";
  const QuantConfig c = parse_quant_config(text, "q.json");
  EXPECT_EQ(c.groups.at(0).weights->num_bits, 4);
  EXPECT_EQ(c.groups.at(0).weights->strategy, Strategy::kGroup);
}

TEST(QuantConfig, QuantMethodMustBeCompressedTensors) {
  const auto parse = [](const std::string& t) { parse_quant_config(t, "q.json"); };
  const std::string gptq = R"({"quant_method": "gptq", "config_groups": {}})";
  EXPECT_TRUE(throws_not_supported([&] { parse(gptq); }));
  EXPECT_EQ(error_of([&] { parse(gptq); }),
            "q.json: quant_method: \"gptq\" is not supported (qmoe reads \"compressed-tensors\" "
            "checkpoints only)");
  EXPECT_EQ(error_of([&] { parse(R"({"config_groups": {}})"); }),
            "q.json: quant_method: missing required key");
  EXPECT_EQ(error_of([&] { parse(R"({"quant_method": 3, "config_groups": {}})"); }),
            "q.json: quant_method: expected a string, got integer");
}

TEST(QuantConfig, TopLevelTypeErrors) {
  const auto err = [](const std::string& t) {
    return error_of([&] { parse_quant_config(t, "q.json"); });
  };
  EXPECT_EQ(err("[1]"), "q.json: expected an object, got array");
  EXPECT_EQ(err(R"({"quant_method": "compressed-tensors"})"),
            "q.json: config_groups: missing required key");
  EXPECT_EQ(err(R"({"quant_method": "compressed-tensors", "config_groups": []})"),
            "q.json: config_groups: expected an object, got array");
  EXPECT_EQ(err(R"({"quant_method": "compressed-tensors", "config_groups": {}, "ignore": "x"})"),
            "q.json: ignore: expected a list of strings, got string");
  EXPECT_EQ(err(R"({"quant_method": "compressed-tensors", "config_groups": {}, "ignore": [1]})"),
            "q.json: ignore[0]: expected a string, got integer");
  EXPECT_EQ(err(R"({"quant_method": "compressed-tensors", "config_groups": {}, "format": 1.5})"),
            "q.json: format: expected a string, got float");
  EXPECT_EQ(err(R"({"quant_method": "compressed-tensors", "config_groups": {"g": 7}})"),
            "q.json: config_groups.g: expected a scheme object or a list of targets, got integer");
  EXPECT_EQ(err(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {}}})"),
            "q.json: config_groups.g.targets: missing required key");
  EXPECT_EQ(err(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": "Linear"}}})"),
            "q.json: config_groups.g.targets: expected a list of strings, got string");
  EXPECT_EQ(err(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": [], "weights": 4}}})"),
            "q.json: config_groups.g.weights: expected an object, got integer");
  EXPECT_EQ(err("{\"quant_method\": ").rfind("q.json: invalid JSON: ", 0), 0u);
}

TEST(QuantConfig, WrongTypesNameTheKeyPath) {
  EXPECT_EQ(weights_error(R"("num_bits": "4")"),
            "q.json: config_groups.group_0.weights.num_bits: expected an integer, got string");
  EXPECT_EQ(weights_error(R"("num_bits": 4.0)"),
            "q.json: config_groups.group_0.weights.num_bits: expected an integer, got float");
  EXPECT_EQ(weights_error(R"("symmetric": 1)"),
            "q.json: config_groups.group_0.weights.symmetric: expected a boolean, got integer");
  EXPECT_EQ(weights_error(R"("type": null)"),
            "q.json: config_groups.group_0.weights.type: expected a string, got null");
  EXPECT_EQ(weights_error(R"("group_size": "128")"),
            "q.json: config_groups.group_0.weights.group_size: expected an integer, got string");
  EXPECT_EQ(weights_error(R"("strategy": 1)"),
            "q.json: config_groups.group_0.weights.strategy: expected a string, got integer");
  EXPECT_EQ(weights_error(R"("scale_dtype": 1)"),
            "q.json: config_groups.group_0.weights.scale_dtype: expected a string, got integer");
  EXPECT_EQ(weights_error(R"("group_size": 4294967424)"),
            "q.json: config_groups.group_0.weights.group_size: integer out of range: 4294967424");
  EXPECT_EQ(weights_error(R"("num_bits": 0)"),
            "q.json: config_groups.group_0.weights.num_bits: expected 1..32, got 0");
  EXPECT_EQ(weights_error(R"("type": "fp")"),
            "q.json: config_groups.group_0.weights.type: expected \"int\" or \"float\", got \"fp\"");
  EXPECT_EQ(weights_error(R"("strategy": "row")"),
            "q.json: config_groups.group_0.weights.strategy: unknown strategy \"row\"");
  EXPECT_EQ(weights_error(R"("dynamic": "global")"),
            "q.json: config_groups.group_0.weights.dynamic: expected true, false or \"local\", "
            "got \"global\"");
  EXPECT_EQ(weights_error(R"("dynamic": null)"),
            "q.json: config_groups.group_0.weights.dynamic: expected true, false or \"local\", "
            "got null");
  EXPECT_EQ(weights_error(R"("actorder": "column", "group_size": 128)"),
            "q.json: config_groups.group_0.weights.actorder: expected \"group\", \"weight\", "
            "\"dynamic\", \"static\", a boolean or null, got \"column\"");
  EXPECT_EQ(weights_error(R"("actorder": 1)"),
            "q.json: config_groups.group_0.weights.actorder: expected a string, a boolean or "
            "null, got integer");
}

TEST(QuantConfig, TypeAndStrategyAreCaseInsensitive) {
  const QuantArgs a = weights_of(R"("type": "FLOAT", "strategy": "Channel")");
  EXPECT_EQ(a.type, QuantType::kFloat);
  EXPECT_EQ(a.strategy, Strategy::kChannel);
  EXPECT_EQ(weights_of(R"("type": "Int", "strategy": "TENSOR_GROUP", "group_size": 16)").strategy,
            Strategy::kTensorGroup);
  EXPECT_EQ(weights_of(R"("strategy": "attn_head")").strategy, Strategy::kAttnHead);
}

TEST(QuantConfig, StrategyIsInferredFromGroupSize) {
  EXPECT_EQ(weights_of(R"("group_size": null)").strategy, Strategy::kTensor);
  EXPECT_EQ(weights_of(R"("group_size": 128)").strategy, Strategy::kGroup);
  EXPECT_EQ(weights_of(R"("group_size": -1)").strategy, Strategy::kChannel);
  EXPECT_EQ(weights_of(R"("group_size": 32, "strategy": null)").strategy, Strategy::kGroup);
  // An explicit strategy wins; group_size 0 passes with channel (CT only rejects > 0 there).
  EXPECT_EQ(weights_of(R"("group_size": 0, "strategy": "channel")").strategy, Strategy::kChannel);
}

TEST(QuantConfig, BlockStructureAsListOrString) {
  EXPECT_EQ(weights_of(R"("strategy": "block", "block_structure": [128, 64])").block_structure,
            (std::array<int, 2>{128, 64}));
  EXPECT_EQ(weights_of(R"("strategy": "block", "block_structure": "128x32")").block_structure,
            (std::array<int, 2>{128, 32}));
  EXPECT_EQ(weights_error(R"("strategy": "block", "block_structure": "128*32")"),
            "q.json: config_groups.group_0.weights.block_structure: expected \"RxC\" or "
            "[rows, cols], got \"128*32\"");
  EXPECT_EQ(weights_error(R"("strategy": "block", "block_structure": [128])"),
            "q.json: config_groups.group_0.weights.block_structure: expected [rows, cols], got 1 "
            "entries");
  EXPECT_EQ(weights_error(R"("strategy": "block", "block_structure": [128, "a"])"),
            "q.json: config_groups.group_0.weights.block_structure[1]: expected an integer, got "
            "string");
  EXPECT_EQ(weights_error(R"("strategy": "block", "block_structure": [128, 0])"),
            "q.json: config_groups.group_0.weights.block_structure: block sizes must be positive, "
            "got 128x0");
  EXPECT_EQ(weights_error(R"("strategy": "block", "block_structure": "0x8")"),
            "q.json: config_groups.group_0.weights.block_structure: block sizes must be positive, "
            "got 0x8");
  EXPECT_EQ(weights_error(R"("strategy": "block", "block_structure": {"r": 1})"),
            "q.json: config_groups.group_0.weights.block_structure: expected a list [rows, cols] "
            "or a string \"RxC\", got object");
}

TEST(QuantConfig, DynamicValues) {
  EXPECT_EQ(weights_of(R"("dynamic": false)").dynamic, DynamicMode::kStatic);
  EXPECT_EQ(weights_of(R"("dynamic": true)").dynamic, DynamicMode::kDynamic);
  EXPECT_EQ(weights_of(R"("dynamic": "local", "strategy": "tensor_group", "group_size": 16)").dynamic,
            DynamicMode::kLocal);
}

TEST(QuantConfig, ActorderAliases) {
  const auto actorder = [](const std::string& v) {
    return weights_of(R"("group_size": 128, "actorder": )" + v).actorder;
  };
  EXPECT_EQ(actorder("\"group\""), ActOrder::kGroup);
  EXPECT_EQ(actorder("\"dynamic\""), ActOrder::kGroup);
  EXPECT_EQ(actorder("\"GROUP\""), ActOrder::kGroup);
  EXPECT_EQ(actorder("true"), ActOrder::kGroup);
  EXPECT_EQ(actorder("\"weight\""), ActOrder::kWeight);
  EXPECT_EQ(actorder("\"static\""), ActOrder::kWeight);
  EXPECT_EQ(actorder("false"), ActOrder::kNone);
  EXPECT_EQ(actorder("null"), ActOrder::kNone);
}

TEST(QuantConfig, DtypesDropTheTorchPrefixAndZeroPointDtypeIsInferred) {
  const QuantArgs a = weights_of(R"("scale_dtype": "torch.uint8", "zp_dtype": "torch.int8")");
  EXPECT_EQ(a.scale_dtype, "uint8");
  EXPECT_EQ(a.zp_dtype, "int8");
  EXPECT_EQ(weights_of(R"("scale_dtype": "float8_e4m3fn")").scale_dtype, "float8_e4m3fn");
  EXPECT_EQ(weights_of(R"("num_bits": 4, "symmetric": false)").zp_dtype, "int8");
  EXPECT_EQ(weights_of(R"("num_bits": 16, "symmetric": false)").zp_dtype, "int16");
  EXPECT_EQ(weights_of(R"("num_bits": 32, "symmetric": false)").zp_dtype, "int32");
  EXPECT_EQ(weights_of(R"("num_bits": 8, "type": "float", "symmetric": false)").zp_dtype,
            "float8_e4m3fn");
  EXPECT_EQ(weights_of(R"("num_bits": 4, "symmetric": false, "zp_dtype": "torch.int32")").zp_dtype,
            "int32");
  EXPECT_EQ(weights_of(R"("num_bits": 4)").zp_dtype, std::nullopt);
}

TEST(QuantConfig, ValidationErrorsNameTheKeyPath) {
  const std::string w = "q.json: config_groups.group_0.weights.";
  EXPECT_EQ(weights_error(R"("group_size": -2)"),
            w + "group_size: must be null, -1 (per channel) or positive, got -2");
  EXPECT_EQ(weights_error(R"("group_size": 0)"),
            w + "group_size: group_size 0 without a strategy is invalid (use -1 for per channel)");
  EXPECT_EQ(weights_error(R"("strategy": "token")"),
            w + "dynamic: strategy token requires dynamic: true (no static per-token scales)");
  EXPECT_EQ(weights_error(R"("strategy": "group")"),
            w + "group_size: strategy group requires a positive group_size, got null");
  EXPECT_EQ(weights_error(R"("strategy": "tensor_group", "group_size": -1)"),
            w + "group_size: strategy tensor_group requires a positive group_size, got -1");
  EXPECT_EQ(weights_error(R"("strategy": "channel", "group_size": 128)"),
            w + "group_size: group_size 128 requires strategy group or tensor_group, got channel");
  EXPECT_EQ(weights_error(R"("strategy": "block")"),
            w + "block_structure: strategy block requires block_structure");
  EXPECT_EQ(weights_error(R"("block_structure": [128, 128])"),
            w + "block_structure: block_structure requires strategy block, got tensor");
  EXPECT_EQ(weights_error(R"("strategy": "token", "dynamic": "local")"),
            w + "dynamic: dynamic \"local\" requires strategy tensor_group, got token");
  EXPECT_EQ(weights_error(R"("strategy": "channel", "dynamic": true)"),
            w + "dynamic: dynamic quantization requires strategy token, tensor, tensor_group or "
                "group, got channel");
  EXPECT_EQ(weights_error(R"("strategy": "channel", "actorder": "group")"),
            w + "actorder: actorder group requires strategy group or tensor_group, got channel");
  // actorder "weight" is fine with any strategy (CT 0.16+ rule).
  EXPECT_EQ(weights_of(R"("strategy": "channel", "actorder": "weight")").actorder, ActOrder::kWeight);
}

TEST(QuantConfig, ActivationArgsValidation) {
  const std::string in = "q.json: config_groups.group_0.input_activations.";
  EXPECT_EQ(input_error(R"("strategy": "channel")"),
            in + "strategy: input activations need strategy token, tensor, group, tensor_group "
                 "or attn_head, got channel");
  EXPECT_EQ(input_error(R"("strategy": "tensor", "actorder": "weight")"),
            in + "actorder: actorder is only valid for weights");
  EXPECT_EQ(input_error(R"("strategy": "token")"),
            in + "dynamic: strategy token requires dynamic: true (no static per-token scales)");
  EXPECT_EQ(input_error(R"("strategy": "token", "dynamic": true, "num_bits": "8")"),
            in + "num_bits: expected an integer, got string");
}

TEST(QuantConfig, EmptyInputActivationsObjectCountsAsAbsent) {
  const QuantConfig c = parse_quant_config(
      one_group(R"("num_bits": 4, "group_size": 128)", R"(, "input_activations": {})"), "q.json");
  EXPECT_FALSE(c.groups.at(0).input_activations.has_value());
}

TEST(QuantConfig, GroupFormatOverridesAndMixedPrecisionIsTopLevelOnly) {
  const QuantConfig c = parse_quant_config(
      one_group(R"("num_bits": 8, "type": "float")", R"(, "format": "float-quantized")",
                "mixed-precision"),
      "q.json");
  EXPECT_EQ(c.format, "mixed-precision");
  EXPECT_EQ(c.groups.at(0).format, "float-quantized");
  EXPECT_EQ(error_of([] {
              parse_quant_config(one_group("", R"(, "format": "mixed-precision")"), "q.json");
            }),
            "q.json: config_groups.group_0.format: \"mixed-precision\" is only valid as the "
            "top-level format");
}

TEST(QuantConfig, AttentionOnlyGroupsAreDropped) {
  const std::string text = R"({"quant_method": "compressed-tensors", "config_groups": {
      "group_0": {"targets": ["Linear"], "weights": {"num_bits": 8}},
      "attn": {"targets": ["LlamaAttention"], "input_activations": {"num_bits": 8, "type": "float"}},
      "two": {"targets": ["LlamaAttention", "Linear"], "weights": {"num_bits": 4}},
      "FP8": ["Qwen3MoeAttention"]}})";
  const QuantConfig c = parse_quant_config(text, "q.json");
  ASSERT_EQ(c.groups.size(), 2u);
  EXPECT_EQ(c.groups[0].name, "group_0");
  EXPECT_EQ(c.groups[1].name, "two");
  EXPECT_EQ(c.dropped_attention_groups, (std::vector<std::string>{"attn", "FP8"}));
}

// ---- presets ----

QuantScheme preset(const std::string& name) {
  const QuantConfig c = parse_quant_config(
      R"({"quant_method": "compressed-tensors", "config_groups": {")" + name +
          R"(": ["Linear", "re:.*experts.*"]}})",
      "q.json");
  EXPECT_EQ(c.groups.size(), 1u);
  EXPECT_EQ(c.groups.at(0).targets, (std::vector<std::string>{"Linear", "re:.*experts.*"}));
  return c.groups.at(0);
}

QuantArgs args(int bits, QuantType type, Strategy strategy, std::optional<int> gs,
               DynamicMode dynamic = DynamicMode::kStatic) {
  QuantArgs a;
  a.num_bits = bits;
  a.type = type;
  a.strategy = strategy;
  a.group_size = gs;
  a.dynamic = dynamic;
  return a;
}

const auto kI = QuantType::kInt;
const auto kF = QuantType::kFloat;
const auto kDyn = DynamicMode::kDynamic;

TEST(Presets, IntegerSchemes) {
  const QuantArgs w4g = args(4, kI, Strategy::kGroup, 128);
  QuantScheme s = preset("W4A16");
  EXPECT_EQ(s.weights, w4g);
  EXPECT_FALSE(s.input_activations);

  s = preset("W4A16_ASYM");
  QuantArgs asym = w4g;
  asym.symmetric = false;
  asym.zp_dtype = "int8";
  EXPECT_EQ(s.weights, asym);

  s = preset("W8A16");  // CT 0.16+: group 128
  EXPECT_EQ(s.weights, args(8, kI, Strategy::kGroup, 128));
  EXPECT_FALSE(s.input_activations);

  const QuantArgs a8 = args(8, kI, Strategy::kToken, std::nullopt, kDyn);
  for (const char* name : {"W8A8", "INT8", "int8"}) {
    s = preset(name);
    EXPECT_EQ(s.weights, args(8, kI, Strategy::kChannel, -1)) << name;
    EXPECT_EQ(s.input_activations, a8) << name;
  }
  s = preset("W4A8");
  EXPECT_EQ(s.weights, w4g);
  EXPECT_EQ(s.input_activations, a8);
  s = preset("W4AFP8");
  EXPECT_EQ(s.weights, w4g);
  EXPECT_EQ(s.input_activations, args(8, kF, Strategy::kToken, std::nullopt, kDyn));
  EXPECT_EQ(preset("w4a16").weights, w4g);  // CT upper-cases preset names
}

TEST(Presets, Fp8Schemes) {
  QuantScheme s = preset("FP8");
  EXPECT_EQ(s.weights, args(8, kF, Strategy::kTensor, std::nullopt));
  EXPECT_EQ(s.input_activations, args(8, kF, Strategy::kTensor, std::nullopt));
  s = preset("FP8_DYNAMIC");
  EXPECT_EQ(s.weights, args(8, kF, Strategy::kChannel, -1));
  EXPECT_EQ(s.input_activations, args(8, kF, Strategy::kToken, std::nullopt, kDyn));
  s = preset("FP8_BLOCK");
  QuantArgs block = args(8, kF, Strategy::kBlock, std::nullopt);
  block.block_structure = std::array<int, 2>{128, 128};
  EXPECT_EQ(s.weights, block);
  EXPECT_EQ(s.input_activations, args(8, kF, Strategy::kGroup, 128, kDyn));
}

TEST(Presets, MicroscalingSchemes) {
  QuantArgs nv = args(4, kF, Strategy::kTensorGroup, 16);
  nv.scale_dtype = "float8_e4m3fn";
  QuantScheme s = preset("NVFP4A16");
  EXPECT_EQ(s.weights, nv);
  EXPECT_FALSE(s.input_activations);
  s = preset("NVFP4");
  EXPECT_EQ(s.weights, nv);
  QuantArgs nv_in = nv;
  nv_in.dynamic = DynamicMode::kLocal;
  EXPECT_EQ(s.input_activations, nv_in);

  QuantArgs mx = args(4, kF, Strategy::kGroup, 32);
  mx.scale_dtype = "uint8";
  s = preset("MXFP4A16");
  EXPECT_EQ(s.weights, mx);
  EXPECT_FALSE(s.input_activations);
  s = preset("MXFP4");
  EXPECT_EQ(s.weights, mx);
  QuantArgs mx_in = mx;
  mx_in.dynamic = kDyn;
  EXPECT_EQ(s.input_activations, mx_in);

  QuantArgs mx8 = args(8, kF, Strategy::kGroup, 32);
  mx8.scale_dtype = "uint8";
  s = preset("MXFP8A16");
  EXPECT_EQ(s.weights, mx8);
  EXPECT_FALSE(s.input_activations);
  s = preset("MXFP8");
  EXPECT_EQ(s.weights, mx8);
  QuantArgs mx8_in = mx8;
  mx8_in.dynamic = kDyn;
  EXPECT_EQ(s.input_activations, mx8_in);

  s = preset("UNQUANTIZED");
  EXPECT_FALSE(s.weights);
  EXPECT_FALSE(s.input_activations);
}

TEST(Presets, WxAyFamily) {
  QuantScheme s = preset("W3A16");
  EXPECT_EQ(s.weights, args(3, kI, Strategy::kGroup, 128));
  EXPECT_FALSE(s.input_activations);
  s = preset("W2A16");
  EXPECT_EQ(s.weights, args(2, kI, Strategy::kGroup, 128));
  s = preset("W6A8");
  EXPECT_EQ(s.weights, args(6, kI, Strategy::kGroup, 128));
  EXPECT_EQ(s.input_activations, args(8, kI, Strategy::kToken, std::nullopt, kDyn));
  s = preset("W2A4");
  EXPECT_EQ(s.weights, args(2, kI, Strategy::kGroup, 128));
  EXPECT_EQ(s.input_activations, args(4, kI, Strategy::kToken, std::nullopt, kDyn));
  s = preset("W4A4");
  EXPECT_EQ(s.input_activations, args(4, kI, Strategy::kToken, std::nullopt, kDyn));
}

TEST(Presets, UnknownPresetIsNamed) {
  for (const char* name : {"W5A4", "W9A16", "W1A16", "W8A4", "FP4", "group_0", "W4A16X"}) {
    EXPECT_EQ(error_of([&] {
                parse_quant_config(R"({"quant_method": "compressed-tensors", "config_groups": {")" +
                                       std::string(name) + R"(": ["Linear"]}})",
                                   "q.json");
              }),
              "q.json: config_groups." + std::string(name) +
                  ": a list of targets needs a preset scheme name as its key; unknown preset \"" +
                  name + "\"");
  }
}

// ---- small helpers of config.h ----

TEST(QuantConfig, ToStringOfArgs) {
  QuantArgs a = args(4, kI, Strategy::kGroup, 128);
  a.actorder = ActOrder::kWeight;
  EXPECT_EQ(to_string(a),
            "num_bits=4 type=int symmetric=true group_size=128 strategy=group "
            "block_structure=None dynamic=false actorder=weight scale_dtype=None zp_dtype=None");
  QuantArgs b = args(8, kF, Strategy::kBlock, std::nullopt);
  b.block_structure = std::array<int, 2>{128, 64};
  b.symmetric = false;
  b.scale_dtype = "float32";
  b.zp_dtype = "float8_e4m3fn";
  EXPECT_EQ(to_string(b),
            "num_bits=8 type=float symmetric=false group_size=None strategy=block "
            "block_structure=[128, 64] dynamic=false actorder=None scale_dtype=float32 "
            "zp_dtype=float8_e4m3fn");
  EXPECT_EQ(to_string(DynamicMode::kLocal), "local");
  EXPECT_EQ(to_string(DynamicMode::kDynamic), "true");
  EXPECT_EQ(to_string(Strategy::kTensorGroup), "tensor_group");
  EXPECT_EQ(to_string(Strategy::kAttnHead), "attn_head");
  EXPECT_EQ(to_string(QuantType::kFloat), "float");
  EXPECT_EQ(to_string(ActOrder::kNone), "none");
  EXPECT_EQ(to_string(ActOrder::kGroup), "group");
}

TEST(QuantConfig, ActivationQuantFormats) {
  for (const char* f : {"naive-quantized", "int-quantized", "float-quantized",
                        "nvfp4-pack-quantized", "mxfp4-pack-quantized"}) {
    EXPECT_TRUE(is_activation_quant_format(f)) << f;
  }
  for (const char* f : {"pack-quantized", "marlin-24", "dense", "mixed-precision", "",
                        "mxfp8-quantized"}) {
    EXPECT_FALSE(is_activation_quant_format(f)) << f;
  }
}

// ---- model config ----

const std::string kW4A16Quant = R"({"quant_method": "compressed-tensors",
    "format": "pack-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
    "weights": {"num_bits": 4, "group_size": 128, "strategy": "group"}}}, "ignore": ["lm_head"]})";

TEST(ModelConfig, Mixtral) {
  const ModelConfig c = parse_model_config(R"({
      "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
      "intermediate_size": 14336, "num_hidden_layers": 3, "num_local_experts": 8,
      "num_experts_per_tok": 2, "hidden_act": "silu", "router_jitter_noise": 0.0,
      "quantization_config": )" + kW4A16Quant + "}",
                                           "mixtral/config.json");
  EXPECT_EQ(c.path, "mixtral/config.json");
  const MoeConfig& m = c.moe;
  EXPECT_EQ(m.architecture, "MixtralForCausalLM");
  EXPECT_EQ(m.model_type, "mixtral");
  EXPECT_EQ(m.num_layers, 3);
  EXPECT_EQ(m.moe_layers, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.top_k, 2);
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.inter, 14336);
  EXPECT_EQ(m.num_shared_experts, 0);
  EXPECT_EQ(m.scoring, Scoring::kSoftmax);
  EXPECT_TRUE(m.renormalize);
  EXPECT_EQ(m.num_expert_group, 0);
  EXPECT_FALSE(m.use_correction_bias);
  EXPECT_EQ(m.activation, Activation::kSilu);
  EXPECT_FALSE(m.has_bias);
  EXPECT_EQ(m.naming.experts_prefix, "model.layers.{L}.block_sparse_moe.experts");
  EXPECT_EQ(m.naming.gate_name, "w1");
  EXPECT_EQ(m.naming.up_name, "w3");
  EXPECT_EQ(m.naming.down_name, "w2");
  EXPECT_EQ(m.naming.router_prefix, "model.layers.{L}.block_sparse_moe.gate");
  ASSERT_TRUE(c.quant.has_value());
  EXPECT_EQ(c.quant->source_key, "quantization_config");
  EXPECT_EQ(c.quant->groups.at(0).weights->num_bits, 4);
  EXPECT_EQ(c.quant->ignore, std::vector<std::string>{"lm_head"});
}

TEST(ModelConfig, Qwen2Moe) {
  const ModelConfig c = parse_model_config(R"({
      "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 2048,
      "intermediate_size": 5632, "moe_intermediate_size": 1408, "num_hidden_layers": 6,
      "num_experts": 60, "num_experts_per_tok": 4, "shared_expert_intermediate_size": 5632,
      "decoder_sparse_step": 2, "mlp_only_layers": [3], "hidden_act": "silu"})",
                                           "config.json");
  const MoeConfig& m = c.moe;
  EXPECT_EQ(m.num_experts, 60);
  EXPECT_EQ(m.top_k, 4);
  EXPECT_EQ(m.inter, 1408);
  EXPECT_EQ(m.num_shared_experts, 1);
  EXPECT_EQ(m.shared_inter, 5632);
  EXPECT_FALSE(m.renormalize);  // norm_topk_prob defaults to false for qwen2_moe
  EXPECT_EQ(m.moe_layers, (std::vector<int>{1, 5}));  // (L+1) % 2 == 0, minus layer 3
  EXPECT_EQ(m.scoring, Scoring::kSoftmax);
  EXPECT_EQ(m.naming.experts_prefix, "model.layers.{L}.mlp.experts");
  EXPECT_EQ(m.naming.gate_name, "gate_proj");
  EXPECT_EQ(m.naming.up_name, "up_proj");
  EXPECT_EQ(m.naming.down_name, "down_proj");
  EXPECT_EQ(m.naming.router_prefix, "model.layers.{L}.mlp.gate");
  EXPECT_FALSE(c.quant.has_value());

  EXPECT_EQ(error_of([] {
              parse_model_config(R"({"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 8,
                  "num_hidden_layers": 1, "num_experts": 4, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 8})",
                                 "config.json");
            }),
            "config.json: shared_expert_intermediate_size: missing required key");
}

TEST(ModelConfig, Qwen3Moe) {
  const ModelConfig c = parse_model_config(R"({
      "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
      "moe_intermediate_size": 768, "num_hidden_layers": 4, "num_experts": 128,
      "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
      "quantization_config": )" + kW4A16Quant + "}",
                                           "config.json");
  const MoeConfig& m = c.moe;
  EXPECT_EQ(m.num_experts, 128);
  EXPECT_EQ(m.top_k, 8);
  EXPECT_EQ(m.inter, 768);
  EXPECT_EQ(m.num_shared_experts, 0);
  EXPECT_TRUE(m.renormalize);  // norm_topk_prob defaults to true for qwen3_moe
  EXPECT_EQ(m.moe_layers, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(m.activation, Activation::kSilu);
  const ModelConfig c2 = parse_model_config(R"({
      "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64, "moe_intermediate_size": 32,
      "num_hidden_layers": 2, "num_experts": 4, "num_experts_per_tok": 2,
      "norm_topk_prob": false})",
                                            "config.json");
  EXPECT_FALSE(c2.moe.renormalize);
}

TEST(ModelConfig, DeepseekV2LiteUsesPlainSoftmaxTopK) {
  const ModelConfig c = parse_model_config(R"({
      "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
      "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
      "num_hidden_layers": 27, "n_routed_experts": 64, "n_shared_experts": 2,
      "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1,
      "topk_method": "greedy", "n_group": 1, "topk_group": 1, "norm_topk_prob": false,
      "routed_scaling_factor": 1.0, "scoring_func": "softmax"})",
                                           "config.json");
  const MoeConfig& m = c.moe;
  EXPECT_EQ(m.num_experts, 64);
  EXPECT_EQ(m.top_k, 6);
  EXPECT_EQ(m.inter, 1408);
  EXPECT_EQ(m.num_shared_experts, 2);
  EXPECT_EQ(m.shared_inter, 2816);
  EXPECT_EQ(m.moe_layers.size(), 26u);
  EXPECT_EQ(m.moe_layers.front(), 1);
  EXPECT_EQ(m.moe_layers.back(), 26);
  EXPECT_EQ(m.scoring, Scoring::kSoftmax);
  EXPECT_FALSE(m.renormalize);
  EXPECT_EQ(m.num_expert_group, 0);
  EXPECT_EQ(m.topk_group, 0);
  EXPECT_FALSE(m.use_correction_bias);
  EXPECT_FLOAT_EQ(m.routed_scaling_factor, 1.0f);
  EXPECT_EQ(m.naming.experts_prefix, "model.layers.{L}.mlp.experts");
  EXPECT_EQ(m.naming.router_prefix, "model.layers.{L}.mlp.gate");
}

TEST(ModelConfig, DeepseekV2GroupedAndDefaults) {
  const ModelConfig c = parse_model_config(R"({
      "architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 5120,
      "moe_intermediate_size": 1536, "num_hidden_layers": 6, "n_routed_experts": 160,
      "num_experts_per_tok": 6, "n_shared_experts": null, "topk_method": "group_limited_greedy",
      "n_group": 8, "topk_group": 3, "moe_layer_freq": 2, "routed_scaling_factor": 16})",
                                           "config.json");
  const MoeConfig& m = c.moe;
  EXPECT_EQ(m.num_expert_group, 8);
  EXPECT_EQ(m.topk_group, 3);
  EXPECT_EQ(m.scoring, Scoring::kSoftmax);  // V2 default
  EXPECT_FALSE(m.renormalize);              // V2 default
  EXPECT_FALSE(m.use_correction_bias);
  EXPECT_EQ(m.num_shared_experts, 0);
  EXPECT_EQ(m.moe_layers, (std::vector<int>{0, 2, 4}));
  EXPECT_FLOAT_EQ(m.routed_scaling_factor, 16.0f);
}

TEST(ModelConfig, DeepseekV3) {
  const ModelConfig c = parse_model_config(R"({
      "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
      "hidden_size": 7168, "moe_intermediate_size": 2048, "num_hidden_layers": 5,
      "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
      "first_k_dense_replace": 3, "moe_layer_freq": 1, "topk_method": "noaux_tc",
      "n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5, "hidden_act": "silu"})",
                                           "config.json");
  const MoeConfig& m = c.moe;
  EXPECT_EQ(m.moe_layers, (std::vector<int>{3, 4}));
  EXPECT_EQ(m.scoring, Scoring::kSigmoid);  // V3 default
  EXPECT_TRUE(m.renormalize);               // V3 default
  EXPECT_TRUE(m.use_correction_bias);
  EXPECT_EQ(m.num_expert_group, 8);
  EXPECT_EQ(m.topk_group, 4);
  EXPECT_FLOAT_EQ(m.routed_scaling_factor, 2.5f);
  EXPECT_EQ(m.num_shared_experts, 1);
  EXPECT_EQ(m.shared_inter, 2048);
}

TEST(ModelConfig, KimiK2ByModelType) {
  const ModelConfig c = parse_model_config(R"({
      "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168,
      "moe_intermediate_size": 2048, "num_hidden_layers": 2, "n_routed_experts": 384,
      "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
      "topk_method": "noaux_tc", "n_group": 1, "topk_group": 1, "scoring_func": "sigmoid",
      "norm_topk_prob": true, "routed_scaling_factor": 2.827})",
                                           "config.json");
  const MoeConfig& m = c.moe;
  EXPECT_EQ(m.model_type, "kimi_k2");
  EXPECT_EQ(m.num_experts, 384);
  EXPECT_EQ(m.moe_layers, std::vector<int>{1});
  EXPECT_EQ(m.num_expert_group, 0);  // n_group 1, topk_group 1: plain biased top-k
  EXPECT_TRUE(m.use_correction_bias);
  EXPECT_EQ(m.scoring, Scoring::kSigmoid);
  EXPECT_FLOAT_EQ(m.routed_scaling_factor, 2.827f);
  // kimi_k2 is recognised by model_type whatever the class is called.
  const ModelConfig k = parse_model_config(R"({
      "architectures": ["KimiK2ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 64,
      "moe_intermediate_size": 32, "num_hidden_layers": 1, "n_routed_experts": 8,
      "num_experts_per_tok": 2})",
                                           "config.json");
  EXPECT_EQ(k.moe.scoring, Scoring::kSigmoid);
  EXPECT_TRUE(k.moe.use_correction_bias);
}

TEST(ModelConfig, Glm4Moe) {
  const ModelConfig c = parse_model_config(R"({
      "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "hidden_size": 4096,
      "moe_intermediate_size": 1408, "num_hidden_layers": 4, "n_routed_experts": 128,
      "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
      "n_group": 1, "topk_group": 1, "norm_topk_prob": true, "routed_scaling_factor": 1.0})",
                                           "config.json");
  const MoeConfig& m = c.moe;
  EXPECT_EQ(m.num_experts, 128);
  EXPECT_EQ(m.moe_layers, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(m.scoring, Scoring::kSigmoid);
  EXPECT_TRUE(m.use_correction_bias);
  EXPECT_TRUE(m.renormalize);
  EXPECT_EQ(m.num_shared_experts, 1);
  EXPECT_EQ(m.shared_inter, 1408);
  EXPECT_EQ(m.num_expert_group, 0);
  EXPECT_EQ(m.naming.experts_prefix, "model.layers.{L}.mlp.experts");
}

TEST(ModelConfig, GptOss) {
  const ModelConfig c = parse_model_config(R"({
      "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
      "intermediate_size": 2880, "num_hidden_layers": 2, "num_local_experts": 32,
      "experts_per_token": 4, "swiglu_limit": 7.0, "hidden_act": "silu"})",
                                           "config.json");
  const MoeConfig& m = c.moe;
  EXPECT_EQ(m.num_experts, 32);
  EXPECT_EQ(m.top_k, 4);
  EXPECT_EQ(m.inter, 2880);
  EXPECT_EQ(m.activation, Activation::kSwigluOai);
  EXPECT_FLOAT_EQ(m.swiglu_limit, 7.0f);
  EXPECT_TRUE(m.has_bias);
  EXPECT_TRUE(m.renormalize);
  EXPECT_EQ(m.scoring, Scoring::kSoftmax);
  EXPECT_EQ(m.moe_layers, (std::vector<int>{0, 1}));
  EXPECT_EQ(m.naming.experts_prefix, "model.layers.{L}.mlp.experts");
  EXPECT_EQ(m.naming.gate_name, "gate_proj");
  EXPECT_EQ(m.naming.router_prefix, "model.layers.{L}.mlp.router");
  const ModelConfig c2 = parse_model_config(R"({
      "architectures": ["GptOssForCausalLM"], "hidden_size": 64, "intermediate_size": 64,
      "num_hidden_layers": 1, "num_local_experts": 4, "num_experts_per_tok": 2,
      "swiglu_limit": 5})",
                                            "config.json");
  EXPECT_EQ(c2.moe.top_k, 2);
  EXPECT_FLOAT_EQ(c2.moe.swiglu_limit, 5.0f);
  EXPECT_EQ(error_of([] {
              parse_model_config(R"({"architectures": ["GptOssForCausalLM"], "hidden_size": 64,
                  "intermediate_size": 64, "num_hidden_layers": 1, "num_local_experts": 4,
                  "experts_per_token": 8})",
                                 "config.json");
            }),
            "config.json: experts_per_token (8) exceeds num_local_experts (4)");
}

TEST(ModelConfig, Llama4Multimodal) {
  const ModelConfig c = parse_model_config(R"({
      "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
      "text_config": {"model_type": "llama4_text", "hidden_size": 5120,
        "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_hidden_layers": 4,
        "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
        "hidden_act": "silu",
        "quantization_config": )" + kW4A16Quant + R"(},
      "vision_config": {"hidden_size": 1408}})",
                                           "config.json");
  const MoeConfig& m = c.moe;
  EXPECT_EQ(m.architecture, "Llama4ForConditionalGeneration");
  EXPECT_EQ(m.model_type, "llama4");
  EXPECT_EQ(m.hidden, 5120);
  EXPECT_EQ(m.inter, 8192);
  EXPECT_EQ(m.num_experts, 16);
  EXPECT_EQ(m.top_k, 1);
  EXPECT_EQ(m.moe_layers, (std::vector<int>{1, 3}));
  EXPECT_EQ(m.scoring, Scoring::kSigmoid);
  EXPECT_FALSE(m.renormalize);
  EXPECT_TRUE(m.custom_llama4_routing);
  EXPECT_TRUE(m.router_weight_on_input);
  EXPECT_EQ(m.num_shared_experts, 1);
  EXPECT_EQ(m.shared_inter, 8192);
  EXPECT_EQ(m.naming.experts_prefix, "language_model.model.layers.{L}.feed_forward.experts");
  EXPECT_EQ(m.naming.router_prefix, "language_model.model.layers.{L}.feed_forward.router");
  ASSERT_TRUE(c.quant.has_value());
  EXPECT_EQ(c.quant->source_key, "text_config.quantization_config");

  EXPECT_EQ(error_of([] {
              parse_model_config(R"({"architectures": ["Llama4ForConditionalGeneration"]})",
                                 "config.json");
            }),
            "config.json: text_config: missing required key");
  EXPECT_EQ(error_of([] {
              parse_model_config(R"({"architectures": ["Llama4ForConditionalGeneration"],
                  "text_config": {"hidden_size": 64, "num_hidden_layers": 2,
                  "intermediate_size": 64, "num_local_experts": 4, "num_experts_per_tok": "1"}})",
                                 "config.json");
            }),
            "config.json: text_config.num_experts_per_tok: expected an integer, got string");
}

TEST(ModelConfig, Llama4TextOnlyWithMoeLayers) {
  const ModelConfig c = parse_model_config(R"({
      "architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text", "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 4, "num_local_experts": 4,
      "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "moe_layers": [2, 0, 2]})",
                                           "config.json");
  EXPECT_EQ(c.moe.moe_layers, (std::vector<int>{0, 2}));
  EXPECT_EQ(c.moe.naming.experts_prefix, "model.layers.{L}.feed_forward.experts");
  EXPECT_EQ(c.moe.naming.router_prefix, "model.layers.{L}.feed_forward.router");
  EXPECT_EQ(error_of([] {
              parse_model_config(R"({"architectures": ["Llama4ForCausalLM"], "hidden_size": 64,
                  "intermediate_size": 128, "num_hidden_layers": 4, "num_local_experts": 4,
                  "num_experts_per_tok": 1, "moe_layers": [4]})",
                                 "config.json");
            }),
            "config.json: moe_layers: layer 4 out of range [0, 4)");
  EXPECT_EQ(error_of([] {
              parse_model_config(R"({"architectures": ["Llama4ForCausalLM"], "hidden_size": 64,
                  "intermediate_size": 128, "num_hidden_layers": 4, "num_local_experts": 4,
                  "num_experts_per_tok": 2})",
                                 "config.json");
            }),
            "config.json: num_experts_per_tok: Llama-4 applies the router weight on the input, "
            "which needs top_k == 1, got 2");
}

TEST(ModelConfig, GraniteMoe) {
  const ModelConfig c = parse_model_config(R"({
      "architectures": ["GraniteMoeForCausalLM"], "model_type": "granitemoe", "hidden_size": 1024,
      "intermediate_size": 512, "num_hidden_layers": 2, "num_local_experts": 32,
      "num_experts_per_tok": 8, "hidden_act": "silu"})",
                                           "config.json");
  const MoeConfig& m = c.moe;
  EXPECT_EQ(m.num_experts, 32);
  EXPECT_EQ(m.top_k, 8);
  EXPECT_EQ(m.inter, 512);
  EXPECT_TRUE(m.renormalize);
  EXPECT_EQ(m.scoring, Scoring::kSoftmax);
  EXPECT_EQ(m.moe_layers, (std::vector<int>{0, 1}));
  EXPECT_EQ(m.naming.experts_prefix, "model.layers.{L}.block_sparse_moe");
  EXPECT_EQ(m.naming.gate_name, "input_linear");
  EXPECT_EQ(m.naming.up_name, "input_linear");
  EXPECT_EQ(m.naming.down_name, "output_linear");
}

TEST(ModelConfig, QuantizationConfigCascade) {
  const std::string base = R"("architectures": ["MixtralForCausalLM"], "hidden_size": 64,
      "intermediate_size": 64, "num_hidden_layers": 1, "num_local_experts": 4,
      "num_experts_per_tok": 2)";
  ModelConfig c = parse_model_config("{" + base + R"(, "compression_config": )" + kW4A16Quant + "}",
                                     "config.json");
  ASSERT_TRUE(c.quant.has_value());
  EXPECT_EQ(c.quant->source_key, "compression_config");
  c = parse_model_config("{" + base + R"(, "text_config": {"quantization_config": )" +
                             kW4A16Quant + "}}",
                         "config.json");
  EXPECT_EQ(c.quant->source_key, "text_config.quantization_config");
  // The top-level key wins over the others; null counts as absent.
  c = parse_model_config("{" + base + R"(, "quantization_config": )" + kW4A16Quant +
                             R"(, "compression_config": {"quant_method": "other"}})",
                         "config.json");
  EXPECT_EQ(c.quant->source_key, "quantization_config");
  c = parse_model_config("{" + base + R"(, "quantization_config": null, "compression_config": )" +
                             kW4A16Quant + "}",
                         "config.json");
  EXPECT_EQ(c.quant->source_key, "compression_config");
  // Errors inside carry the full key path from the file's root.
  EXPECT_EQ(error_of([&] {
              parse_model_config("{" + base + R"(, "quantization_config": {
                  "quant_method": "compressed-tensors", "config_groups": {"group_0": {
                  "targets": ["Linear"], "weights": {"num_bits": "4"}}}}})",
                                 "config.json");
            }),
            "config.json: quantization_config.config_groups.group_0.weights.num_bits: expected "
            "an integer, got string");
  EXPECT_EQ(error_of([&] {
              parse_model_config("{" + base + R"(, "text_config": {"quantization_config": {
                  "quant_method": "compressed-tensors", "config_groups": {"group_0": {
                  "targets": ["Linear"], "weights": {"strategy": "group"}}}}}})",
                                 "config.json");
            }),
            "config.json: text_config.quantization_config.config_groups.group_0.weights."
            "group_size: strategy group requires a positive group_size, got null");
  EXPECT_TRUE(throws_not_supported([&] {
    parse_model_config("{" + base + R"(, "quantization_config": {"quant_method": "awq"}})",
                       "config.json");
  }));
}

TEST(ModelConfig, MissingKeysWrongTypesAndBadValues) {
  const auto err = [](const std::string& body) {
    return error_of([&] { parse_model_config(body, "config.json"); });
  };
  const std::string mixtral = R"("architectures": ["MixtralForCausalLM"], )";
  EXPECT_EQ(err(R"({"hidden_size": 1})"), "config.json: architectures: missing required key");
  EXPECT_EQ(err(R"({"architectures": []})"),
            "config.json: architectures: expected a non-empty list of strings, got an empty list");
  EXPECT_EQ(err(R"({"architectures": "MixtralForCausalLM"})"),
            "config.json: architectures: expected a non-empty list of strings, got string");
  EXPECT_EQ(err(R"({"architectures": [7]})"),
            "config.json: architectures[0]: expected a string, got integer");
  EXPECT_EQ(err("[]"), "config.json: expected a JSON object, got array");
  EXPECT_EQ(err("{" + mixtral + R"("num_hidden_layers": 2})"),
            "config.json: hidden_size: missing required key");
  EXPECT_EQ(err("{" + mixtral + R"("hidden_size": 64, "num_hidden_layers": 2,
                "intermediate_size": 64, "num_experts_per_tok": 2})"),
            "config.json: num_local_experts: missing required key");
  EXPECT_EQ(err("{" + mixtral + R"("hidden_size": 64, "num_hidden_layers": 2,
                "intermediate_size": 64, "num_local_experts": 8, "num_experts_per_tok": 9})"),
            "config.json: num_experts_per_tok (9) exceeds num_local_experts (8)");
  EXPECT_EQ(err("{" + mixtral + R"("hidden_size": "64", "num_hidden_layers": 2})"),
            "config.json: hidden_size: expected an integer, got string");
  EXPECT_EQ(err("{" + mixtral + R"("hidden_size": 0, "num_hidden_layers": 2})"),
            "config.json: hidden_size: must be positive, got 0");
  EXPECT_EQ(err("{" + mixtral + R"("hidden_size": 64, "num_hidden_layers": 2,
                "intermediate_size": 64, "num_local_experts": 8, "num_experts_per_tok": 0})"),
            "config.json: num_experts_per_tok: must be positive, got 0");
  EXPECT_EQ(err(R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64,
                "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_experts": 4,
                "num_experts_per_tok": 2, "mlp_only_layers": "0"})"),
            "config.json: mlp_only_layers: expected a list of integers, got string");
  EXPECT_EQ(err(R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64,
                "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_experts": 4,
                "num_experts_per_tok": 2, "norm_topk_prob": "yes"})"),
            "config.json: norm_topk_prob: expected a boolean, got string");
  EXPECT_EQ(err(R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64,
                "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_experts": 4,
                "num_experts_per_tok": 2, "decoder_sparse_step": 0})"),
            "config.json: decoder_sparse_step: must be >= 1, got 0");
  EXPECT_EQ(err("{" + mixtral + R"("hidden_size": 64, "num_hidden_layers": 2,
                "intermediate_size": 64, "num_local_experts": 8, "num_experts_per_tok": 2,
                "text_config": 3})"),
            "config.json: text_config: expected an object, got integer");
  EXPECT_EQ(err("{\"architectures\": ").rfind("config.json: invalid JSON: ", 0), 0u);
}

TEST(ModelConfig, DeepseekGroupValidation) {
  const auto err = [](const std::string& extra) {
    return error_of([&] {
      parse_model_config(R"({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64,
          "moe_intermediate_size": 32, "num_hidden_layers": 2, "n_routed_experts": 16,
          "num_experts_per_tok": 4, )" + extra + "}",
                         "config.json");
    });
  };
  EXPECT_EQ(err(R"("n_group": 3, "topk_group": 1)"),
            "config.json: n_group (3) must divide n_routed_experts (16)");
  EXPECT_EQ(err(R"("n_group": 4, "topk_group": 5)"), "config.json: topk_group (5) exceeds n_group (4)");
  EXPECT_EQ(err(R"("n_group": 8, "topk_group": 1)"),
            "config.json: num_experts_per_tok (4) exceeds topk_group * experts per group (1 * 2)");
  EXPECT_EQ(err(R"("n_group": 0)"), "config.json: n_group: must be positive, got 0");
  EXPECT_EQ(err(R"("routed_scaling_factor": -1)"),
            "config.json: routed_scaling_factor: must be a positive number within float's range, got -1");
  // (finite as a double, infinite or zero as the float the router multiplies by)
  EXPECT_EQ(err(R"("routed_scaling_factor": 1e308)"),
            "config.json: routed_scaling_factor: must be a positive number within float's range, got 1e+308");
  EXPECT_THAT(err(R"("routed_scaling_factor": 1e-300)"),
              ::testing::StartsWith("config.json: routed_scaling_factor: must be a positive number within float's range"));
  EXPECT_EQ(err(R"("routed_scaling_factor": "2.5")"),
            "config.json: routed_scaling_factor: expected a number, got string");
  EXPECT_EQ(err(R"("first_k_dense_replace": -1)"),
            "config.json: first_k_dense_replace: must be >= 0, got -1");
  EXPECT_EQ(err(R"("moe_layer_freq": 0)"), "config.json: moe_layer_freq: must be >= 1, got 0");
  EXPECT_TRUE(throws_not_supported([] {
    parse_model_config(R"({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64,
        "moe_intermediate_size": 32, "num_hidden_layers": 2, "n_routed_experts": 16,
        "num_experts_per_tok": 4, "scoring_func": "sqrtsoftplus"})",
                       "config.json");
  }));
}

TEST(ModelConfig, UnknownArchitectureIsNotSupported) {
  const std::string body = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})";
  EXPECT_TRUE(throws_not_supported([&] { parse_model_config(body, "config.json"); }));
  EXPECT_EQ(error_of([&] { parse_model_config(body, "config.json"); }),
            "config.json: architecture \"LlamaForCausalLM\" (model_type \"llama\") is not "
            "supported; supported: MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, "
            "DeepseekV2ForCausalLM, DeepseekV3ForCausalLM (also model_type kimi_k2), "
            "Glm4MoeForCausalLM, GptOssForCausalLM, Llama4ForConditionalGeneration, "
            "Llama4ForCausalLM, GraniteMoeForCausalLM");
}

TEST(ModelConfig, HiddenActivation) {
  const auto act = [](const std::string& name) {
    return parse_model_config(R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64,
        "intermediate_size": 64, "num_hidden_layers": 1, "num_local_experts": 4,
        "num_experts_per_tok": 2, "hidden_act": ")" + name + "\"}",
                              "config.json")
        .moe.activation;
  };
  EXPECT_EQ(act("silu"), Activation::kSilu);
  EXPECT_EQ(act("gelu"), Activation::kGelu);
  EXPECT_EQ(act("gelu_pytorch_tanh"), Activation::kGeluTanh);
  EXPECT_TRUE(throws_not_supported([&] { act("tanh"); }));
  EXPECT_EQ(error_of([&] { act("tanh"); }),
            "config.json: hidden_act: unsupported activation \"tanh\" (supported: silu, gelu, "
            "gelu_pytorch_tanh, gelu_new, swigluoai, swiglustep, relu2)");
}

TEST(ModelConfig, LoadFromFile) {
  const std::string path = ::testing::TempDir() + "qmoe_test_config.json";
  {
    std::ofstream out(path);
    out << R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64,
        "intermediate_size": 64, "num_hidden_layers": 1, "num_local_experts": 4,
        "num_experts_per_tok": 2})";
  }
  const ModelConfig c = load_model_config(path);
  EXPECT_EQ(c.path, path);
  EXPECT_EQ(c.moe.num_experts, 4);
  std::remove(path.c_str());
  EXPECT_EQ(error_of([&] { load_model_config(path); }), "cannot open " + path + ": No such file or directory");
}

// Sizes far past any model's fail on their key before anything is sized by them (a corrupt
// num_experts of 10^8 had exhausted memory in load_moe_layer).
TEST(ModelConfig, SizesPastTheLimitsNameTheirKey) {
  auto err = [](const std::string& patch) {
    std::string text = R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64, "intermediate_size": 64,
        "num_hidden_layers": 1, "num_local_experts": 4, "num_experts_per_tok": 2})";
    nlohmann::json j = nlohmann::json::parse(text);
    j.merge_patch(nlohmann::json::parse(patch));
    return error_of([&] { parse_model_config(j.dump(), "config.json"); });
  };
  EXPECT_EQ(err(R"({"num_local_experts": 100000000})"),
            "config.json: num_local_experts: is 100000000, above the 65536 qmoe takes");
  EXPECT_EQ(err(R"({"num_hidden_layers": 10000000})"),
            "config.json: num_hidden_layers: is 10000000, above the 16384 qmoe takes");
  EXPECT_EQ(err(R"({"hidden_size": 2000000})"), "config.json: hidden_size: is 2000000, above the 1048576 qmoe takes");
  EXPECT_EQ(err(R"({"intermediate_size": 2000000})"),
            "config.json: intermediate_size: is 2000000, above the 1048576 qmoe takes");
  EXPECT_EQ(err(R"({"num_local_experts": 65536, "num_hidden_layers": 16384, "hidden_size": 1048576})"), "<no error>");
}

TEST(ModelConfig, Helpers) {
  EXPECT_EQ(layer_name("model.layers.{L}.mlp.experts", 17), "model.layers.17.mlp.experts");
  EXPECT_EQ(layer_name("a{L}b{L}", 3), "a3b3");
  EXPECT_EQ(layer_name("no placeholder", 3), "no placeholder");
  EXPECT_EQ(parse_activation("SiLU"), Activation::kSilu);
  EXPECT_EQ(parse_activation("swish"), Activation::kSilu);
  EXPECT_EQ(parse_activation("gelu_new"), Activation::kGeluTanh);
  EXPECT_EQ(parse_activation("swigluoai"), Activation::kSwigluOai);
  EXPECT_EQ(parse_activation("swiglustep"), Activation::kSwigluStep);
  EXPECT_EQ(parse_activation("relu2"), Activation::kRelu2NoMul);
  EXPECT_EQ(parse_activation("silu_no_mul"), Activation::kSiluNoMul);
  EXPECT_EQ(parse_activation("gelu_no_mul"), Activation::kGeluNoMul);
  EXPECT_EQ(parse_activation("tanh"), std::nullopt);
  for (Activation a : {Activation::kSilu, Activation::kGelu, Activation::kGeluTanh,
                       Activation::kSwigluOai, Activation::kSwigluStep, Activation::kSiluNoMul,
                       Activation::kGeluNoMul, Activation::kRelu2NoMul}) {
    EXPECT_EQ(parse_activation(to_string(a)), a) << to_string(a);
  }
  EXPECT_TRUE(is_gated(Activation::kSilu));
  EXPECT_TRUE(is_gated(Activation::kSwigluOai));
  EXPECT_TRUE(is_gated(Activation::kSwigluStep));
  EXPECT_FALSE(is_gated(Activation::kSiluNoMul));
  EXPECT_FALSE(is_gated(Activation::kGeluNoMul));
  EXPECT_FALSE(is_gated(Activation::kRelu2NoMul));
}

}  // namespace
}  // namespace qmoe
