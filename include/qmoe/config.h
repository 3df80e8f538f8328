// Plain descriptions of a checkpoint's config.json: the MoE hyper-parameters of the model and its
// compressed-tensors `quantization_config`. Parsing validates types and names the key path of
// any error ("config.json: quantization_config.config_groups.group_0.weights.num_bits: ...").
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace qmoe {

// ---- quantization_config ----------------------------------------------------------------------

enum class QuantType { kInt, kFloat };
enum class Strategy { kTensor, kChannel, kGroup, kBlock, kToken, kTensorGroup, kAttnHead };
enum class DynamicMode { kStatic, kDynamic, kLocal };  // false / true / "local"
enum class ActOrder { kNone, kGroup, kWeight };        // aliases: dynamic->group, static->weight

// One `QuantizationArgs` object, normalised (strategy inferred, aliases resolved).
struct QuantArgs {
  int num_bits = 8;
  QuantType type = QuantType::kInt;
  bool symmetric = true;
  std::optional<int> group_size;                   // -1 = per channel
  Strategy strategy = Strategy::kTensor;
  std::optional<std::array<int, 2>> block_structure;  // [rows, cols]
  DynamicMode dynamic = DynamicMode::kStatic;
  ActOrder actorder = ActOrder::kNone;
  std::optional<std::string> scale_dtype;  // "float8_e4m3fn", "uint8", ... (torch. prefix dropped)
  std::optional<std::string> zp_dtype;

  bool is_dynamic() const { return dynamic != DynamicMode::kStatic; }
  friend bool operator==(const QuantArgs&, const QuantArgs&) = default;
};

// One entry of `config_groups`.
struct QuantScheme {
  std::string name;  // the config_groups key
  std::vector<std::string> targets;
  std::optional<QuantArgs> weights;
  std::optional<QuantArgs> input_activations;
  std::optional<QuantArgs> output_activations;
  std::optional<std::string> format;  // per-group format; falls back to QuantConfig::format
};

struct QuantConfig {
  std::string source_key;   // "quantization_config", "text_config.quantization_config", ...
  std::string quant_method;  // "compressed-tensors"
  std::string version;       // the writer's compressed-tensors version, "" if absent
  std::string format;        // top-level format ("pack-quantized", "mixed-precision", ...)
  std::string quantization_status;
  std::vector<QuantScheme> groups;   // in config order (JSON key order on disk = sorted)
  std::vector<std::string> ignore;
  std::vector<std::string> dropped_attention_groups;  // groups vLLM drops (targets end in Attention)
};

std::string to_string(QuantType t);
std::string to_string(Strategy s);
std::string to_string(DynamicMode d);
std::string to_string(ActOrder a);
// vLLM-like rendering of the args for messages: "num_bits=4 type=int symmetric=true ...".
std::string to_string(const QuantArgs& args);

// True for the formats whose activation args vLLM parses (naive-, int-, float-, nvfp4-pack-,
// mxfp4-pack-quantized).
bool is_activation_quant_format(const std::string& format);

// ---- model hyper-parameters -------------------------------------------------------------------

enum class Scoring { kSoftmax, kSigmoid };

enum class Activation {
  kSilu,        // silu(gate) * up
  kGelu,        // gelu(gate) * up, exact erf form
  kGeluTanh,    // gelu tanh approximation
  kSwigluOai,   // gpt-oss: alpha 1.702, limit 7 (gate/up taken as the two halves of w13)
  kSwigluStep,  // clamp(silu(gate), max=limit) * clamp(up, +-limit)
  kSiluNoMul,   // non-gated variants: w13 holds only one projection
  kGeluNoMul,
  kRelu2NoMul,
};
std::string to_string(Activation a);
std::optional<Activation> parse_activation(const std::string& name);
bool is_gated(Activation a);

// How the checkpoint names one MoE layer's expert tensors.
struct ExpertNaming {
  std::string experts_prefix;  // "model.layers.{L}.mlp.experts"; {L} = layer index
  std::string gate_name;       // "gate_proj" | "w1"
  std::string up_name;         // "up_proj"   | "w3"
  std::string down_name;       // "down_proj" | "w2"
  std::string router_prefix;   // "model.layers.{L}.mlp.gate" (holds e_score_correction_bias)
};

struct MoeConfig {
  std::string architecture;  // config.json architectures[0]
  std::string model_type;
  int num_layers = 0;
  std::vector<int> moe_layers;  // indices of layers with routed experts
  int num_experts = 0;          // routed experts (global)
  int top_k = 0;
  int hidden = 0;
  int inter = 0;                // moe intermediate size (full, before tensor parallelism)
  int num_shared_experts = 0;   // not run by the MoE layer (as in vLLM's FusedMoE)
  int shared_inter = 0;
  Scoring scoring = Scoring::kSoftmax;
  bool renormalize = true;
  int num_expert_group = 0;  // 0 = no grouped top-k
  int topk_group = 0;
  bool use_correction_bias = false;  // e_score_correction_bias present (DeepSeek-V3 noaux_tc)
  float routed_scaling_factor = 1.0f;
  bool router_weight_on_input = false;  // Llama-4
  bool custom_llama4_routing = false;   // top-1 over logits, then sigmoid of the chosen logit
  Activation activation = Activation::kSilu;
  float swiglu_limit = 7.0f;
  bool has_bias = false;  // experts carry gate/up/down biases (gpt-oss)
  ExpertNaming naming;
};

// Expands "{L}" in a naming template.
std::string layer_name(const std::string& pattern, int layer);

struct ModelConfig {
  std::string path;  // the config.json read, for messages
  MoeConfig moe;
  std::optional<QuantConfig> quant;  // absent: the checkpoint is not quantized
};

// The largest values config.json may give (far above any real model's: DeepSeek-V3 256 experts,
// 61 layers, widths up to 18432); past them parse_model_config fails naming the key.
inline constexpr int kMaxConfigExperts = 1 << 16;  // routed experts
inline constexpr int kMaxConfigLayers = 1 << 14;   // num_hidden_layers
inline constexpr int kMaxConfigWidth = 1 << 20;    // hidden and intermediate sizes

// Parses config.json text. `path` is used in messages only.
ModelConfig parse_model_config(const std::string& json_text, const std::string& path);
ModelConfig load_model_config(const std::string& config_json_path);

// Parses one `quantization_config` object given as JSON text (the fuzz target uses this).
// Messages read "<what>: config_groups.g.weights.num_bits: ..." (key paths relative to the
// object); source_key is left empty.
QuantConfig parse_quant_config(const std::string& json_text, const std::string& what);

}  // namespace qmoe
