// The reference forward: written for obviousness, not speed. Whole expert matrices are
// dequantized once, every dot product accumulates in double, one token and slot at a time.
#include <algorithm>
#include <map>

#include "cpu/moe_math.h"
#include "qmoe/error.h"
#include "routing/routing.h"

namespace qmoe {

namespace {

std::vector<float> dequantize_matrix(const QuantWeight& w, bool round_to_scale_dtype) {
  std::vector<float> m(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) dequantize_row(w, r, round_to_scale_dtype, m.data() + r * w.cols);
  return m;
}

}  // namespace

Tensor reference_forward(const MoeLayer& layer, const Tensor& hidden_states, const Tensor& router_logits,
                         const ForwardOptions& options) {
  using cpu::round_to_dtype;
  if (hidden_states.rank() != 2) throw Error("hidden_states must be 2-D [tokens, hidden], got " + hidden_states.shape_str());
  const int64_t T = hidden_states.dim(0), H = layer.hidden, I = layer.inter;
  const int k = layer.top_k;
  const int64_t S = layer.gated() ? 2 : 1;
  const DType act_dtype = hidden_states.dtype();
  auto round = [&](float v) { return options.round_intermediate ? round_to_dtype(v, act_dtype) : v; };

  std::vector<float> x = cpu::to_float_matrix(hidden_states, T, H, "hidden_states");
  const std::vector<float> logits = cpu::to_float_matrix(router_logits, T, layer.num_experts, "router_logits");
  const routing::TopK topk = routing::route(logits.data(), static_cast<int>(T), layer.num_experts, k, layer.routing,
                                            layer.correction_bias.empty() ? nullptr : layer.correction_bias.data<float>());

  if (layer.routing.router_weight_on_input)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) x[t * H + h] = round(x[t * H + h] * topk.weights[t]);
  cpu::fake_quantize(cpu::gemm1_act_quant(layer), x.data(), T, H);

  std::map<int, std::pair<std::vector<float>, std::vector<float>>> dense;  // local expert -> (w13, w2)
  auto weights_of = [&](int local) -> const std::pair<std::vector<float>, std::vector<float>>& {
    auto it = dense.find(local);
    if (it == dense.end()) {
      const ExpertWeights& ew = layer.experts[local];
      it = dense.emplace(local, std::make_pair(dequantize_matrix(ew.w13, layer.round_weights_to_scale_dtype),
                                               dequantize_matrix(ew.w2, layer.round_weights_to_scale_dtype)))
               .first;
    }
    return it->second;
  };

  // Pass 1: GEMM1 and activation for every local slot.
  std::vector<int64_t> local_slots;
  std::vector<float> act(static_cast<size_t>(T * k * I));
  std::vector<float> u(static_cast<size_t>(S * I));
  for (int64_t s = 0; s < T * k; ++s) {
    const int local = layer.expert_map[topk.ids[s]];
    if (local < 0) continue;
    local_slots.push_back(s);
    const std::vector<float>& w13 = weights_of(local).first;
    const Tensor& b13 = layer.experts[local].w13_bias;
    const float* xt = x.data() + (s / k) * H;
    for (int64_t n = 0; n < S * I; ++n) {
      double acc = 0.0;
      for (int64_t h = 0; h < H; ++h) acc += static_cast<double>(w13[n * H + h]) * xt[h];
      if (!b13.empty()) acc += b13.data<float>()[n];
      u[n] = round(static_cast<float>(acc));
    }
    float* a = act.data() + s * I;
    cpu::apply_activation(layer.activation, layer.swiglu_limit, u.data(), I, a);
    for (int64_t i = 0; i < I; ++i) a[i] = round(a[i]);
  }

  // GEMM2's input quantization (a per-tensor dynamic scale spans all local slots).
  const cpu::ActQuantParams q2 = cpu::gemm2_act_quant(layer);
  if (q2.kind == ActQuant::kFp8PerTensorDynamic) {
    std::vector<float> all;
    for (int64_t s : local_slots) all.insert(all.end(), act.begin() + s * I, act.begin() + (s + 1) * I);
    cpu::fake_quantize(q2, all.data(), static_cast<int64_t>(local_slots.size()), I);
    for (size_t i = 0; i < local_slots.size(); ++i)
      std::copy(all.begin() + i * I, all.begin() + (i + 1) * I, act.begin() + local_slots[i] * I);
  } else {
    for (int64_t s : local_slots) cpu::fake_quantize(q2, act.data() + s * I, 1, I);
  }

  // Pass 2: GEMM2 and the weighted sum.
  std::vector<double> out(static_cast<size_t>(T * H), 0.0);
  for (int64_t s : local_slots) {
    const int local = layer.expert_map[topk.ids[s]];
    const std::vector<float>& w2 = weights_of(local).second;
    const Tensor& b2 = layer.experts[local].w2_bias;
    const float* a = act.data() + s * I;
    const double w = layer.routing.router_weight_on_input ? 1.0 : topk.weights[s];
    for (int64_t h = 0; h < H; ++h) {
      double acc = 0.0;
      for (int64_t i = 0; i < I; ++i) acc += static_cast<double>(w2[h * I + i]) * a[i];
      if (!b2.empty()) acc += b2.data<float>()[h];
      out[(s / k) * H + h] += round(static_cast<float>(w * acc));
    }
  }
  Tensor result(DType::kF32, {T, H});
  for (int64_t i = 0; i < T * H; ++i) result.data<float>()[i] = round(static_cast<float>(out[i]));
  return result;
}

}  // namespace qmoe
