// `qmoe inspect`: the dispatch decision of every MoE layer from config.json and the safetensors
// headers alone (no weight bytes are read); with --cuda-plan also what the CUDA backend runs, from
// one expert's weights per distinct layer scheme.
#include <algorithm>
#include <fmt/core.h>

#include <functional>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <utility>

#include "cli/common.h"
#include "config/gemm_plan.h"
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
  std::optional<CudaPlanSummary> cuda_plan;
  int cuda_plan_layer = -1;  // the layer whose expert 0 the plan was built from
  int cuda_plan_act_kind = 0;  // the hidden dtype planned for (implied_act_kind: 0 bf16, 1 f16)
  std::string cuda_plan_error;
  int cuda_plan_exit = 0;  // the exit code its failure gives: 2 bad weights, 3 not supported
  int highest_extra_expert = -1;  // the highest expert id with tensors past num_experts (-1: none)
  bool verified = false;   // --verify: every expert of the layer loaded
  std::string verify_error;
  int verify_exit = 0;
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
      if (e >= num_experts) r.highest_extra_expert = std::max(r.highest_extra_expert, e);
    } catch (const std::exception&) {
    }
  }
  for (bool s : seen) r.experts_found += s ? 1 : 0;
}

// What loading weights (`load`) failed with, and the exit code that gives: 2 bad input, 3 not
// supported yet (0 and no message: it loaded).
std::pair<std::string, int> failure_of(const std::function<void()>& load) {
  try {
    load();
  } catch (const NotSupported& e) {
    return {e.what(), 3};
  } catch (const Error& e) {
    return {e.what(), 2};
  } catch (const std::bad_alloc&) {
    return {"out of host memory loading the layer", 2};
  }
  return {"", 0};
}

// The command's exit code from its layers': bad input (2) over not supported (3).
int combined_exit(int a, int b) { return a == 2 || b == 2 ? 2 : std::max(a, b); }

// The CUDA plan of each layer, built from expert 0 of the first layer with the same scheme and
// method (layers that share them share their layouts).
void add_cuda_plans(const Checkpoint& ckpt, const ModelConfig& config, int tp_size, bool repacked_copy,
                    std::vector<LayerReport>& reports) {
  std::map<std::string, const LayerReport*> first;
  for (LayerReport& r : reports) {
    if (!r.error.empty()) continue;
    const std::string key = r.scheme + " / " + r.method;
    if (const auto it = first.find(key); it != first.end()) {
      r.cuda_plan = it->second->cuda_plan;
      r.cuda_plan_layer = it->second->cuda_plan_layer;
      r.cuda_plan_error = it->second->cuda_plan_error;
      r.cuda_plan_exit = it->second->cuda_plan_exit;
      r.cuda_plan_act_kind = it->second->cuda_plan_act_kind;
      continue;
    }
    LoadOptions options;
    options.target = Target::kSm90;
    options.tp_size = tp_size;
    options.expert_map.assign(config.moe.num_experts, -1);
    std::tie(r.cuda_plan_error, r.cuda_plan_exit) = failure_of([&] {
      if (options.expert_map.empty()) throw Error("the layer has no experts");
      options.expert_map[0] = 0;
      const MoeLayer layer = load_moe_layer(ckpt, config, r.layer, options);
      r.cuda_plan_act_kind = implied_act_kind(layer);  // the checkpoint's dtype, from its scales
      r.cuda_plan = summarize_cuda_plan(layer, r.cuda_plan_act_kind, repacked_copy);
    });
    r.cuda_plan_layer = r.layer;
    first[key] = &r;
  }
}

std::string prefill_from(const CudaPlanSummary::Gemm& g) {
  if (g.prefill_from_tokens < 0) return "decode kernel at every batch size";
  auto tokens = [](int64_t t) { return fmt::format("{} token{}", t, t == 1 ? "" : "s"); };
  return "prefill kernel from " + tokens(g.prefill_from_tokens);
}

nlohmann::ordered_json gemm_json(const CudaPlanSummary::Gemm& g) {
  nlohmann::ordered_json j;
  j["decode"] = g.decode;
  j["prefill"] = g.prefill;
  j["prefill_from_tokens"] = g.prefill_from_tokens;
  auto& tiles = j["prefill_tiles"] = nlohmann::ordered_json::array();
  for (const auto& [tokens, tile] : g.tiles) tiles.push_back({{"from_tokens", tokens}, {"tile", tile}});
  j["writes_combine_terms"] = g.writes_terms;
  return j;
}

}  // namespace

// --verify: each layer loaded whole (every expert's tensors read and checked), one at a time; a
// rejected layer fails it, as `run` fails on it.
void verify_layers(const Checkpoint& ckpt, const ModelConfig& config, Target target, int tp_size,
                   std::vector<LayerReport>& reports) {
  for (LayerReport& r : reports) {
    if (!r.error.empty()) {
      r.verify_error = r.error;
      r.verify_exit = 2;
      continue;
    }
    LoadOptions options;
    options.target = target;
    options.tp_size = tp_size;
    Progress progress(fmt::format("verifying layer {}", r.layer));  // (on a terminal only)
    options.progress = [&](uint64_t done, uint64_t total) { progress.update(done, total); };
    std::tie(r.verify_error, r.verify_exit) = failure_of([&] { load_moe_layer(ckpt, config, r.layer, options); });
    r.verified = r.verify_exit == 0;
  }
}

int run_inspect(const std::string& dir, Target target, bool json, bool cuda_plan, int tp_size, bool verify,
                bool repacked_copy) {
  if (tp_size < 1) throw Error("--tp-size must be positive");
  if (!repacked_copy && !cuda_plan) throw Error("--no-repacked-copy changes the --cuda-plan report only: add --cuda-plan");
  const Checkpoint ckpt(dir);
  const ModelConfig config = load_model_config(ckpt.config_path());
  const MoeConfig& moe = config.moe;
  if (moe.inter % tp_size != 0)
    throw Error("intermediate size " + std::to_string(moe.inter) + " is not divisible by --tp-size " + std::to_string(tp_size));

  std::vector<LayerReport> reports;
  for (int layer : moe.moe_layers) {
    LayerReport r;
    r.layer = layer;
    const MoeDispatchInput din = dispatch_input(config, layer, tp_size);
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
      r.params = vllm_method_params(d, moe.num_experts, moe.hidden, din.inter, moe.inter, is_gated(moe.activation));
    } catch (const Error& e) {
      r.error = e.what();
    }
    if (r.error.empty() && r.experts_found < moe.num_experts)
      r.notes.push_back(fmt::format("only {} of {} experts have tensors under {}", r.experts_found, moe.num_experts,
                                    r.experts_prefix));
    if (r.error.empty() && r.highest_extra_expert >= 0)
      r.notes.push_back(fmt::format("tensors of experts up to {} lie under {}, past the config's {} experts "
                                    "(a wrong expert count in config.json?)",
                                    r.highest_extra_expert, r.experts_prefix, moe.num_experts));
    reports.push_back(std::move(r));
  }
  if (cuda_plan) add_cuda_plans(ckpt, config, tp_size, repacked_copy, reports);
  if (verify) verify_layers(ckpt, config, target, tp_size, reports);
  // (The report is printed whole; a layer whose CUDA plan or verification could not load its
  // weights then fails the command, as `run` would.)
  int status = 0;
  for (const LayerReport& r : reports) status = combined_exit(status, combined_exit(r.cuda_plan_exit, r.verify_exit));

  if (json) {
    nlohmann::ordered_json j;
    j["checkpoint"] = dir;
    j["architecture"] = moe.architecture;
    j["target"] = to_string(target);
    j["num_experts"] = moe.num_experts;
    j["top_k"] = moe.top_k;
    j["hidden"] = moe.hidden;
    j["inter"] = moe.inter;
    j["tp_size"] = tp_size;
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
        if (cuda_plan) {
          nlohmann::ordered_json c;
          c["from_layer"] = r.cuda_plan_layer;
          c["hidden_dtype"] = r.cuda_plan_act_kind == 1 ? "f16" : "bf16";
          c["repacked_copy"] = repacked_copy;
          if (r.cuda_plan) {
            c["w13"] = gemm_json(r.cuda_plan->w13);
            c["w2"] = gemm_json(r.cuda_plan->w2);
            c["weight_bytes"] = r.cuda_plan->weight_bytes;
            c["dequant_workspace_bytes"] = r.cuda_plan->dequant_workspace_bytes;
            c["repacked_weight_bytes"] = r.cuda_plan->repacked_weight_bytes;
          } else {
            c["error"] = r.cuda_plan_error;
          }
          l["cuda_plan"] = c;
        }
      } else {
        l["error"] = r.error;
      }
      if (verify) {
        l["verify"] = {{"ok", r.verified}};
        if (!r.verified) l["verify"]["error"] = r.verify_error;
      }
      layers.push_back(l);
    }
    fmt::print("{}\n", j.dump(2));
    return status;
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
  fmt::print("target       {}{}\n\n", to_string(target), tp_size == 1 ? "" : fmt::format(", tensor parallelism {}", tp_size));
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
    if (verify) {
      if (r.verified) fmt::print("  verified   every expert's tensors load and pass their checks\n");
      else fmt::print("  verify     FAILED: {}\n", r.verify_error);
    }
    if (!cuda_plan) continue;
    if (!r.cuda_plan) {
      fmt::print("  cuda plan  unavailable: {}\n", r.cuda_plan_error);
      continue;
    }
    fmt::print("  cuda plan  {} hidden states, vLLM rounding, {}{} (layouts of expert 0 of layer {})\n",
               r.cuda_plan_act_kind == 1 ? "f16" : "bf16",
               tp_size == 1 ? std::string("no tensor parallelism") : fmt::format("tensor-parallel rank 0 of {}", tp_size),
               repacked_copy ? "" : ", no repacked copy", r.cuda_plan_layer);
    for (const auto& [name, g] : {std::pair{"w13", &r.cuda_plan->w13}, std::pair{"w2", &r.cuda_plan->w2}}) {
      fmt::print("    {:<4} decode: {}; {}\n", name, g->decode, prefill_from(*g));
      if (g->prefill_from_tokens >= 0)
        fmt::print("         prefill: {}{}\n", g->prefill, g->writes_terms ? ", writing the combine's bf16 terms" : "");
      for (const auto& [tokens, tile] : g->tiles) fmt::print("         from {:>5} tokens: {}\n", tokens, tile);
    }
    fmt::print("    expert weights on the device {:.1f} MiB per layer (every expert local)\n",
               static_cast<double>(r.cuda_plan->weight_bytes) / (1 << 20));
    if (r.cuda_plan->dequant_workspace_bytes > 0)
      fmt::print("    dequantization workspace {:.1f} MiB per layer (default budget; allocated when max_tokens reaches "
                 "the prefill batch)\n",
                 static_cast<double>(r.cuda_plan->dequant_workspace_bytes) / (1 << 20));
    if (r.cuda_plan->repacked_weight_bytes > 0)
      fmt::print("    repacked 4-bit weights {:.1f} MiB per layer for the prefill kernel (allocated when max_tokens "
                 "reaches the prefill batch)\n",
                 static_cast<double>(r.cuda_plan->repacked_weight_bytes) / (1 << 20));
  }
  return status;
}

}  // namespace qmoe::cli
