// `qmoe bench`: synthetic layers of real model shapes x schemes x token counts on the CUDA backend,
// timed by CUDA-graph replay over rotating inputs; reports time, unique weight bytes, bandwidth,
// FLOP rate and the roofline fraction, plus the per-expert token counts for the torch baseline.
#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/common.h"
#include "config/gemm_plan.h"
#include "qmoe/error.h"
#include "qmoe/synthetic.h"
#include "routing/routing.h"
#if defined(QMOE_WITH_CUDA)
#include "qmoe/cuda.h"
#endif

namespace qmoe::cli {
namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) if (!item.empty()) out.push_back(item);
  return out;
}

// Peak rate of the tensor-core type the method's GEMMs would use (H200, TFLOP/s; measured or
// datasheet values from the performance notes).
double peak_tflops(const std::string& scheme) {
  if (scheme.rfind("fp8", 0) == 0 || scheme == "w4a8_fp8") return 1543.0;
  if (scheme == "int8" || scheme.rfind("w4a8_int8", 0) == 0) return 954.0;
  return 790.0;
}

// "auto", "decode", "prefill", "prefill:<tile>" (a forced prefill tile configuration) or
// "prefill:<tile1>/<tile2>" (GEMM1's and GEMM2's).
ForwardOptions options_of_path(const std::string& name) {
  ForwardOptions o;
  const size_t colon = name.find(':');
  const std::string path = name.substr(0, colon);
  bool known = false;
  for (GemmPath p : {GemmPath::kAuto, GemmPath::kDecode, GemmPath::kPrefill})
    if (to_string(p) == path) {
      o.gemm_path = p;
      known = true;
    }
  if (!known || (colon != std::string::npos && o.gemm_path != GemmPath::kPrefill))
    throw Error("--gemm-paths: unknown path '" + name + "' (auto, decode, prefill, prefill:<tile>, prefill:<tile1>/<tile2>)");
  if (colon == std::string::npos) return o;
  const std::string tiles = name.substr(colon + 1);
  const size_t slash = tiles.find('/');
  auto tile_of = [&](const std::string& text) {
    int t = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), t);
    if (ec != std::errc() || end != text.data() + text.size() || t < 0 || t >= kGroupedTiles)
      throw Error("--gemm-paths: " + name + ": prefill tiles are 0.." + std::to_string(kGroupedTiles - 1));
    return t;
  };
  o.prefill_tile = tile_of(tiles.substr(0, slash));
  if (slash != std::string::npos) o.prefill_tile2 = tile_of(tiles.substr(slash + 1));
  return o;
}

// --tokens: a comma list of whole numbers from 1 to 2^20.
std::vector<int> token_counts_of(const std::string& list) {
  std::vector<int> counts;
  for (const std::string& item : split(list)) {
    int t = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), t);
    if (ec != std::errc() || end != item.data() + item.size() || t < 1 || t > (1 << 20))
      throw Error("--tokens: '" + item + "' is not a token count (a whole number from 1 to 1048576)");
    counts.push_back(t);
  }
  if (counts.empty()) throw Error("--tokens: no token counts given");
  return counts;
}

}  // namespace

int run_bench(const BenchArgs& args) {
#if !defined(QMOE_WITH_CUDA)
  throw NotSupported("qmoe bench needs the CUDA backend (configure with QMOE_CUDA=ON on a machine with nvcc)");
#else
  // Every list is checked before the device is looked for or any layer is built.
  const std::vector<std::string> paths = split(args.gemm_paths);
  for (const auto& p : paths) options_of_path(p);
  std::vector<std::string> models = args.models == "all" ? std::vector<std::string>{} : split(args.models);
  if (models.empty())
    for (const auto& s : benchmark_shapes()) models.push_back(s.name);
  for (const auto& m : models) benchmark_shape(m);
  for (const auto& s : split(args.schemes)) {
    try {
      check_synthetic_scheme(s);
    } catch (const Error& e) {
      throw Error(std::string("--schemes: ") + e.what());
    }
  }
  const std::vector<int> token_counts = token_counts_of(args.tokens);
  const int largest = *std::max_element(token_counts.begin(), token_counts.end());
  if (args.max_tokens != 0 && args.max_tokens < largest)
    throw Error("--max-tokens " + std::to_string(args.max_tokens) + " is below the largest --tokens count (" +
                std::to_string(largest) + ")");
  const int max_tokens = args.max_tokens != 0 ? args.max_tokens : largest;
  SyntheticRouting routing;
  try {
    routing = parse_synthetic_routing(args.routing);
  } catch (const Error& e) {
    throw Error(std::string("--routing: ") + e.what());
  }
  if (cuda_device_count() == 0) throw NotSupported("qmoe bench: no CUDA device is available");
  const double copy_gbs = measure_copy_bandwidth_gbs();
  fmt::print("device-to-device copy bandwidth: {:.0f} GB/s; {} routing\n", copy_gbs, to_string(routing));

  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  fmt::print("{:<16} {:<12} {:<9} {:>6} {:>11} {:>11} {:>10} {:>8} {:>9} {:>8}{}\n", "model", "scheme", "path", "tokens",
             "layer us", "gemm us", "uniq MB", "TB/s", "TFLOP/s", "roofline",
             args.split_gemms ? fmt::format(" {:>10} {:>10}", "gemm1 us", "gemm2 us") : "");
  for (const std::string& model : models) {
    const MoeShape& shape = benchmark_shape(model);
    for (const std::string& base_scheme : split(args.schemes)) {
      const std::string scheme = args.f16 ? "f16:" + base_scheme : base_scheme;
      MoeLayer layer;
      try {
        layer = synthetic_layer(base_scheme, shape, args.seed);
        if (args.f16) layer = as_f16_model(std::move(layer));
      } catch (const Error& e) {
        fmt::print("{:<16} {:<12} skipped: {}\n", model, scheme, e.what());
        continue;
      }
      const CudaMoeLayer dev(layer, max_tokens, CudaMoeLayer::kDefaultDequantWorkspaceBytes, args.repacked_copy);
      const int64_t expert_bytes = layer.experts[0].w13.storage_bytes() + layer.experts[0].w2.storage_bytes();
      for (int tokens : token_counts) {
        std::vector<Tensor> hidden(args.rotations), logits(args.rotations);
        std::set<int> touched_first;
        double unique_experts = 0.0;
        nlohmann::ordered_json counts = nlohmann::ordered_json::array();
        for (int r = 0; r < args.rotations; ++r) {
          synthetic_inputs(layer, tokens, args.seed * 7919 + r, routing, hidden[r], logits[r]);
          if (args.f16) hidden[r] = bf16_to_f16(hidden[r]);
          const routing::TopK topk = routing::route(logits[r].data<float>(), tokens, layer.num_experts, layer.top_k,
                                                    layer.routing, nullptr);
          std::vector<int> per_expert(layer.num_experts, 0);
          for (int32_t id : topk.ids) ++per_expert[id];
          unique_experts += static_cast<double>(std::count_if(per_expert.begin(), per_expert.end(), [](int c) { return c > 0; }));
          counts.push_back(per_expert);
        }
        unique_experts /= args.rotations;
        for (const std::string& path : paths) {
          const ForwardOptions options = options_of_path(path);
          CudaTiming t;
          try {
            t = time_cuda_forward(dev, hidden, logits, args.replays, options, args.split_gemms);
          } catch (const NotSupported& e) {
            fmt::print("{:<16} {:<12} {:<9} {:>6} skipped: {}\n", model, scheme, path, tokens, e.what());
            continue;
          }
          const double bytes = unique_experts * static_cast<double>(expert_bytes);
          const double flops = 2.0 * tokens * layer.top_k * (3.0 * layer.inter * layer.hidden);
          const double gemm_s = std::max(t.gemm_us(), 1e-3) * 1e-6;
          const double floor_s = std::max(bytes / (copy_gbs * 1e9), flops / (peak_tflops(base_scheme) * 1e12));
          const double roofline = floor_s / gemm_s;
          fmt::print("{:<16} {:<12} {:<9} {:>6} {:>11.1f} {:>11.1f} {:>10.1f} {:>8.2f} {:>9.1f} {:>8.2f}{}\n", model, scheme,
                     path, tokens, t.forward_us, t.gemm_us(), bytes / 1e6, bytes / gemm_s / 1e12,
                     flops / gemm_s / 1e12, roofline,
                     args.split_gemms ? fmt::format(" {:>10.1f} {:>10.1f}", t.gemm1_us(), t.gemm2_us()) : "");
          std::fflush(stdout);
          nlohmann::ordered_json row = {{"model", model}, {"scheme", scheme}, {"path", path}, {"tokens", tokens},
                                        {"experts", layer.num_experts}, {"top_k", layer.top_k}, {"hidden", layer.hidden},
                                        {"inter", layer.inter},
                                        {"layer_us", t.forward_us}, {"gemm_us", t.gemm_us()}, {"unique_weight_bytes", bytes},
                                        {"flops", flops}, {"tb_per_s", bytes / gemm_s / 1e12}, {"tflops", flops / gemm_s / 1e12},
                                        {"roofline_fraction", roofline}, {"copy_gbs", copy_gbs}, {"routing", to_string(routing)},
                                        {"repacked_copy", args.repacked_copy},
                                        {"max_tokens", max_tokens}};
          if (args.split_gemms) {
            row["gemm1_us"] = t.gemm1_us();
            row["gemm2_us"] = t.gemm2_us();
          }
          row["expert_counts"] = counts;
          rows.push_back(std::move(row));
        }
      }
    }
  }
  if (!args.json.empty()) {
    std::ofstream f(args.json);
    f << rows.dump(1) << "\n";
    if (!f) throw Error("cannot write " + args.json);
  }
  return 0;
#endif
}

}  // namespace qmoe::cli
