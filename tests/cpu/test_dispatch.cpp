// vLLM's compressed-tensors MoE dispatch: target matching, ignore handling, scheme resolution,
// every dispatcher branch and every reachable rejection message.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "qmoe/config.h"
#include "qmoe/dispatch.h"
#include "qmoe/error.h"

namespace qmoe {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const NotSupported& e) {
    return std::string("NotSupported: ") + e.what();  // dispatch never uses NotSupported
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// quantization_config text with the given config_groups body.
QuantConfig config(const std::string& groups, const std::string& format = "pack-quantized",
                   const std::string& ignore = "[]") {
  return parse_quant_config(R"({"quant_method": "compressed-tensors", "format": ")" + format +
                                R"(", "ignore": )" + ignore + R"(, "config_groups": {)" + groups +
                                "}}",
                            "q.json");
}

// One group targeting Linear with the given weights / input args (JSON object bodies or "null").
QuantConfig linear_group(const std::string& weights, const std::string& input = "null",
                         const std::string& format = "pack-quantized") {
  return config(R"("group_0": {"targets": ["Linear"], "weights": )" + weights +
                    R"(, "input_activations": )" + input + "}",
                format);
}

MoeDispatchInput layer(int hidden = 2048, int inter = 768,
                       const std::string& prefix = "model.layers.0.mlp.experts") {
  MoeDispatchInput l;
  l.experts_prefix = prefix;
  l.ckpt_gate_name = "gate_proj";
  l.ckpt_up_name = "up_proj";
  l.ckpt_down_name = "down_proj";
  l.hidden = hidden;
  l.inter = inter;
  return l;
}

MoeDispatchInput mixtral_layer(int l = 0) {
  MoeDispatchInput in = layer(4096, 14336, "model.layers." + std::to_string(l) +
                                               ".block_sparse_moe.experts");
  in.ckpt_gate_name = "w1";
  in.ckpt_up_name = "w3";
  in.ckpt_down_name = "w2";
  return in;
}

bool has_note(const DispatchDecision& d, const std::string& needle) {
  for (const auto& n : d.notes) {
    if (n.find(needle) != std::string::npos) return true;
  }
  return false;
}

const char* const kW4G128 = R"({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128})";
const char* const kW4G128Asym =
    R"({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": false})";
const char* const kW8Channel = R"({"num_bits": 8, "type": "int", "strategy": "channel"})";
const char* const kA8IntToken =
    R"({"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true})";
const char* const kA8FloatToken =
    R"({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true})";
const char* const kNvfp4 =
    R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16})";
const char* const kNvfp4Input = R"({"num_bits": 4, "type": "float", "strategy": "tensor_group",
    "group_size": 16, "dynamic": "local"})";
const char* const kMxfp4 =
    R"({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32})";
const char* const kFp8Tensor = R"({"num_bits": 8, "type": "float", "strategy": "tensor"})";
const char* const kFp8Channel = R"({"num_bits": 8, "type": "float", "strategy": "channel"})";

DispatchDecision dispatch(const QuantConfig& c, const MoeDispatchInput& l = layer(),
                          Target t = Target::kSm90) {
  return dispatch_moe(&c, l, t);
}

std::string dispatch_error(const QuantConfig& c, const MoeDispatchInput& l = layer(),
                           Target t = Target::kSm90) {
  return error_of([&] { dispatch_moe(&c, l, t); });
}

// ---- small functions ----

TEST(Dispatch, NamesAndTargets) {
  EXPECT_EQ(vllm_class_name(MoeMethod::kUnquantized), "UnquantizedFusedMoEMethod");
  EXPECT_EQ(vllm_class_name(MoeMethod::kWna16Marlin), "CompressedTensorsWNA16MarlinMoEMethod");
  EXPECT_EQ(vllm_class_name(MoeMethod::kWna16Triton), "CompressedTensorsWNA16MoEMethod");
  EXPECT_EQ(vllm_class_name(MoeMethod::kMxfp4), "CompressedTensorsW4A4Mxfp4MoEMethod");
  EXPECT_EQ(vllm_class_name(MoeMethod::kNvfp4), "CompressedTensorsW4A4Nvfp4MoEMethod");
  EXPECT_EQ(vllm_class_name(MoeMethod::kFp8), "CompressedTensorsW8A8Fp8MoEMethod");
  EXPECT_EQ(vllm_class_name(MoeMethod::kInt8), "CompressedTensorsW8A8Int8MoEMethod");
  EXPECT_EQ(vllm_class_name(MoeMethod::kW4A8Fp8), "CompressedTensorsW4A8Fp8MoEMethod");
  EXPECT_EQ(vllm_class_name(MoeMethod::kW4A8Int8), "CompressedTensorsW4A8Int8MoEMethod");
  EXPECT_EQ(to_string(MoeMethod::kWna16Marlin), "wna16_marlin");
  EXPECT_EQ(to_string(MoeMethod::kW4A8Int8), "w4a8_int8");
  EXPECT_EQ(to_string(Target::kSm100), "sm100");
  EXPECT_EQ(parse_target("SM90"), Target::kSm90);
  EXPECT_EQ(parse_target("sm_100"), Target::kSm100);
  EXPECT_EQ(parse_target("cpu"), Target::kCpu);
  EXPECT_EQ(parse_target("sm80"), std::nullopt);
  EXPECT_EQ(capability_of(Target::kSm90), 90);
  EXPECT_EQ(capability_of(Target::kSm100), 100);
  EXPECT_EQ(capability_of(Target::kCpu), 0);
}

TEST(Dispatch, MarlinSupportsLayer) {
  EXPECT_TRUE(marlin_supports_layer(2048, 768, 128, false));
  EXPECT_TRUE(marlin_supports_layer(2048, 64, -1, false));
  EXPECT_TRUE(marlin_supports_layer(2048, 64, 32, false));
  EXPECT_FALSE(marlin_supports_layer(2048, 768, 128, true));  // router weight on input
  EXPECT_FALSE(marlin_supports_layer(2000, 768, 128, false));  // H % 128
  EXPECT_FALSE(marlin_supports_layer(2048, 704, 128, false));  // I % max(64, g)
  EXPECT_FALSE(marlin_supports_layer(2048, 96, 32, false));    // I % 64
  EXPECT_FALSE(marlin_supports_layer(2048, 768, 256, false));  // g not in {-1, 32, 64, 128}
  EXPECT_FALSE(marlin_supports_layer(2048, 768, 16, false));
}

// ---- target matching ----

TEST(TargetMatching, ExactAndRegexAnchoredAtStartOnly) {
  EXPECT_TRUE(target_matches_name("lm_head", "lm_head"));
  EXPECT_FALSE(target_matches_name("lm_head", "model.lm_head"));
  EXPECT_FALSE(target_matches_name("Lm_head", "lm_head"));
  EXPECT_TRUE(target_matches_name("re:model.layers.1", "model.layers.10.mlp"));
  EXPECT_TRUE(target_matches_name("re:.*lm_head", "model.lm_head_x"));
  EXPECT_FALSE(target_matches_name("re:layers.1", "model.layers.1.mlp"));  // re.match, not search
  EXPECT_TRUE(target_matches_name("re:.*mlp.gate$", "model.layers.0.mlp.gate"));
  EXPECT_FALSE(target_matches_name("re:.*mlp.gate$", "model.layers.0.mlp.gate_proj"));
  EXPECT_TRUE(target_matches_name("re:.*mlp.gate", "model.layers.0.mlp.gate_proj"));
  EXPECT_EQ(error_of([] { target_matches_name("re:model.(layers", "model.layers.0"); })
                .rfind("invalid regular expression \"re:model.(layers\": ", 0),
            0u);
}

TEST(TargetMatching, PathologicalPatternsStayFast) {
  // Found by fuzzing: a backtracking matcher is exponential on these.
  const std::string name = "model.layers.1.block_sparse_moe.experts.0.gate_proj_xxxxxxxxxxxxxxxx";
  EXPECT_TRUE(target_matches_name("re:.*******************************************experts.*", name));
  EXPECT_FALSE(target_matches_name("re:(.*)*(.*)*(.*)*(.*)*(.*)*(.*)*z", name));
  EXPECT_FALSE(target_matches_name("re:(x+x+)+y", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"));
}

TEST(TargetMatching, OversizedPatternsAreRejected) {
  const std::string deep = std::string(300, '(') + "a" + std::string(300, ')');
  EXPECT_EQ(error_of([&] { target_matches_name("re:" + deep, "a"); }),
            "regular expression \"re:" + std::string(80, '(') +
                "...\" nests groups deeper than 256");
  // Escaped and bracketed parentheses are literals, not groups.
  std::string escaped;
  for (int i = 0; i < 300; ++i) escaped += "\\(";
  EXPECT_TRUE(target_matches_name("re:" + escaped, std::string(300, '(')));
  const std::string literal_parens = "[" + std::string(300, '(') + "]";
  EXPECT_TRUE(target_matches_name("re:" + literal_parens, "("));
  const std::string long_pattern(5000, 'a');
  EXPECT_EQ(error_of([&] { target_matches_name("re:" + long_pattern, "a"); }),
            "regular expression \"re:" + std::string(80, 'a') +
                "...\" is too long (5000 characters, at most 4096)");
  EXPECT_TRUE(target_matches_name("re:" + std::string(4096, 'a'), std::string(4096, 'a')));
}

TEST(TargetMatching, RegexPrefixPicksTheLayer) {
  // re:model.layers.1 also covers layers 10..19 (prefix match).
  const QuantConfig c = config(
      R"("group_0": {"targets": ["re:model.layers.1"], "weights": )" + std::string(kW4G128) +
      R"(}, "group_1": {"targets": ["Linear"], "weights": {"num_bits": 8, "strategy": "group",
      "group_size": 128}})");
  EXPECT_EQ(resolve_moe_scheme(c, layer(2048, 768, "model.layers.10.mlp.experts")).group_name,
            "group_0");
  EXPECT_EQ(resolve_moe_scheme(c, layer(2048, 768, "model.layers.2.mlp.experts")).group_name,
            "group_1");
}

TEST(TargetMatching, ConfigOrderWinsOverExactness) {
  // vLLM does not rank exact names above regexes: the first map entry that matches wins.
  const QuantConfig c = config(
      R"("group_0": {"targets": ["re:.*experts.*"], "weights": )" + std::string(kW4G128) +
      R"(}, "group_1": {"targets": ["model.layers.0.mlp.experts.0.gate_proj",
      "model.layers.0.mlp.experts.0.up_proj", "model.layers.0.mlp.experts.0.down_proj"],
      "weights": {"num_bits": 8, "strategy": "group", "group_size": 128}})");
  const LayerScheme s = resolve_moe_scheme(c, layer());
  EXPECT_EQ(s.group_name, "group_0");
  EXPECT_EQ(s.matched_target, "re:.*experts.*");
}

TEST(TargetMatching, LaterDuplicateOverwritesButKeepsFirstPosition) {
  const std::string w8 = R"({"num_bits": 8, "strategy": "group", "group_size": 128})";
  const QuantConfig c = config(
      R"("a": {"targets": ["re:.*experts.*"], "weights": )" + std::string(kW4G128) +
      R"(}, "b": {"targets": ["re:model.*"], "weights": )" + w8 +
      R"(}, "c": {"targets": ["re:.*experts.*"], "weights": {"num_bits": 4, "strategy": "channel"}})");
  const LayerScheme s = resolve_moe_scheme(c, layer());
  EXPECT_EQ(s.group_name, "c");
  EXPECT_EQ(s.weights->strategy, Strategy::kChannel);
}

TEST(TargetMatching, ClassNameSubstringAndLinearAlias) {
  // "Linear" is not a substring of "FusedMoE": it reaches the experts through the alias.
  LayerScheme s = resolve_moe_scheme(linear_group(kW4G128), layer());
  EXPECT_EQ(s.group_name, "group_0");
  EXPECT_EQ(s.matched_target, "FusedMoE");
  // A case-insensitive substring of the class name matches by itself.
  s = resolve_moe_scheme(config(R"("g": {"targets": ["moe"], "weights": )" + std::string(kW4G128) + "}"),
                         layer());
  EXPECT_EQ(s.matched_target, "moe");
  // Regex targets are matched against the class name too.
  s = resolve_moe_scheme(
      config(R"("g": {"targets": ["re:Fused"], "weights": )" + std::string(kW4G128) + "}"), layer());
  EXPECT_EQ(s.matched_target, "re:Fused");
  // An explicit FusedMoE target suppresses the alias even when Linear comes first.
  const QuantConfig both = config(
      R"("lin": {"targets": ["Linear"], "weights": )" + std::string(kW4G128) +
      R"(}, "moe": {"targets": ["FusedMoE"], "weights": {"num_bits": 8, "strategy": "channel"}})");
  s = resolve_moe_scheme(both, layer());
  EXPECT_EQ(s.group_name, "moe");
  // A name match beats a class match wherever it sits in the map.
  const QuantConfig name_last = config(
      R"("lin": {"targets": ["Linear"], "weights": )" + std::string(kW4G128) +
      R"(}, "named": {"targets": ["re:.*experts"], "weights": {"num_bits": 8, "strategy": "channel"}})");
  EXPECT_EQ(resolve_moe_scheme(name_last, layer()).group_name, "named");
}

TEST(TargetMatching, NoMatchUsesVllmWording) {
  const QuantConfig c = config(R"("g": {"targets": ["re:.*self_attn.*"], "weights": )" +
                               std::string(kW4G128) + "}");
  EXPECT_EQ(dispatch_error(c),
            "Unable to find matching target for model.layers.0.mlp.experts.0.gate_proj in the "
            "compressed-tensors config.");
  EXPECT_EQ(dispatch_error(config(R"("g": {"targets": ["re:("], "weights": )" +
                                  std::string(kW4G128) + "}"))
                .rfind("invalid regular expression \"re:(\"", 0),
            0u);
}

TEST(TargetMatching, CheckpointNamesAndBlockSparseAlias) {
  // Mixtral: targets written against the checkpoint's w1/w3/w2 names.
  const QuantConfig c = config(R"("g": {"targets": ["re:.*\\.w[123]$"], "weights": )" +
                               std::string(kW4G128) + "}");
  DispatchDecision d = dispatch(c, mixtral_layer());
  EXPECT_EQ(d.method, MoeMethod::kWna16Marlin);
  EXPECT_EQ(d.scheme.matched_target, "re:.*\\.w[123]$");
  // Targets written against transformers-v5 names (mlp.experts) still reach block_sparse_moe.
  const QuantConfig v5 = config(R"("g": {"targets": ["re:model.layers.0.mlp.experts.*"],
      "weights": )" + std::string(kW4G128) + "}");
  EXPECT_EQ(resolve_moe_scheme(v5, mixtral_layer()).matched_target, "re:model.layers.0.mlp.experts.*");
  const QuantConfig old = config(R"("g": {"targets": ["re:.*block_sparse_moe.experts.*"],
      "weights": )" + std::string(kW4G128) + "}");
  EXPECT_EQ(resolve_moe_scheme(old, layer(2048, 768, "model.layers.0.mlp.experts")).matched_target,
            "re:.*block_sparse_moe.experts.*");
}

// ---- ignore ----

TEST(Ignore, ExactRegexAndCheckpointNames) {
  const std::string g = R"("group_0": {"targets": ["Linear"], "weights": )" + std::string(kW4G128) + "}";
  DispatchDecision d = dispatch(config(g, "pack-quantized", R"(["re:model.layers.0.mlp.experts.*"])"));
  EXPECT_EQ(d.method, MoeMethod::kUnquantized);
  EXPECT_EQ(d.vllm_class, "UnquantizedFusedMoEMethod");
  EXPECT_TRUE(d.scheme.ignored);

  d = dispatch(config(g, "pack-quantized",
                      R"(["model.layers.0.mlp.experts.0.gate_proj", "model.layers.0.mlp.experts.0.up_proj",
                          "model.layers.0.mlp.experts.0.down_proj"])"));
  EXPECT_EQ(d.method, MoeMethod::kUnquantized);

  // Other layers stay quantized.
  d = dispatch(config(g, "pack-quantized", R"(["re:model.layers.0.mlp.experts.*"])"),
               layer(2048, 768, "model.layers.1.mlp.experts"));
  EXPECT_EQ(d.method, MoeMethod::kWna16Marlin);

  // Mixtral checkpoint names w1/w3/w2.
  d = dispatch(config(g, "pack-quantized",
                      R"(["model.layers.0.block_sparse_moe.experts.0.w1",
                          "model.layers.0.block_sparse_moe.experts.0.w3",
                          "model.layers.0.block_sparse_moe.experts.0.w2"])"),
               mixtral_layer());
  EXPECT_EQ(d.method, MoeMethod::kUnquantized);

  // The block_sparse_moe <-> mlp alias applies to ignore too.
  d = dispatch(config(g, "pack-quantized", R"(["re:model.layers.0.mlp.experts.*"])"), mixtral_layer());
  EXPECT_EQ(d.method, MoeMethod::kUnquantized);
  d = dispatch(config(g, "pack-quantized", R"(["re:.*block_sparse_moe.*"])"), layer());
  EXPECT_EQ(d.method, MoeMethod::kUnquantized);
}

TEST(Ignore, PartialIgnoreIsAMismatch) {
  const std::string g = R"("group_0": {"targets": ["Linear"], "weights": )" + std::string(kW4G128) + "}";
  EXPECT_EQ(dispatch_error(config(g, "pack-quantized",
                                  R"(["model.layers.0.block_sparse_moe.experts.0.w1"])"),
                           mixtral_layer()),
            "All MoE projections need to have same quantization scheme but found multiple");
}

TEST(Ignore, NoConfigMeansUnquantized) {
  const DispatchDecision d = dispatch_moe(nullptr, layer(), Target::kSm90);
  EXPECT_EQ(d.method, MoeMethod::kUnquantized);
  EXPECT_EQ(d.vllm_class, "UnquantizedFusedMoEMethod");
}

// ---- scheme resolution ----

TEST(Resolve, MismatchedProjections) {
  const QuantConfig c = config(
      R"("gu": {"targets": ["re:.*(gate|up)_proj"], "weights": )" + std::string(kW4G128) +
      R"(}, "d": {"targets": ["re:.*down_proj"], "weights": {"num_bits": 8, "strategy": "group",
      "group_size": 128}})");
  EXPECT_EQ(dispatch_error(c),
            "All MoE projections need to have same quantization scheme but found multiple");
  // Equal args in different groups are one scheme (vLLM compares the dicts); down's group is kept.
  const QuantConfig same = config(
      R"("gu": {"targets": ["re:.*(gate|up)_proj"], "weights": )" + std::string(kW4G128) +
      R"(}, "d": {"targets": ["re:.*down_proj"], "weights": )" + std::string(kW4G128) + "}");
  EXPECT_EQ(resolve_moe_scheme(same, layer()).group_name, "d");
  // A different per-group format makes them differ.
  const QuantConfig fmt = config(
      R"("gu": {"targets": ["re:.*(gate|up)_proj"], "weights": )" + std::string(kW4G128) +
      R"(}, "d": {"targets": ["re:.*down_proj"], "format": "marlin-24", "weights": )" +
      std::string(kW4G128) + "}");
  EXPECT_EQ(dispatch_error(fmt),
            "All MoE projections need to have same quantization scheme but found multiple");
}

TEST(Resolve, FormatAndInputActivations) {
  // Group format overrides the top level.
  QuantConfig c = config(R"("g": {"targets": ["Linear"], "format": "pack-quantized", "weights": )" +
                             std::string(kW4G128) + "}",
                         "mixed-precision");
  LayerScheme s = resolve_moe_scheme(c, layer());
  EXPECT_EQ(s.format, "pack-quantized");
  // Input args of a weight-only format are kept when the group has them (W4A8 as pack-quantized).
  s = resolve_moe_scheme(linear_group(kW4G128, kA8IntToken), layer());
  ASSERT_TRUE(s.input.has_value());
  EXPECT_EQ(s.input->strategy, Strategy::kToken);
  EXPECT_EQ(s.format, "pack-quantized");
}

TEST(Resolve, GroupsVllmCannotParse) {
  EXPECT_EQ(dispatch_error(config(R"("W4A16": ["Linear"], "UNQUANTIZED": ["re:.*lm_head"])")),
            "config group \"UNQUANTIZED\" has no weights; vLLM cannot parse a compressed-tensors "
            "config group without weight args");
  EXPECT_EQ(dispatch_error(linear_group(kW4G128, "null", "int-quantized")),
            "config group \"group_0\" uses activation-quantization format int-quantized without "
            "input_activations, which vLLM accepts only for float weights (it fails an "
            "assertion), got weights.type=int");
}

// ---- dispatcher branches ----

TEST(Branches, Mxfp4) {
  DispatchDecision d = dispatch(linear_group(kMxfp4, "null", "mxfp4-pack-quantized"));
  EXPECT_EQ(d.method, MoeMethod::kMxfp4);
  EXPECT_EQ(d.vllm_class, "CompressedTensorsW4A4Mxfp4MoEMethod");
  // W4A4 MXFP4: activation args are ignored.
  d = dispatch(config(R"("MXFP4": ["Linear"])", "mxfp4-pack-quantized"), layer(), Target::kSm100);
  EXPECT_EQ(d.method, MoeMethod::kMxfp4);
  EXPECT_TRUE(has_note(d, "activation args ignored"));
}

TEST(Branches, Wna16MarlinAndTriton) {
  DispatchDecision d = dispatch(linear_group(kW4G128));
  EXPECT_EQ(d.method, MoeMethod::kWna16Marlin);
  EXPECT_EQ(d.vllm_class, "CompressedTensorsWNA16MarlinMoEMethod");
  EXPECT_TRUE(d.marlin_compatible);
  EXPECT_TRUE(d.vllm_rejection.empty());

  // I = 704 is not a multiple of 128: Triton.
  d = dispatch(linear_group(kW4G128), layer(2048, 704));
  EXPECT_EQ(d.method, MoeMethod::kWna16Triton);
  EXPECT_EQ(d.vllm_class, "CompressedTensorsWNA16MoEMethod");
  EXPECT_FALSE(d.marlin_compatible);

  // Router weight on input (Llama-4) rules Marlin out too.
  MoeDispatchInput l4 = layer(5120, 8192, "language_model.model.layers.1.feed_forward.experts");
  l4.router_weight_on_input = true;
  EXPECT_EQ(dispatch(linear_group(kW4G128), l4).method, MoeMethod::kWna16Triton);

  // Channel-wise int8 (W8A16 channel) runs on Marlin; group 64 and 32 too.
  EXPECT_EQ(dispatch(linear_group(kW8Channel)).method, MoeMethod::kWna16Marlin);
  EXPECT_EQ(dispatch(config(R"("W8A16": ["Linear"])")).method, MoeMethod::kWna16Marlin);
  EXPECT_EQ(dispatch(linear_group(R"({"num_bits": 4, "group_size": 32})")).method,
            MoeMethod::kWna16Marlin);
  // g = 256 is not a Marlin group size.
  EXPECT_EQ(dispatch(linear_group(R"({"num_bits": 4, "group_size": 256})"), layer(2048, 1024)).method,
            MoeMethod::kWna16Triton);
  // CPU keeps the reference decision (Marlin), with a note.
  d = dispatch(linear_group(kW4G128), layer(), Target::kCpu);
  EXPECT_EQ(d.method, MoeMethod::kWna16Marlin);
  EXPECT_TRUE(has_note(d, "CPU"));
}

TEST(Branches, Wna16AsymmetricAndActorder) {
  // Newer vLLM: asymmetric Marlin is accepted (zero points).
  DispatchDecision d = dispatch(linear_group(kW4G128Asym));
  EXPECT_EQ(d.method, MoeMethod::kWna16Marlin);
  EXPECT_TRUE(has_note(d, "asymmetric"));
  EXPECT_EQ(dispatch(config(R"("W4A16_ASYM": ["Linear"])")).method, MoeMethod::kWna16Marlin);
  // Triton still rejects it.
  EXPECT_EQ(dispatch_error(linear_group(kW4G128Asym), layer(2048, 704)),
            "Only symmetric quantization is supported for MoE");

  const std::string actorder_group =
      R"({"num_bits": 4, "group_size": 128, "actorder": "dynamic"})";
  EXPECT_EQ(dispatch(linear_group(actorder_group)).method, MoeMethod::kWna16Marlin);
  EXPECT_EQ(dispatch_error(linear_group(actorder_group), layer(2048, 704)),
            "WNA16MoE is not supported with actorder=group/dynamic.");
  // actorder weight is fine on Triton.
  EXPECT_EQ(dispatch(linear_group(R"({"num_bits": 4, "group_size": 128, "actorder": "weight"})"),
                     layer(2048, 704))
                .method,
            MoeMethod::kWna16Triton);
  // Channel-wise weights cannot run on the Triton method (bare assertion in vLLM).
  EXPECT_EQ(dispatch_error(linear_group(kW8Channel), layer(2000, 768)),
            "CompressedTensorsWNA16MoEMethod supports strategy group only, got channel (vLLM "
            "fails an assertion)");
}

TEST(Branches, Wna16FormatAndBitsMessagePrintsTheActualValues) {
  EXPECT_EQ(dispatch_error(linear_group(R"({"num_bits": 3, "group_size": 128})")),
            "For Fused MoE layers, only format: pack-quantized and bits: [4, 8] is supported but "
            "got format: pack-quantized and bits: 3");
  EXPECT_EQ(dispatch_error(linear_group(kW4G128, "null", "marlin-24")),
            "For Fused MoE layers, only format: pack-quantized and bits: [4, 8] is supported but "
            "got format: marlin-24 and bits: 4");
  // FP8 weight-only (W8A16 float) hits the same message: the predicate does not check the type.
  EXPECT_EQ(dispatch_error(linear_group(kFp8Channel, "null", "float-quantized")),
            "For Fused MoE layers, only format: pack-quantized and bits: [4, 8] is supported but "
            "got format: float-quantized and bits: 8");
  // No format anywhere prints Python's None.
  const QuantConfig no_format = parse_quant_config(
      R"({"quant_method": "compressed-tensors", "config_groups": {"W4A16": ["Linear"]}})", "q.json");
  EXPECT_EQ(dispatch_error(no_format),
            "For Fused MoE layers, only format: pack-quantized and bits: [4, 8] is supported but "
            "got format: None and bits: 4");
}

TEST(Branches, Nvfp4) {
  // W4A4 on sm100.
  DispatchDecision d = dispatch(linear_group(kNvfp4, kNvfp4Input, "nvfp4-pack-quantized"), layer(),
                                Target::kSm100);
  EXPECT_EQ(d.method, MoeMethod::kNvfp4);
  EXPECT_EQ(d.vllm_class, "CompressedTensorsW4A4Nvfp4MoEMethod");
  EXPECT_FALSE(d.nvfp4_use_a16);
  EXPECT_TRUE(d.vllm_rejection.empty());
  // W4A4 on sm90: weight-only Marlin in vLLM.
  d = dispatch(config(R"("NVFP4": ["Linear"])", "nvfp4-pack-quantized"), layer(), Target::kSm90);
  EXPECT_EQ(d.method, MoeMethod::kNvfp4);
  EXPECT_FALSE(d.nvfp4_use_a16);
  EXPECT_TRUE(has_note(d, "on sm90 vLLM runs NVFP4 W4A4 as weight-only Marlin (activations not "
                          "quantized)"));
  // NVFP4A16.
  d = dispatch(config(R"("NVFP4A16": ["Linear"])", "nvfp4-pack-quantized"), layer(), Target::kSm100);
  EXPECT_EQ(d.method, MoeMethod::kNvfp4);
  EXPECT_TRUE(d.nvfp4_use_a16);
  EXPECT_TRUE(has_note(d, "use_a16"));
  // Non-SiLU activations: vLLM's apply asserts.
  MoeDispatchInput gelu = layer();
  gelu.activation = Activation::kGelu;
  d = dispatch(linear_group(kNvfp4, kNvfp4Input, "nvfp4-pack-quantized"), gelu, Target::kSm100);
  EXPECT_EQ(d.vllm_rejection, "Only SiLU activation is supported, not gelu.");
  // Other activation args are rejected.
  EXPECT_EQ(dispatch_error(linear_group(kNvfp4, kA8FloatToken, "nvfp4-pack-quantized")),
            "For NVFP4 weights, input quantization must also be NVFP4 format or None for "
            "NVFP4A16, found num_bits=8 type=float symmetric=true group_size=None strategy=token "
            "block_structure=None dynamic=true actorder=None scale_dtype=None zp_dtype=None");
}

TEST(Branches, Fp8) {
  DispatchDecision d = dispatch(config(R"("FP8": ["Linear"])", "float-quantized"));
  EXPECT_EQ(d.method, MoeMethod::kFp8);
  EXPECT_EQ(d.vllm_class, "CompressedTensorsW8A8Fp8MoEMethod");
  EXPECT_TRUE(has_note(d, "static input scales"));
  EXPECT_EQ(dispatch(config(R"("FP8_DYNAMIC": ["Linear"])", "float-quantized"), layer(),
                     Target::kSm100)
                .method,
            MoeMethod::kFp8);
  EXPECT_EQ(dispatch(config(R"("FP8_BLOCK": ["Linear"])", "float-quantized"), layer(2048, 1408))
                .method,
            MoeMethod::kFp8);
  // Per-tensor weights with dynamic per-tensor activations.
  EXPECT_EQ(dispatch(linear_group(kFp8Tensor,
                                  R"({"num_bits": 8, "type": "float", "dynamic": true})",
                                  "float-quantized"))
                .method,
            MoeMethod::kFp8);
  // The FP8 branch is taken on every target (the sm90/sm100 predicates add nothing for MoE).
  EXPECT_EQ(dispatch(config(R"("FP8_DYNAMIC": ["Linear"])", "float-quantized"), layer(),
                     Target::kCpu)
                .method,
            MoeMethod::kFp8);
}

TEST(Branches, Fp8Rejections) {
  EXPECT_EQ(dispatch_error(linear_group(kFp8Tensor, kA8FloatToken, "float-quantized")),
            "FP8 MoE: unsupported weight/activation strategy combination W=tensor A=token (vLLM "
            "fails an assertion)");
  EXPECT_EQ(dispatch_error(linear_group(kFp8Channel,
                                        R"({"num_bits": 8, "type": "float", "strategy": "tensor"})",
                                        "float-quantized")),
            "FP8 MoE: unsupported weight/activation strategy combination W=channel A=tensor "
            "(vLLM fails an assertion)");
  const QuantConfig block = config(R"("FP8_BLOCK": ["Linear"])", "float-quantized");
  EXPECT_EQ(dispatch_error(block, layer(2048, 1400)),
            "The output_size of gate's and up's weight = 1400 is not divisible by weight "
            "quantization block_n = 128.");
  const QuantConfig block_64x128 = linear_group(
      R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [64, 128]})",
      R"({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128, "dynamic": true})",
      "float-quantized");
  MoeDispatchInput l = layer(2048, 192);
  EXPECT_EQ(dispatch(block_64x128, l).method, MoeMethod::kFp8);  // tp == 1: block_k not checked
  l.tp_size = 2;
  EXPECT_EQ(dispatch_error(block_64x128, l),
            "The input_size of down's weight = 192 is not divisible by weight quantization "
            "block_k = 128.");
}

TEST(Branches, Int8) {
  DispatchDecision d = dispatch(config(R"("W8A8": ["Linear"])", "int-quantized"));
  EXPECT_EQ(d.method, MoeMethod::kInt8);
  EXPECT_EQ(d.vllm_class, "CompressedTensorsW8A8Int8MoEMethod");
  d = dispatch(linear_group(kW8Channel,
                            R"({"num_bits": 8, "strategy": "token", "dynamic": true,
                                "symmetric": false})",
                            "int-quantized"));
  EXPECT_EQ(d.method, MoeMethod::kInt8);
  EXPECT_TRUE(has_note(d, "zero point"));
  // Per-tensor int8 weights pass the predicate but not the constructor.
  EXPECT_EQ(dispatch_error(linear_group(R"({"num_bits": 8})", kA8IntToken, "int-quantized")),
            "For INT8 Fused MoE layers, we require channelwise, dynamic per token quantization. "
            "Found num_bits=8 type=int symmetric=true group_size=None strategy=tensor "
            "block_structure=None dynamic=false actorder=None scale_dtype=None zp_dtype=None, "
            "num_bits=8 type=int symmetric=true group_size=None strategy=token "
            "block_structure=None dynamic=true actorder=None scale_dtype=None zp_dtype=None");
}

TEST(Branches, W4A8PerTarget) {
  const QuantConfig w4a8 = config(R"("W4A8": ["Linear"])");
  const MoeDispatchInput l = layer(2048, 768);
  // sm90: int8-activation W4A8 goes to the FP8-activation CUTLASS method (§8 item 5).
  DispatchDecision d = dispatch(w4a8, l, Target::kSm90);
  EXPECT_EQ(d.method, MoeMethod::kW4A8Fp8);
  EXPECT_EQ(d.vllm_class, "CompressedTensorsW4A8Fp8MoEMethod");
  EXPECT_TRUE(has_note(d, "routed to the FP8-activation method on sm90"));
  // sm100: the CPU-only int method, which vLLM rejects there.
  d = dispatch(w4a8, l, Target::kSm100);
  EXPECT_EQ(d.method, MoeMethod::kW4A8Int8);
  EXPECT_EQ(d.vllm_class, "CompressedTensorsW4A8Int8MoEMethod");
  EXPECT_EQ(d.vllm_rejection, "CompressedTensorsW4A8Int8MoEMethod is CPU-only.");
  // cpu: accepted.
  d = dispatch(w4a8, l, Target::kCpu);
  EXPECT_EQ(d.method, MoeMethod::kW4A8Int8);
  EXPECT_TRUE(d.vllm_rejection.empty());

  // W4AFP8: FP8 method on sm90, the int method elsewhere (types are not checked).
  const QuantConfig w4afp8 = config(R"("W4AFP8": ["Linear"])");
  d = dispatch(w4afp8, l, Target::kSm90);
  EXPECT_EQ(d.method, MoeMethod::kW4A8Fp8);
  EXPECT_FALSE(has_note(d, "routed to the FP8-activation method"));
  d = dispatch(w4afp8, l, Target::kCpu);
  EXPECT_EQ(d.method, MoeMethod::kW4A8Int8);
  EXPECT_TRUE(has_note(d, "does not check types"));

  // Channel-wise W4A8 is never the FP8 method.
  d = dispatch(linear_group(R"({"num_bits": 4, "strategy": "channel"})", kA8IntToken), l,
               Target::kSm90);
  EXPECT_EQ(d.method, MoeMethod::kW4A8Int8);
  EXPECT_EQ(d.vllm_rejection, "CompressedTensorsW4A8Int8MoEMethod is CPU-only.");

  // CPU apply accepts SiLU / SwiGLU variants only.
  MoeDispatchInput gelu = l;
  gelu.activation = Activation::kGelu;
  EXPECT_EQ(dispatch(w4a8, gelu, Target::kCpu).vllm_rejection,
            "Only SiLU/SwiGLUGU/SwiGLUUG are supported.");
  MoeDispatchInput oai = l;
  oai.activation = Activation::kSwigluOai;
  EXPECT_TRUE(dispatch(w4a8, oai, Target::kCpu).vllm_rejection.empty());
}

TEST(Branches, W4A8Fp8ConstructorChecks) {
  const QuantConfig g64 = linear_group(R"({"num_bits": 4, "group_size": 64})", kA8FloatToken);
  EXPECT_EQ(dispatch_error(g64, layer(2048, 768), Target::kSm90),
            "Only group size 128 supported for W4A8 MoE");
  // On other targets the same scheme is the int method.
  EXPECT_EQ(dispatch(g64, layer(2048, 768), Target::kCpu).method, MoeMethod::kW4A8Int8);
  const QuantConfig w4afp8 = config(R"("W4AFP8": ["Linear"])");
  EXPECT_EQ(dispatch_error(w4afp8, layer(2176, 768), Target::kSm90),
            "hidden_size=2176 must be divisible by 256");
  EXPECT_EQ(dispatch_error(w4afp8, layer(2048, 640), Target::kSm90),
            "intermediate_size_per_partition=640 must be divisible by 256");
  EXPECT_EQ(dispatch_error(linear_group(R"({"num_bits": 4, "group_size": 128, "actorder": "group"})",
                                        kA8FloatToken),
                           layer(2048, 768), Target::kSm90),
            "W4A8 MoE: actorder=group is not supported (vLLM fails an assertion)");
}

TEST(Branches, UnsupportedSchemes) {
  // Static per-tensor INT8 MoE.
  EXPECT_EQ(dispatch_error(linear_group(R"({"num_bits": 8})", R"({"num_bits": 8})", "int-quantized")),
            "Unsupported FusedMoe scheme: num_bits=8 type=int symmetric=true group_size=None "
            "strategy=tensor block_structure=None dynamic=false actorder=None scale_dtype=None "
            "zp_dtype=None, num_bits=8 type=int symmetric=true group_size=None strategy=tensor "
            "block_structure=None dynamic=false actorder=None scale_dtype=None zp_dtype=None");
  // Weight-only per-tensor FP8 (vLLM dies on an AttributeError; qmoe reports the scheme).
  EXPECT_EQ(dispatch_error(linear_group(kFp8Tensor, "null", "float-quantized")),
            "Unsupported FusedMoe scheme: num_bits=8 type=float symmetric=true group_size=None "
            "strategy=tensor block_structure=None dynamic=false actorder=None scale_dtype=None "
            "zp_dtype=None, None");
  // Asymmetric W4A8 weights match neither W4A8 predicate.
  EXPECT_EQ(dispatch_error(linear_group(kW4G128Asym, kA8IntToken), layer(), Target::kCpu)
                .rfind("Unsupported FusedMoe scheme: num_bits=4 type=int symmetric=false", 0),
            0u);
  // MXFP8 (newer vLLM has a method; the reference falls into WNA16 and rejects the format).
  EXPECT_EQ(dispatch_error(config(R"("MXFP8A16": ["Linear"])", "mxfp8-quantized")),
            "For Fused MoE layers, only format: pack-quantized and bits: [4, 8] is supported but "
            "got format: mxfp8-quantized and bits: 8");
}

TEST(Branches, RealisticQwen3Nvfp4Checkpoint) {
  // Typical llm-compressor output: Linear target, routers in ignore, per-layer expansion.
  const QuantConfig c = parse_quant_config(R"({
      "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
      "ignore": ["lm_head", "model.layers.0.mlp.gate", "model.layers.1.mlp.gate"],
      "config_groups": {"group_0": {"targets": ["Linear"], "format": "nvfp4-pack-quantized",
        "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
          "symmetric": true, "dynamic": false, "scale_dtype": "torch.float8_e4m3fn"},
        "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
          "group_size": 16, "symmetric": true, "dynamic": "local"}}}})",
                                           "q.json");
  for (int l = 0; l < 2; ++l) {
    const DispatchDecision d =
        dispatch(c, layer(2048, 768, "model.layers." + std::to_string(l) + ".mlp.experts"),
                 Target::kSm100);
    EXPECT_EQ(d.method, MoeMethod::kNvfp4);
    EXPECT_EQ(d.scheme.group_name, "group_0");
    EXPECT_EQ(d.scheme.matched_target, "FusedMoE");
    EXPECT_EQ(d.scheme.format, "nvfp4-pack-quantized");
  }
}

}  // namespace
}  // namespace qmoe
