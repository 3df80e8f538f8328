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
  const cpu::ForwardInputs in = cpu::prepare_forward(layer, hidden_states, router_logits, options);
  const int64_t T = in.tokens, H = layer.hidden, I = layer.inter;
  const int k = layer.top_k;
  const int64_t S = layer.gated() ? 2 : 1;
  auto round = [&](float v) { return cpu::round_intermediate(v, in.act_dtype, options); };
  const std::vector<float>& x = in.x;

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
  std::vector<float> act(static_cast<size_t>(T * k * I));
  std::vector<float> u(static_cast<size_t>(S * I));
  for (int64_t s : in.local_slots) {
    const int local = layer.expert_map[in.topk.ids[s]];
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

  cpu::quantize_gemm2_input(layer, in.local_slots, act.data());

  // Pass 2: GEMM2 and the weighted sum.
  std::vector<double> out(static_cast<size_t>(T * H), 0.0);
  for (int64_t s : in.local_slots) {
    const int local = layer.expert_map[in.topk.ids[s]];
    const std::vector<float>& w2 = weights_of(local).second;
    const Tensor& b2 = layer.experts[local].w2_bias;
    const float* a = act.data() + s * I;
    const double w = layer.routing.router_weight_on_input ? 1.0 : in.topk.weights[s];
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
