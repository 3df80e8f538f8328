// Which quantized MoE method runs a layer: vLLM's compressed-tensors MoE dispatcher, re-implemented
// decision for decision (target matching, ignore list, expert-0 scheme lookup, predicates and
// their order, the method constructors' checks) so users can compare with vLLM.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "qmoe/config.h"

namespace qmoe {

// The GPU whose capability the decision assumes (vLLM's exact-capability predicates use it).
enum class Target { kSm90, kSm100, kCpu };
std::string to_string(Target t);
std::optional<Target> parse_target(const std::string& name);
int capability_of(Target t);  // 90, 100, or 0 (no GPU)

enum class MoeMethod {
  kUnquantized,  // UnquantizedFusedMoEMethod
  kWna16Marlin,  // CompressedTensorsWNA16MarlinMoEMethod
  kWna16Triton,  // CompressedTensorsWNA16MoEMethod
  kMxfp4,        // CompressedTensorsW4A4Mxfp4MoEMethod (weight-only, activations not quantized)
  kNvfp4,        // CompressedTensorsW4A4Nvfp4MoEMethod (W4A4, or W4A16 when use_a16)
  kFp8,          // CompressedTensorsW8A8Fp8MoEMethod
  kInt8,         // CompressedTensorsW8A8Int8MoEMethod
  kW4A8Fp8,      // CompressedTensorsW4A8Fp8MoEMethod
  kW4A8Int8,     // CompressedTensorsW4A8Int8MoEMethod
};
std::string to_string(MoeMethod m);  // short name: "wna16_marlin", "fp8", ...
std::string vllm_class_name(MoeMethod m);

// What the layer looks like, as far as dispatch needs it.
struct MoeDispatchInput {
  std::string experts_prefix;   // vLLM module path, e.g. "model.layers.3.mlp.experts"
  std::string ckpt_gate_name;   // checkpoint projection names ("gate_proj" or "w1", ...)
  std::string ckpt_up_name;
  std::string ckpt_down_name;
  int hidden = 0;
  int inter = 0;               // per tensor-parallel partition
  bool router_weight_on_input = false;
  Activation activation = Activation::kSilu;
  int tp_size = 1;  // FP8 block weights: vLLM checks I % block_k only when tp > 1
};

// The scheme that applies to the layer's expert-0 projections.
struct LayerScheme {
  bool ignored = false;  // matched by `ignore` -> unquantized
  std::string group_name;
  std::string matched_target;
  std::optional<QuantArgs> weights;
  std::optional<QuantArgs> input;
  std::string format;  // effective format (group's, else top level)
};

// Resolves the scheme from the config (throws qmoe::Error with vLLM's messages on a mismatch).
LayerScheme resolve_moe_scheme(const QuantConfig& config, const MoeDispatchInput& layer);

struct DispatchDecision {
  MoeMethod method = MoeMethod::kUnquantized;
  std::string vllm_class;
  LayerScheme scheme;
  bool nvfp4_use_a16 = false;   // NVFP4 weight-only (input_activations absent)
  bool marlin_compatible = false;
  // vLLM would fail later for this target (e.g. W4A8-int is CPU-only in vLLM); qmoe still runs
  // the method. Empty when vLLM accepts the layer.
  std::string vllm_rejection;
  std::vector<std::string> notes;  // warnings vLLM would log, qmoe-specific remarks
};

// The full decision. Throws qmoe::Error carrying vLLM's message when vLLM rejects the scheme at
// dispatch or method construction (e.g. "Unsupported FusedMoe scheme: ...").
DispatchDecision dispatch_moe(const QuantConfig* config, const MoeDispatchInput& layer,
                              Target target);

// vLLM's check_moe_marlin_supports_layer: H % 128 == 0, I % max(64, g) == 0,
// g in {-1, 32, 64, 128}, no router weight on input.
bool marlin_supports_layer(int hidden, int inter, int group_size, bool router_weight_on_input);

// Does a target string match a name (exact, or "re:" with Python re.match semantics)?
bool target_matches_name(const std::string& target, const std::string& name);

}  // namespace qmoe
