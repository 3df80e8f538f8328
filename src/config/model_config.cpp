// config.json -> MoeConfig for the supported model families, plus the quantization_config cascade.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qmoe/checkpoint.h"
#include "qmoe/config.h"
#include "qmoe/error.h"

namespace qmoe {

// Defined in quant_config.cpp.
namespace detail {
using Json = nlohmann::ordered_json;
std::string json_kind(const Json& v);
[[noreturn]] void json_fail(const std::string& file, const std::string& key,
                            const std::string& msg);
std::string key_path(const std::string& base, const std::string& key);
Json parse_json_text(const std::string& text, const std::string& file);
int json_int(const Json& v, const std::string& file, const std::string& key);
std::string json_string(const Json& v, const std::string& file, const std::string& key);
bool json_bool(const Json& v, const std::string& file, const std::string& key);
QuantConfig parse_quant_object(const Json& j, const std::string& file, const std::string& base);
}  // namespace detail

namespace {

using detail::Json;
using detail::json_fail;
using detail::json_kind;
using detail::key_path;

// Typed access to one JSON object; null values count as absent (HF writes null for "unset").
class Fields {
 public:
  Fields(const Json& j, std::string file, std::string base)
      : j_(j), file_(std::move(file)), base_(std::move(base)) {}

  std::string path(const std::string& key) const { return key_path(base_, key); }
  [[noreturn]] void fail(const std::string& key, const std::string& msg) const {
    json_fail(file_, path(key), msg);
  }
  [[noreturn]] void fail_plain(const std::string& msg) const { throw Error(file_ + ": " + msg); }

  const Json* find(const std::string& key) const {
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const std::string& key) const { return find(key) != nullptr; }

  int req_int(const std::string& key) const {
    const Json* v = find(key);
    if (!v) fail(key, "missing required key");
    return detail::json_int(*v, file_, path(key));
  }
  int int_or(const std::string& key, int def) const {
    const Json* v = find(key);
    return v ? detail::json_int(*v, file_, path(key)) : def;
  }
  // `max`: a limit far above any real model's, so that a corrupt value fails here, naming its key,
  // instead of sizing allocations later.
  int positive_int(const std::string& key, int max = std::numeric_limits<int>::max()) const {
    const int v = req_int(key);
    if (v <= 0) fail(key, "must be positive, got " + std::to_string(v));
    if (v > max) fail(key, "is " + std::to_string(v) + ", above the " + std::to_string(max) + " qmoe takes");
    return v;
  }
  double number_or(const std::string& key, double def) const {
    const Json* v = find(key);
    if (!v) return def;
    if (!v->is_number()) fail(key, "expected a number, got " + json_kind(*v));
    return v->get<double>();
  }
  bool bool_or(const std::string& key, bool def) const {
    const Json* v = find(key);
    return v ? detail::json_bool(*v, file_, path(key)) : def;
  }
  std::string string_or(const std::string& key, const std::string& def) const {
    const Json* v = find(key);
    return v ? detail::json_string(*v, file_, path(key)) : def;
  }
  std::vector<int> int_list(const std::string& key) const {
    const Json* v = find(key);
    if (!v) return {};
    if (!v->is_array()) fail(key, "expected a list of integers, got " + json_kind(*v));
    std::vector<int> out;
    for (size_t i = 0; i < v->size(); ++i) {
      out.push_back(detail::json_int((*v)[i], file_, path(key) + "[" + std::to_string(i) + "]"));
    }
    return out;
  }

 private:
  const Json& j_;
  std::string file_;
  std::string base_;
};

enum class Family { kMixtral, kQwen2Moe, kQwen3Moe, kDeepseekV2, kDeepseekV3, kGlm4Moe, kGptOss,
                    kLlama4, kGraniteMoe };

const char* const kSupportedArchitectures =
    "MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, DeepseekV2ForCausalLM, "
    "DeepseekV3ForCausalLM (also model_type kimi_k2), Glm4MoeForCausalLM, GptOssForCausalLM, "
    "Llama4ForConditionalGeneration, Llama4ForCausalLM, GraniteMoeForCausalLM";

std::optional<Family> family_of(const std::string& arch, const std::string& model_type) {
  if (model_type == "kimi_k2") return Family::kDeepseekV3;
  if (arch == "MixtralForCausalLM") return Family::kMixtral;
  if (arch == "Qwen2MoeForCausalLM") return Family::kQwen2Moe;
  if (arch == "Qwen3MoeForCausalLM") return Family::kQwen3Moe;
  if (arch == "DeepseekV2ForCausalLM") return Family::kDeepseekV2;
  if (arch == "DeepseekV3ForCausalLM") return Family::kDeepseekV3;
  if (arch == "Glm4MoeForCausalLM") return Family::kGlm4Moe;
  if (arch == "GptOssForCausalLM") return Family::kGptOss;
  if (arch == "Llama4ForConditionalGeneration" || arch == "Llama4ForCausalLM") {
    return Family::kLlama4;
  }
  if (arch == "GraniteMoeForCausalLM") return Family::kGraniteMoe;
  return std::nullopt;
}

ExpertNaming naming(const std::string& experts, const std::string& gate, const std::string& up,
                    const std::string& down, const std::string& router) {
  return ExpertNaming{experts, gate, up, down, router};
}

ExpertNaming mlp_naming(const std::string& layers = "model.layers.{L}") {
  return naming(layers + ".mlp.experts", "gate_proj", "up_proj", "down_proj", layers + ".mlp.gate");
}

std::vector<int> layers_where(int n, const std::function<bool(int)>& pred) {
  std::vector<int> out;
  for (int l = 0; l < n; ++l) {
    if (pred(l)) out.push_back(l);
  }
  return out;
}

// hidden_act -> activation; an unknown name is valid input qmoe cannot run.
Activation activation_of(const Fields& f, const std::string& file) {
  const std::string act = f.string_or("hidden_act", "silu");
  const auto a = parse_activation(act);
  if (!a) {
    throw NotSupported(file + ": " + f.path("hidden_act") + ": unsupported activation \"" + act +
                       "\" (supported: silu, gelu, gelu_pytorch_tanh, gelu_new, swigluoai, "
                       "swiglustep, relu2)");
  }
  return *a;
}

void parse_mixtral_like(MoeConfig& m, const Fields& f, const std::string& experts_key,
                        const std::string& inter_key) {
  m.num_experts = f.positive_int(experts_key, kMaxConfigExperts);
  m.top_k = f.positive_int("num_experts_per_tok");
  m.inter = f.positive_int(inter_key, kMaxConfigWidth);
}

void check_top_k(const MoeConfig& m, const Fields& f, const std::string& top_k_key,
                 const std::string& experts_key) {
  if (m.top_k > m.num_experts) {
    f.fail_plain(f.path(top_k_key) + " (" + std::to_string(m.top_k) + ") exceeds " +
                 f.path(experts_key) + " (" + std::to_string(m.num_experts) + ")");
  }
}

// DeepSeek-style grouped top-k: only when n_group > 1 or topk_group > 1 (vLLM's router falls back
// to plain top-k otherwise).
void set_groups(MoeConfig& m, const Fields& f) {
  const int n_group = f.int_or("n_group", 1);
  const int topk_group = f.int_or("topk_group", 1);
  if (n_group <= 0) f.fail("n_group", "must be positive, got " + std::to_string(n_group));
  if (topk_group <= 0) f.fail("topk_group", "must be positive, got " + std::to_string(topk_group));
  if (n_group <= 1 && topk_group <= 1) return;
  if (m.num_experts % n_group != 0) {
    f.fail_plain(f.path("n_group") + " (" + std::to_string(n_group) + ") must divide " +
                 f.path("n_routed_experts") + " (" + std::to_string(m.num_experts) + ")");
  }
  if (topk_group > n_group) {
    f.fail_plain(f.path("topk_group") + " (" + std::to_string(topk_group) + ") exceeds " +
                 f.path("n_group") + " (" + std::to_string(n_group) + ")");
  }
  const int per_group = m.num_experts / n_group;
  if (m.top_k > topk_group * per_group) {
    f.fail_plain(f.path("num_experts_per_tok") + " (" + std::to_string(m.top_k) +
                 ") exceeds topk_group * experts per group (" + std::to_string(topk_group) +
                 " * " + std::to_string(per_group) + ")");
  }
  m.num_expert_group = n_group;
  m.topk_group = topk_group;
}

float routed_scaling(const Fields& f) {
  const double v = f.number_or("routed_scaling_factor", 1.0);
  const float as_float = static_cast<float>(v);  // (what the router multiplies by)
  if (!std::isfinite(v) || v <= 0 || !std::isfinite(as_float) || as_float <= 0) {
    char shown[32];
    std::snprintf(shown, sizeof shown, "%.6g", v);
    f.fail("routed_scaling_factor", std::string("must be a positive number within float's range, got ") + shown);
  }
  return as_float;
}

Scoring scoring_func(const Fields& f, const std::string& def, const std::string& file) {
  const std::string s = f.string_or("scoring_func", def);
  if (s == "softmax") return Scoring::kSoftmax;
  if (s == "sigmoid") return Scoring::kSigmoid;
  throw NotSupported(file + ": " + f.path("scoring_func") + ": unsupported scoring function \"" +
                     s + "\" (supported: softmax, sigmoid)");
}

int non_negative(const Fields& f, const std::string& key, int def, int max = std::numeric_limits<int>::max()) {
  const int v = f.int_or(key, def);
  if (v < 0) f.fail(key, "must be >= 0, got " + std::to_string(v));
  if (v > max) f.fail(key, "is " + std::to_string(v) + ", above the " + std::to_string(max) + " qmoe takes");
  return v;
}

// The shared experts' intermediate width, n_shared_experts * inter, within kMaxConfigWidth (so
// that it cannot overflow an int).
int shared_width(const Fields& f, int inter, int num_shared) {
  const int64_t width = int64_t{inter} * num_shared;
  if (width > kMaxConfigWidth)
    f.fail("n_shared_experts", "times the intermediate size is " + std::to_string(width) + ", above the " +
                                   std::to_string(kMaxConfigWidth) + " qmoe takes");
  return static_cast<int>(width);
}

int at_least_one(const Fields& f, const std::string& key, int def) {
  const int v = f.int_or(key, def);
  if (v < 1) f.fail(key, "must be >= 1, got " + std::to_string(v));
  return v;
}

void parse_deepseek(MoeConfig& m, const Fields& f, const std::string& file, bool v3) {
  parse_mixtral_like(m, f, "n_routed_experts", "moe_intermediate_size");
  check_top_k(m, f, "num_experts_per_tok", "n_routed_experts");
  m.num_shared_experts = non_negative(f, "n_shared_experts", 0);
  m.shared_inter = shared_width(f, m.inter, m.num_shared_experts);
  const int first_dense = non_negative(f, "first_k_dense_replace", 0);
  const int freq = at_least_one(f, "moe_layer_freq", 1);
  m.moe_layers = layers_where(m.num_layers, [&](int l) { return l >= first_dense && l % freq == 0; });
  m.use_correction_bias = f.string_or("topk_method", v3 ? "noaux_tc" : "greedy") == "noaux_tc";
  set_groups(m, f);
  m.scoring = scoring_func(f, v3 ? "sigmoid" : "softmax", file);
  m.renormalize = f.bool_or("norm_topk_prob", v3);
  m.routed_scaling_factor = routed_scaling(f);
  m.activation = activation_of(f, file);
  m.naming = mlp_naming();
}

void parse_qwen_moe(MoeConfig& m, const Fields& f, const std::string& file, bool qwen2) {
  parse_mixtral_like(m, f, "num_experts", "moe_intermediate_size");
  check_top_k(m, f, "num_experts_per_tok", "num_experts");
  if (qwen2) {
    const Json* v = f.find("shared_expert_intermediate_size");
    if (!v) f.fail("shared_expert_intermediate_size", "missing required key");
    m.shared_inter = non_negative(f, "shared_expert_intermediate_size", 0, kMaxConfigWidth);
    m.num_shared_experts = m.shared_inter > 0 ? 1 : 0;
  }
  m.renormalize = f.bool_or("norm_topk_prob", !qwen2);
  const int step = at_least_one(f, "decoder_sparse_step", 1);
  const std::vector<int> mlp_only = f.int_list("mlp_only_layers");
  // (entries that name no layer are ignored, as transformers and vLLM do)
  const std::set<int> dense(mlp_only.begin(), mlp_only.end());
  m.moe_layers = layers_where(m.num_layers, [&](int l) {
    return !dense.contains(l) && (l + 1) % step == 0;
  });
  m.scoring = Scoring::kSoftmax;
  m.activation = activation_of(f, file);
  m.naming = mlp_naming();
}

void parse_llama4(MoeConfig& m, const Fields& f, const std::string& file, bool multimodal) {
  parse_mixtral_like(m, f, "num_local_experts", "intermediate_size");
  check_top_k(m, f, "num_experts_per_tok", "num_local_experts");
  // Routing weight is applied to the input, which vLLM implements for top-1 only.
  if (m.top_k != 1) {
    f.fail("num_experts_per_tok",
           "Llama-4 applies the router weight on the input, which needs top_k == 1, got " +
               std::to_string(m.top_k));
  }
  m.num_shared_experts = 1;
  m.shared_inter = m.inter;
  if (f.has("moe_layers")) {
    std::vector<int> layers = f.int_list("moe_layers");
    for (int l : layers) {
      if (l < 0 || l >= m.num_layers) {
        f.fail("moe_layers", "layer " + std::to_string(l) + " out of range [0, " +
                                 std::to_string(m.num_layers) + ")");
      }
    }
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    m.moe_layers = layers;
  } else {
    const int step = at_least_one(f, "interleave_moe_layer_step", 1);
    m.moe_layers = layers_where(m.num_layers, [&](int l) { return (l + 1) % step == 0; });
  }
  m.scoring = Scoring::kSigmoid;
  m.renormalize = false;
  m.custom_llama4_routing = true;
  m.router_weight_on_input = true;
  m.activation = activation_of(f, file);
  const std::string layers = multimodal ? "language_model.model.layers.{L}" : "model.layers.{L}";
  m.naming = naming(layers + ".feed_forward.experts", "gate_proj", "up_proj", "down_proj",
                    layers + ".feed_forward.router");
}

}  // namespace

std::string layer_name(const std::string& pattern, int layer) {
  static const std::string kPlaceholder = "{L}";
  std::string out = pattern;
  const std::string idx = std::to_string(layer);
  for (size_t pos = out.find(kPlaceholder); pos != std::string::npos;
       pos = out.find(kPlaceholder, pos + idx.size())) {
    out.replace(pos, kPlaceholder.size(), idx);
  }
  return out;
}

std::string to_string(Activation a) {
  switch (a) {
    case Activation::kSilu: return "silu";
    case Activation::kGelu: return "gelu";
    case Activation::kGeluTanh: return "gelu_tanh";
    case Activation::kSwigluOai: return "swigluoai";
    case Activation::kSwigluStep: return "swiglustep";
    case Activation::kSiluNoMul: return "silu_no_mul";
    case Activation::kGeluNoMul: return "gelu_no_mul";
    case Activation::kRelu2NoMul: return "relu2_no_mul";
  }
  return "?";
}

std::optional<Activation> parse_activation(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (n == "silu" || n == "swish") return Activation::kSilu;
  if (n == "gelu") return Activation::kGelu;
  if (n == "gelu_tanh" || n == "gelu_pytorch_tanh" || n == "gelu_new") return Activation::kGeluTanh;
  if (n == "swigluoai") return Activation::kSwigluOai;
  if (n == "swiglustep") return Activation::kSwigluStep;
  if (n == "silu_no_mul") return Activation::kSiluNoMul;
  if (n == "gelu_no_mul") return Activation::kGeluNoMul;
  if (n == "relu2" || n == "relu2_no_mul") return Activation::kRelu2NoMul;
  return std::nullopt;
}

bool is_gated(Activation a) {
  return a != Activation::kSiluNoMul && a != Activation::kGeluNoMul &&
         a != Activation::kRelu2NoMul;
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& path) {
  const Json root = detail::parse_json_text(json_text, path);
  if (!root.is_object()) json_fail(path, "", "expected a JSON object, got " + json_kind(root));
  const Fields top(root, path, "");

  ModelConfig out;
  out.path = path;
  MoeConfig& m = out.moe;

  const Json* archs = top.find("architectures");
  if (!archs) top.fail("architectures", "missing required key");
  if (!archs->is_array() || archs->empty()) {
    top.fail("architectures", "expected a non-empty list of strings, got " +
                                  (archs->is_array() ? std::string("an empty list") : json_kind(*archs)));
  }
  m.architecture = detail::json_string((*archs)[0], path, "architectures[0]");
  m.model_type = top.string_or("model_type", "");

  const auto family = family_of(m.architecture, m.model_type);
  if (!family) {
    throw NotSupported(path + ": architecture \"" + m.architecture + "\" (model_type \"" +
                       m.model_type + "\") is not supported; supported: " +
                       kSupportedArchitectures);
  }

  // Multimodal configs keep the language model's hyper-parameters in text_config.
  const Json* text = top.find("text_config");
  if (text && !text->is_object()) top.fail("text_config", "expected an object, got " + json_kind(*text));
  if (m.architecture == "Llama4ForConditionalGeneration" && !text) {
    top.fail("text_config", "missing required key");
  }
  const bool use_text = *family == Family::kLlama4 && text != nullptr;
  const Fields f = use_text ? Fields(*text, path, "text_config") : top;

  m.hidden = f.positive_int("hidden_size", kMaxConfigWidth);
  m.num_layers = f.positive_int("num_hidden_layers", kMaxConfigLayers);

  switch (*family) {
    case Family::kMixtral:
    case Family::kGraniteMoe:
      parse_mixtral_like(m, f, "num_local_experts", "intermediate_size");
      check_top_k(m, f, "num_experts_per_tok", "num_local_experts");
      m.moe_layers = layers_where(m.num_layers, [](int) { return true; });
      m.scoring = Scoring::kSoftmax;
      m.renormalize = true;
      m.activation = activation_of(f, path);
      if (*family == Family::kMixtral) {
        m.naming = naming("model.layers.{L}.block_sparse_moe.experts", "w1", "w3", "w2",
                          "model.layers.{L}.block_sparse_moe.gate");
      } else {
        // Granite keeps all experts in two fused 3-D tensors: input_linear holds gate and up
        // stacked ([E, 2I, H]), output_linear holds down ([E, H, I]); no per-expert modules.
        m.naming = naming("model.layers.{L}.block_sparse_moe", "input_linear", "input_linear",
                          "output_linear", "model.layers.{L}.block_sparse_moe.router.layer");
      }
      break;
    case Family::kQwen2Moe:
    case Family::kQwen3Moe:
      parse_qwen_moe(m, f, path, *family == Family::kQwen2Moe);
      break;
    case Family::kDeepseekV2:
    case Family::kDeepseekV3:
      parse_deepseek(m, f, path, *family == Family::kDeepseekV3);
      break;
    case Family::kGlm4Moe: {
      parse_mixtral_like(m, f, "n_routed_experts", "moe_intermediate_size");
      check_top_k(m, f, "num_experts_per_tok", "n_routed_experts");
      m.num_shared_experts = non_negative(f, "n_shared_experts", 1);
      m.shared_inter = shared_width(f, m.inter, m.num_shared_experts);
      const int first_dense = non_negative(f, "first_k_dense_replace", 1);
      m.moe_layers = layers_where(m.num_layers, [&](int l) { return l >= first_dense; });
      set_groups(m, f);
      m.scoring = Scoring::kSigmoid;
      m.use_correction_bias = true;
      m.renormalize = f.bool_or("norm_topk_prob", true);
      m.routed_scaling_factor = routed_scaling(f);
      m.activation = activation_of(f, path);
      m.naming = mlp_naming();
      break;
    }
    case Family::kGptOss: {
      m.num_experts = f.positive_int("num_local_experts", kMaxConfigExperts);
      const std::string top_k_key =
          f.has("num_experts_per_tok") || !f.has("experts_per_token") ? "num_experts_per_tok"
                                                                      : "experts_per_token";
      m.top_k = f.positive_int(top_k_key);
      m.inter = f.positive_int("intermediate_size", kMaxConfigWidth);
      check_top_k(m, f, top_k_key, "num_local_experts");
      m.moe_layers = layers_where(m.num_layers, [](int) { return true; });
      m.scoring = Scoring::kSoftmax;  // softmax over the top-k logits == softmax, top-k, renorm
      m.renormalize = true;
      m.activation = Activation::kSwigluOai;
      const double limit = f.number_or("swiglu_limit", 7.0);
      if (!std::isfinite(limit) || limit <= 0) {
        f.fail("swiglu_limit", "must be a positive number, got " + std::to_string(limit));
      }
      m.swiglu_limit = static_cast<float>(limit);
      m.has_bias = true;
      m.naming = naming("model.layers.{L}.mlp.experts", "gate_proj", "up_proj", "down_proj",
                        "model.layers.{L}.mlp.router");
      break;
    }
    case Family::kLlama4:
      parse_llama4(m, f, path, m.architecture == "Llama4ForConditionalGeneration");
      break;
  }

  // CT's lookup order for the quantization description.
  if (const Json* q = top.find("quantization_config")) {
    out.quant = detail::parse_quant_object(*q, path, "quantization_config");
    out.quant->source_key = "quantization_config";
  } else if (const Json* tq = text ? Fields(*text, path, "text_config").find("quantization_config")
                                   : nullptr) {
    out.quant = detail::parse_quant_object(*tq, path, "text_config.quantization_config");
    out.quant->source_key = "text_config.quantization_config";
  } else if (const Json* cc = top.find("compression_config")) {
    out.quant = detail::parse_quant_object(*cc, path, "compression_config");
    out.quant->source_key = "compression_config";
  }
  return out;
}

ModelConfig load_model_config(const std::string& config_json_path) {
  return parse_model_config(read_text_file(config_json_path, kMaxJsonFileBytes), config_json_path);
}

}  // namespace qmoe
