// `qmoe inspect`: the dispatch decision of every MoE layer from config.json and the safetensors
// headers alone (no weight bytes are read).
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "qmoe/checkpoint.h"
#include "qmoe/config.h"
#include "qmoe/error.h"
#include "qmoe/moe.h"

namespace qmoe::cli {
namespace {

struct LayerReport {
  int layer = 0;
  std::string experts_prefix;
  std::string scheme;
  std::string method;
  std::string vllm_class;
  std::string vllm_kernel;
  std::string qmoe_kernel_target;
  std::string qmoe_kernel_cpu;
  uint64_t expert_bytes = 0;
  int experts_found = 0;
  std::string error;
  std::string vllm_rejection;
  std::vector<std::string> notes;
  std::vector<MethodParam> params;
};

// Bytes of every tensor stored under the layer's experts prefix, and how many expert ids appear.
void expert_bytes(const Checkpoint& ckpt, const std::string& prefix, int num_experts, LayerReport& r) {
  std::vector<bool> seen(num_experts, false);
  const std::string head = prefix + ".";
  for (const std::string& name : ckpt.names()) {
    if (name.compare(0, head.size(), head) != 0) continue;
    r.expert_bytes += ckpt.info(name).size_bytes();
    const size_t dot = name.find('.', head.size());
    try {
      const int e = std::stoi(name.substr(head.size(), dot - head.size()));
      if (e >= 0 && e < num_experts) seen[e] = true;
    } catch (const std::exception&) {
    }
  }
  for (bool s : seen) r.experts_found += s ? 1 : 0;
}

}  // namespace

int run_inspect(const std::string& dir, Target target, bool json) {
  const Checkpoint ckpt(dir);
  const ModelConfig config = load_model_config(ckpt.config_path());
  const MoeConfig& moe = config.moe;

  std::vector<LayerReport> reports;
  for (int layer : moe.moe_layers) {
    LayerReport r;
    r.layer = layer;
    const MoeDispatchInput din = dispatch_input(config, layer, 1);
    r.experts_prefix = din.experts_prefix;
    expert_bytes(ckpt, din.experts_prefix, moe.num_experts, r);
    try {
      const DispatchDecision d = dispatch_moe(config.quant ? &*config.quant : nullptr, din, target);
      r.scheme = describe_scheme(d.scheme);
      r.method = to_string(d.method);
      r.vllm_class = d.vllm_class;
      r.vllm_kernel = vllm_kernel_family(d, target);
      r.qmoe_kernel_target = qmoe_kernel_family(d, target);
      r.qmoe_kernel_cpu = qmoe_kernel_family(d, Target::kCpu);
      r.vllm_rejection = d.vllm_rejection;
      r.notes = d.notes;
      r.params = vllm_method_params(d, moe.num_experts, moe.hidden, moe.inter, moe.inter, is_gated(moe.activation));
    } catch (const Error& e) {
      r.error = e.what();
    }
    if (r.error.empty() && r.experts_found < moe.num_experts)
      r.notes.push_back(fmt::format("only {} of {} experts have tensors under {}", r.experts_found, moe.num_experts,
                                    r.experts_prefix));
    reports.push_back(std::move(r));
  }

  if (json) {
    nlohmann::ordered_json j;
    j["checkpoint"] = dir;
    j["architecture"] = moe.architecture;
    j["target"] = to_string(target);
    j["num_experts"] = moe.num_experts;
    j["top_k"] = moe.top_k;
    j["hidden"] = moe.hidden;
    j["inter"] = moe.inter;
    j["activation"] = to_string(moe.activation);
    j["scoring"] = moe.scoring == Scoring::kSigmoid ? "sigmoid" : "softmax";
    j["num_expert_group"] = moe.num_expert_group;
    j["topk_group"] = moe.topk_group;
    j["quantized"] = config.quant.has_value();
    if (config.quant) {
      j["compressed_tensors_version"] = config.quant->version;
      j["format"] = config.quant->format;
    }
    j["tensors"] = ckpt.names().size();
    j["total_bytes"] = ckpt.total_size_bytes();
    auto& layers = j["layers"] = nlohmann::ordered_json::array();
    for (const auto& r : reports) {
      nlohmann::ordered_json l;
      l["layer"] = r.layer;
      l["experts_prefix"] = r.experts_prefix;
      l["expert_weight_bytes"] = r.expert_bytes;
      l["experts_found"] = r.experts_found;
      if (r.error.empty()) {
        l["scheme"] = r.scheme;
        l["method"] = r.method;
        l["vllm_class"] = r.vllm_class;
        l["vllm_kernel"] = r.vllm_kernel;
        l["qmoe_kernel"] = r.qmoe_kernel_target;
        l["qmoe_kernel_cpu"] = r.qmoe_kernel_cpu;
        if (!r.vllm_rejection.empty()) l["vllm_rejection"] = r.vllm_rejection;
        l["notes"] = r.notes;
        auto& params = l["vllm_params"] = nlohmann::ordered_json::array();
        for (const auto& p : r.params) params.push_back({{"name", p.name}, {"dtype", p.dtype}, {"shape", p.shape}});
      } else {
        l["error"] = r.error;
      }
      layers.push_back(l);
    }
    fmt::print("{}\n", j.dump(2));
    return 0;
  }

  fmt::print("checkpoint   {}\n", dir);
  fmt::print("model        {} ({}): {} experts, top-{}, hidden {}, moe inter {}, {} MoE layers\n", moe.architecture,
             moe.model_type, moe.num_experts, moe.top_k, moe.hidden, moe.inter, moe.moe_layers.size());
  fmt::print("routing      {}{}{}{}, activation {}\n", moe.scoring == Scoring::kSigmoid ? "sigmoid" : "softmax",
             moe.renormalize ? " renormalized" : "",
             moe.num_expert_group > 0 ? fmt::format(", {} groups keep {}", moe.num_expert_group, moe.topk_group) : "",
             moe.use_correction_bias ? ", correction bias" : "", to_string(moe.activation));
  if (config.quant)
    fmt::print("quantization compressed-tensors {} format {}, {} group(s), {} ignore entries\n",
               config.quant->version.empty() ? "(version not recorded)" : config.quant->version, config.quant->format,
               config.quant->groups.size(), config.quant->ignore.size());
  else
    fmt::print("quantization none\n");
  fmt::print("tensors      {} ({})\n", ckpt.names().size(), human_bytes(ckpt.total_size_bytes()));
  fmt::print("target       {}\n\n", to_string(target));
  for (const auto& r : reports) {
    fmt::print("layer {:3}  {}  experts {}/{}  {}\n", r.layer, r.experts_prefix, r.experts_found, moe.num_experts,
               human_bytes(r.expert_bytes));
    if (!r.error.empty()) {
      fmt::print("  REJECTED   {}\n", r.error);
      continue;
    }
    fmt::print("  scheme     {}\n", r.scheme);
    fmt::print("  method     {} ({})\n", r.method, r.vllm_class);
    fmt::print("  kernel     vLLM on {}: {}; qmoe: {}; qmoe on cpu: {}\n", to_string(target), r.vllm_kernel,
               r.qmoe_kernel_target, r.qmoe_kernel_cpu);
    if (!r.vllm_rejection.empty()) fmt::print("  vLLM fails {}\n", r.vllm_rejection);
    for (const auto& n : r.notes) fmt::print("  note       {}\n", n);
  }
  return 0;
}

}  // namespace qmoe::cli
