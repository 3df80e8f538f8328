// `qmoe run`: load one MoE layer, run it on seeded random (or given) inputs, check it against the
// reference (and against the fixture's torch output when the inputs file carries one), time it.
#include <fmt/core.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/common.h"
#include "config/gemm_plan.h"
#include "qmoe/checkpoint.h"
#include "qmoe/compare.h"
#include "qmoe/error.h"
#include "qmoe/moe.h"
#include "quant/element.h"
#include "quant/formats.h"

namespace qmoe::cli {
namespace {

// hidden_states ~ N(0, 1) as BF16 (the usual activation dtype), router_logits ~ N(0, 2^2) F32.
void random_inputs(int64_t tokens, int64_t hidden, int64_t experts, uint64_t seed, Tensor& x, Tensor& logits) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  x = Tensor(DType::kBF16, {tokens, hidden});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint16_t>()[i] = quant::float_to_bf16(normal(rng));
  logits = Tensor(DType::kF32, {tokens, experts});
  for (int64_t i = 0; i < logits.numel(); ++i) logits.data<float>()[i] = 2.0f * normal(rng);
}

Tensor take(std::map<std::string, Tensor>& m, const std::string& key, const std::string& file) {
  auto it = m.find(key);
  if (it == m.end()) throw Error("inputs file " + file + " has no tensor '" + key + "'");
  return std::move(it->second);
}

}  // namespace

int run_run(const RunArgs& args) {
  if (!args.repacked_copy && args.backend != "cuda")
    throw Error("--no-repacked-copy applies to --backend cuda only (the CPU backend keeps the checkpoint's layout)");
  const Checkpoint ckpt(args.dir);
  const ModelConfig config = load_model_config(ckpt.config_path());
  if (config.moe.moe_layers.empty()) throw Error(config.path + " declares no MoE layer");
  const int layer_idx = args.layer >= 0 ? args.layer : config.moe.moe_layers.front();

  LoadOptions load;
  load.target = args.target;
  load.tp_rank = args.tp_rank;
  load.tp_size = args.tp_size;
  if (args.ep_rank < 0 || args.ep_rank >= args.ep_size)
    throw Error("--ep-rank " + std::to_string(args.ep_rank) + " is not in [0, --ep-size " + std::to_string(args.ep_size) + ")");
  if (args.ep_size > 1) load.expert_map = linear_expert_map(config.moe.num_experts, args.ep_size, args.ep_rank);
  // One rank's output is a partial sum: only the reference of the same rank can check it.
  const bool partial = args.tp_size > 1 || args.ep_size > 1;
  load.nvfp4_exact_w4a4 = args.nvfp4_exact_w4a4;
  load.w4a8_fp8_int4 = args.w4a8_fp8_int4;
  double load_s = 0.0;
  MoeLayer layer;
  {
    Progress progress(fmt::format("loading layer {}", layer_idx));
    load.progress = [&](uint64_t done, uint64_t total) { progress.update(done, total); };
    const double t0 = now_seconds();
    layer = load_moe_layer(ckpt, config, layer_idx, load);
    load_s = now_seconds() - t0;
  }

  Tensor x, logits, expected;
  std::string expected_name;
  if (!args.inputs.empty()) {
    std::map<std::string, Tensor> in = read_safetensors(args.inputs);
    x = take(in, "hidden_states", args.inputs);
    logits = take(in, "router_logits", args.inputs);
    // Fixtures carry torch's float64 forward; with activation quantization the emulating one.
    const bool actq = layer.act_quant != ActQuant::kNone;
    std::vector<std::string> keys = {"expected_layer" + std::to_string(layer_idx)};
    if (layer_idx == config.moe.moe_layers.front()) keys.insert(keys.begin(), actq ? "expected_actq" : "expected");
    for (const std::string& key : keys) {
      if (in.count(key)) {
        expected = std::move(in.at(key));
        expected_name = key;
        if (expected.shape() != x.shape())
          throw Error("tensor '" + key + "' in " + args.inputs + " has shape " + expected.shape_str() +
                      ", expected that of hidden_states " + x.shape_str());
        break;
      }
    }
  } else {
    random_inputs(args.tokens, layer.hidden, layer.num_experts, args.seed, x, logits);
  }

  ForwardOptions options;
  options.round_intermediate = !args.fp32_intermediate;
  BackendOptions backend_options;
  backend_options.threads = args.threads;
  backend_options.repacked_copy = args.repacked_copy;
  auto backend = make_backend(args.backend, backend_options);
  // What the CUDA backend's layer may hold (its default dequantization budget).
  const bool repacked_copy = repacked_copy_possible(layer, kDefaultDequantWorkspaceBytes, args.repacked_copy);
  Tensor out = backend->forward(layer, x, logits, options);  // warm-up, and the checked output
  std::vector<double> times;
  for (int i = 0; i < args.repeat; ++i) {
    const double t0 = now_seconds();
    backend->forward(layer, x, logits, options);
    times.push_back(now_seconds() - t0);
  }
  std::sort(times.begin(), times.end());
  const double median_s = times[times.size() / 2];

  // Finite inputs (checked at load) can still overflow: weights times scales, or the sums. Such an
  // output fails the run even with --no-check.
  int64_t non_finite = 0, first_non_finite = -1;
  for (int64_t i = 0; i < out.numel(); ++i)
    if (!std::isfinite(quant::float_element(out, i)) && non_finite++ == 0)
      first_non_finite = i;
  bool ok = non_finite == 0;
  nlohmann::ordered_json checks = nlohmann::ordered_json::array();
  auto check = [&](const std::string& against, const Tensor& got, const Tensor& ref, double tol) {
    const OutputDiff d = compare_outputs(got, ref);
    const bool pass = d.finite && d.rel_l2 <= tol;
    ok = ok && pass;
    checks.push_back({{"against", against}, {"rel_l2", d.rel_l2}, {"max_abs_error", d.max_abs_error},
                      {"max_abs_ref", d.max_abs_ref}, {"tolerance_rel_l2", tol}, {"pass", pass}});
  };
  const bool cuda = backend->name() == "cuda";
  // Against torch: the fixture's bound, or the CUDA prefill bound where those GEMMs run.
  auto fixture_tolerance = [&](const ForwardOptions& o) {
    const double tol = tolerance_rel_l2(layer, o, fixture_comparison(layer, expected_name));
    return cuda ? std::max(tol, cuda_prefill_rel_l2(layer, o, x.dim(0), repacked_copy)) : tol;
  };
  if (args.check)
    check("reference", out, reference_forward(layer, x, logits, options),
          tolerance_rel_l2(layer, options, cuda ? Comparison::kCudaVsReference : Comparison::kBackendVsReference,
                           x.dim(0), repacked_copy));
  if (!expected.empty() && partial) {
    checks.push_back({{"against", "fixture " + expected_name}, {"skipped", "the output of one tensor/expert-parallel rank is a partial sum"}});
  } else if (!expected.empty()) {
    if (options.round_intermediate) {
      // Torch's forward keeps full-precision intermediates: compare like with like.
      ForwardOptions fp32 = options;
      fp32.round_intermediate = false;
      const Tensor out32 = backend->forward(layer, x, logits, fp32);
      check("fixture " + expected_name + " (fp32 intermediates)", out32, expected, fixture_tolerance(fp32));
    } else {
      check("fixture " + expected_name, out, expected, fixture_tolerance(options));
    }
  }

  if (!args.output.empty()) write_safetensors(args.output, {{"output", &out}}, {{"producer", "qmoe run"}});

  const DispatchDecision& d = layer.decision;
  // What the CUDA backend runs (or would run, in a CPU-only build) for these inputs.
  const int act_kind = x.dtype() == DType::kBF16 ? 0 : x.dtype() == DType::kF16 ? 1 : 2;
  const CudaPlanSummary plan = summarize_cuda_plan(layer, act_kind, repacked_copy, options.round_intermediate);
  // Per GEMM, the prefill kernel of the automatic path from its first batch (none: decode only).
  auto prefill_steps = [](const CudaPlanSummary::Gemm& g) {
    std::vector<std::pair<int64_t, std::string>> steps;  // (from tokens, kernel)
    if (g.prefill_from_tokens >= 0) steps.emplace_back(g.prefill_from_tokens, g.prefill);
    return steps;
  };
  const auto steps1 = prefill_steps(plan.w13), steps2 = prefill_steps(plan.w2);
  auto prefill_from = [&](const std::vector<std::pair<int64_t, std::string>>& steps) -> nlohmann::ordered_json {
    if (steps.empty()) return nullptr;
    return steps.back().first;
  };
  if (args.json) {
    nlohmann::ordered_json j;
    j["checkpoint"] = args.dir;
    j["layer"] = layer_idx;
    j["scheme"] = describe_scheme(d.scheme);
    j["method"] = to_string(d.method);
    j["vllm_class"] = d.vllm_class;
    j["target"] = to_string(args.target);
    j["activation_quantization"] = to_string(layer.act_quant);
    j["cuda_gemms"] = {{"w13", plan.w13.decode}, {"w2", plan.w2.decode}};
    j["cuda_prefill_gemms"] = {{"w13", plan.w13.prefill},
                               {"w2", plan.w2.prefill},
                               {"w13_from_tokens", prefill_from(steps1)},
                               {"w2_from_tokens", prefill_from(steps2)}};
    j["backend"] = backend->name();
    j["repacked_copy"] = repacked_copy;
    j["tokens"] = x.dim(0);
    j["experts"] = layer.num_experts;
    j["local_experts"] = layer.num_local_experts;
    j["top_k"] = layer.top_k;
    j["hidden"] = layer.hidden;
    j["inter"] = layer.inter;
    j["weight_bytes"] = layer.weight_bytes();
    j["load_seconds"] = load_s;
    j["forward_seconds_median"] = median_s;
    j["repeat"] = args.repeat;
    j["checks"] = checks;
    j["non_finite_outputs"] = non_finite;
    j["notes"] = layer.notes;
    j["pass"] = ok;
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("layer     {} ({}), {} tokens, {} of {} experts local, top-{}, hidden {}, inter {}\n", layer_idx,
               layer.experts_prefix, x.dim(0), layer.num_local_experts, layer.num_experts, layer.top_k, layer.hidden,
               layer.inter);
    fmt::print("scheme    {}\n", describe_scheme(d.scheme));
    fmt::print("method    {} ({}), decided for {}\n", to_string(d.method), d.vllm_class, to_string(args.target));
    fmt::print("act quant {}\n", to_string(layer.act_quant));
    fmt::print("cuda gemm w13: {}; w2: {}{}\n", plan.w13.decode, plan.w2.decode,
               repacked_copy ? "" : " (no repacked copy of 4-bit weights)");
    for (const auto& [name, steps] : {std::pair{"w13", &steps1}, std::pair{"w2", &steps2}})
      for (size_t i = 0; i < steps->size(); ++i) {
        const bool this_batch = x.dim(0) >= (*steps)[i].first && (i + 1 == steps->size() || x.dim(0) < (*steps)[i + 1].first);
        fmt::print("cuda gemm {} from {} tokens: {} ({})\n", name, (*steps)[i].first, (*steps)[i].second,
                   this_batch ? "this batch" : "not this batch");
      }
    for (const auto& n : d.notes) fmt::print("note      {}\n", n);
    for (const auto& n : layer.notes) fmt::print("note      {}\n", n);
    fmt::print("weights   {} loaded in {:.3f} s\n", human_bytes(static_cast<uint64_t>(layer.weight_bytes())), load_s);
    for (const auto& c : checks) {
      if (c.contains("skipped")) {
        fmt::print("check     vs {}: skipped ({})\n", c["against"].get<std::string>(), c["skipped"].get<std::string>());
        continue;
      }
      fmt::print("check     vs {}: rel_l2 {:.3e} (tolerance {:.1e}), max abs err {:.3e} (max |ref| {:.3e}): {}\n",
                 c["against"].get<std::string>(), c["rel_l2"].get<double>(), c["tolerance_rel_l2"].get<double>(),
                 c["max_abs_error"].get<double>(), c["max_abs_ref"].get<double>(), c["pass"].get<bool>() ? "PASS" : "FAIL");
    }
    if (checks.empty()) fmt::print("check     skipped (--no-check)\n");
    if (non_finite > 0)
      fmt::print("output    {} of {} values are not finite, the first at token {}, column {}: the weights, scales or "
                 "sums overflow (FAIL)\n",
                 non_finite, out.numel(), first_non_finite / out.dim(1), first_non_finite % out.dim(1));
    fmt::print("time      {:.3f} ms per forward on {} (median of {})\n", median_s * 1e3, backend->name(), args.repeat);
  }
  return ok ? 0 : 1;
}

}  // namespace qmoe::cli
