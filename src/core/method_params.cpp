// The parameters each vLLM compressed-tensors MoE method declares (names, dtypes, shapes), so
// `qmoe inspect --json` can show how vLLM would lay a layer out.
#include <string>

#include "qmoe/moe.h"

namespace qmoe {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::vector<MethodParam> vllm_method_params(const DispatchDecision& d, int64_t E, int64_t H, int64_t I,
                                            int64_t I_full, bool gated) {
  const int64_t S = gated ? 2 : 1;
  const auto& w = d.scheme.weights;
  const auto& a = d.scheme.input;
  std::vector<MethodParam> p;
  switch (d.method) {
    case MoeMethod::kUnquantized:
      p = {{"w13_weight", "model", {E, S * I, H}}, {"w2_weight", "model", {E, H, I}}};
      break;
    case MoeMethod::kWna16Triton:
    case MoeMethod::kWna16Marlin: {
      // Transposed layouts ([.., in/pf, out]); scales [.., groups, out].
      const int64_t pf = 32 / w->num_bits;
      const bool channel = w->strategy == Strategy::kChannel;
      const int64_t g = channel ? 0 : w->group_size.value_or(0);
      const bool full_w2 = d.method == MoeMethod::kWna16Marlin && w->actorder != ActOrder::kNone && !channel;
      const int64_t ng13 = channel ? 1 : H / g;
      const int64_t ng2 = channel ? 1 : (full_w2 ? I_full : I) / g;
      p = {{"w13_weight_packed", "int32", {E, H / pf, 2 * I}},
           {"w2_weight_packed", "int32", {E, I / pf, H}},
           {"w13_weight_scale", "model", {E, ng13, 2 * I}},
           {"w2_weight_scale", "model", {E, ng2, H}},
           {"w13_weight_shape", "int64", {E, 2}},
           {"w2_weight_shape", "int64", {E, 2}}};
      if (d.method == MoeMethod::kWna16Marlin && !w->symmetric) {
        p.push_back({"w13_weight_zero_point", "int32", {E, ng13, 2 * I / pf}});
        p.push_back({"w2_weight_zero_point", "int32", {E, ng2, H / pf}});
      }
      p.push_back({"w13_weight_g_idx", "int32", {E, H}});
      p.push_back({"w2_weight_g_idx", "int32", {E, I}});
      p.push_back({"w13_g_idx_sort_indices", "int32", {E, H}});
      p.push_back({"w2_g_idx_sort_indices", "int32", {E, I}});
      break;
    }
    case MoeMethod::kMxfp4:
      p = {{"w13_weight_packed", "uint8", {E, 2 * I, H / 2}},
           {"w2_weight_packed", "uint8", {E, H, I / 2}},
           {"w13_weight_scale", "uint8", {E, 2 * I, H / 32}},
           {"w2_weight_scale", "uint8", {E, H, I / 32}}};
      break;
    case MoeMethod::kNvfp4:
      p = {{"w13_weight_packed", "uint8", {E, S * I, H / 2}},
           {"w2_weight_packed", "uint8", {E, H, I / 2}},
           {"w13_weight_scale", "float8_e4m3fn", {E, S * I, H / 16}},
           {"w2_weight_scale", "float8_e4m3fn", {E, H, I / 16}},
           {"w13_weight_global_scale", "float32", {E, S}},
           {"w2_weight_global_scale", "float32", {E}},
           {"w13_input_global_scale", "float32", {E, S}},
           {"w2_input_global_scale", "float32", {E}}};
      break;
    case MoeMethod::kFp8: {
      p = {{"w13_weight", "float8_e4m3fn", {E, S * I, H}}, {"w2_weight", "float8_e4m3fn", {E, H, I}}};
      if (w->strategy == Strategy::kTensor) {
        p.push_back({"w13_weight_scale", "float32", {E, S}});
        p.push_back({"w2_weight_scale", "float32", {E}});
      } else if (w->strategy == Strategy::kChannel) {
        p.push_back({"w13_weight_scale", "float32", {E, S * I, 1}});
        p.push_back({"w2_weight_scale", "float32", {E, H, 1}});
      } else {
        const int64_t bn = (*w->block_structure)[0], bk = (*w->block_structure)[1];
        p.push_back({"w13_weight_scale", "float32", {E, S * ceil_div(I, bn), ceil_div(H, bk)}});
        p.push_back({"w2_weight_scale", "float32", {E, ceil_div(H, bn), ceil_div(I, bk)}});
      }
      if (a && !a->is_dynamic()) {
        p.push_back({"w13_input_scale", "float32", {E}});
        p.push_back({"w2_input_scale", "float32", {E}});
      }
      break;
    }
    case MoeMethod::kInt8:
      p = {{"w13_weight", "int8", {E, S * I, H}},
           {"w2_weight", "int8", {E, H, I}},
           {"w13_weight_scale", "float32", {E, S * I, 1}},
           {"w2_weight_scale", "float32", {E, H, 1}}};
      break;
    case MoeMethod::kW4A8Fp8:
      p = {{"w13_weight_packed", "int32", {E, 2 * I, H / 8}},
           {"w2_weight_packed", "int32", {E, H, I / 8}},
           {"w13_weight_scale", "model", {E, 2 * I, H / 128}},
           {"w2_weight_scale", "model", {E, H, I / 128}},
           {"w13_weight_shape", "int64", {E, 2}},
           {"w2_weight_shape", "int64", {E, 2}}};
      break;
    case MoeMethod::kW4A8Int8:
      p = {{"w13_weight", "int8", {E, 2 * I, H}}, {"w2_weight", "int8", {E, H, I}}};
      if (w->strategy == Strategy::kChannel) {
        p.push_back({"w13_weight_scale", "float32", {E, 2 * I, 1}});
        p.push_back({"w2_weight_scale", "float32", {E, H, 1}});
      } else {
        const int64_t g = w->group_size.value_or(1);
        p.push_back({"w13_weight_scale", "model", {E, 2 * I, H / g}});
        p.push_back({"w2_weight_scale", "model", {E, H, I / g}});
      }
      break;
  }
  return p;
}

}  // namespace qmoe
