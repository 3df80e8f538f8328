// libFuzzer target: the input is the text of one `quantization_config` object. It goes through
// parse_quant_config; only qmoe::Error may escape. Accepted configs are checked against the
// validation rules (a hole shows up as a crash) and then dispatched for one MoE layer on every
// target, which exercises target regexes, the ignore list and the predicates with fuzzed values.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "qmoe/config.h"
#include "qmoe/dispatch.h"
#include "qmoe/error.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

void check_args(const qmoe::QuantArgs& a) {
  using qmoe::Strategy;
  require(a.num_bits >= 1 && a.num_bits <= 32);
  require(!a.group_size || *a.group_size >= -1);
  const bool grouped = a.strategy == Strategy::kGroup || a.strategy == Strategy::kTensorGroup;
  require(!grouped || (a.group_size && *a.group_size > 0));
  require(grouped || !a.group_size || *a.group_size <= 0);
  require((a.strategy == Strategy::kBlock) == a.block_structure.has_value());
  require(!a.block_structure || ((*a.block_structure)[0] > 0 && (*a.block_structure)[1] > 0));
  require(a.strategy != Strategy::kToken || a.is_dynamic());
  require(a.dynamic != qmoe::DynamicMode::kLocal || a.strategy == Strategy::kTensorGroup);
  require(a.actorder != qmoe::ActOrder::kGroup || grouped);
  require(!qmoe::to_string(a).empty());
}

void check_config(const qmoe::QuantConfig& c) {
  require(c.quant_method == "compressed-tensors");
  for (const auto& g : c.groups) {
    require(!(g.targets.size() == 1 && g.targets[0].size() >= 9 &&
              g.targets[0].compare(g.targets[0].size() - 9, 9, "Attention") == 0));
    require(!g.format || *g.format != "mixed-precision");
    if (g.weights) check_args(*g.weights);
    if (g.input_activations) {
      check_args(*g.input_activations);
      require(g.input_activations->actorder == qmoe::ActOrder::kNone);
    }
    if (g.output_activations) check_args(*g.output_activations);
  }
}

void dispatch_all_targets(const qmoe::QuantConfig& c) {
  qmoe::MoeDispatchInput layer;
  layer.experts_prefix = "model.layers.1.block_sparse_moe.experts";
  layer.ckpt_gate_name = "w1";
  layer.ckpt_up_name = "w3";
  layer.ckpt_down_name = "w2";
  layer.hidden = 2048;
  layer.inter = 768;
  for (qmoe::Target t : {qmoe::Target::kSm90, qmoe::Target::kSm100, qmoe::Target::kCpu}) {
    try {
      const qmoe::DispatchDecision d = qmoe::dispatch_moe(&c, layer, t);
      require(d.vllm_class == qmoe::vllm_class_name(d.method));
      require(d.scheme.ignored == (d.method == qmoe::MoeMethod::kUnquantized));
    } catch (const qmoe::Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qmoe::QuantConfig config;
  try {
    config = qmoe::parse_quant_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const qmoe::Error&) {
    return 0;
  }
  check_config(config);
  dispatch_all_targets(config);
  return 0;
}
