#include "routing/routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "qmoe/error.h"
#include "routing/router_math.h"

namespace qmoe::routing {
namespace {

// Indices of the `k` largest values, best first; equal values keep the lower index first.
void top_indices(const float* values, int n, int k, int* out) {
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
    if (values[a] != values[b]) return values[a] > values[b];
    return a < b;
  });
  std::copy(order.begin(), order.begin() + k, out);
}

// The CUDA routing kernel repeats these steps operation for operation (src/cuda/moe_ops.cu).
void compute_scores(const float* logits, int num_experts, Scoring scoring, float* scores) {
  using quant::detail::add_rn;
  using quant::detail::div_rn;
  if (scoring == Scoring::kSigmoid) {
    for (int e = 0; e < num_experts; ++e) scores[e] = router_sigmoid(logits[e]);
    return;
  }
  float max_logit = logits[0];
  for (int e = 1; e < num_experts; ++e) max_logit = std::max(max_logit, logits[e]);
  float sum = 0.0f;
  for (int e = 0; e < num_experts; ++e) {
    scores[e] = router_exp(add_rn(logits[e], -max_logit));
    sum = add_rn(sum, scores[e]);
  }
  for (int e = 0; e < num_experts; ++e) scores[e] = div_rn(scores[e], sum);
}

}  // namespace

TopK route(const float* logits, int num_tokens, int num_experts, int top_k,
           const RoutingConfig& config, const float* correction_bias) {
  if (num_experts <= 0) throw Error("routing: num_experts must be positive");
  if (top_k <= 0 || top_k > num_experts)
    throw Error("routing: top_k = " + std::to_string(top_k) + " must be in [1, num_experts = " +
                std::to_string(num_experts) + "]");
  const bool grouped = config.num_expert_group > 1 || config.topk_group > 1;
  int experts_per_group = num_experts;
  if (grouped) {
    if (config.num_expert_group <= 0 || num_experts % config.num_expert_group != 0)
      throw Error("routing: num_expert_group = " + std::to_string(config.num_expert_group) +
                  " must divide num_experts = " + std::to_string(num_experts));
    experts_per_group = num_experts / config.num_expert_group;
    if (config.topk_group <= 0 || config.topk_group > config.num_expert_group)
      throw Error("routing: topk_group = " + std::to_string(config.topk_group) +
                  " must be in [1, num_expert_group]");
    if (top_k > config.topk_group * experts_per_group)
      throw Error("routing: top_k exceeds the experts of the kept groups");
  }
  if (config.router_weight_on_input && top_k != 1)
    throw Error("apply_router_weight_on_input is only implemented for topk=1");

  TopK result;
  result.num_tokens = num_tokens;
  result.top_k = top_k;
  result.ids.resize(static_cast<size_t>(num_tokens) * top_k);
  result.weights.resize(result.ids.size());

  std::vector<float> scores(num_experts), choice(num_experts), group_scores;
  std::vector<int> picked(top_k), groups;
  for (int t = 0; t < num_tokens; ++t) {
    const float* row = logits + static_cast<size_t>(t) * num_experts;
    for (int e = 0; e < num_experts; ++e)
      if (!std::isfinite(row[e]))
        throw Error("router_logits[" + std::to_string(t) + ", " + std::to_string(e) +
                    "] is not finite");
    int32_t* ids = result.ids.data() + static_cast<size_t>(t) * top_k;
    float* weights = result.weights.data() + static_cast<size_t>(t) * top_k;

    if (config.custom_llama4) {
      // Llama-4: top-k over the raw logits, weight = sigmoid of each chosen logit.
      top_indices(row, num_experts, top_k, picked.data());
      for (int j = 0; j < top_k; ++j) {
        ids[j] = picked[j];
        weights[j] = router_sigmoid(row[picked[j]]);
      }
      continue;
    }

    compute_scores(row, num_experts, config.scoring, scores.data());
    for (int e = 0; e < num_experts; ++e)
      choice[e] = correction_bias ? quant::detail::add_rn(scores[e], correction_bias[e]) : scores[e];

    if (grouped) {
      // Group score: max of the group, or with a correction bias the sum of its top-2 choices.
      const int num_groups = config.num_expert_group;
      group_scores.assign(num_groups, 0.0f);
      for (int g = 0; g < num_groups; ++g) {
        const float* c = choice.data() + g * experts_per_group;
        if (correction_bias && experts_per_group >= 2) {
          int best2[2];
          top_indices(c, experts_per_group, 2, best2);
          group_scores[g] = quant::detail::add_rn(c[best2[0]], c[best2[1]]);
        } else {
          group_scores[g] = *std::max_element(c, c + experts_per_group);
        }
      }
      groups.resize(config.topk_group);
      top_indices(group_scores.data(), num_groups, config.topk_group, groups.data());
      std::vector<bool> keep(num_groups, false);
      for (int g : groups) keep[g] = true;
      for (int e = 0; e < num_experts; ++e)
        if (!keep[e / experts_per_group]) choice[e] = -std::numeric_limits<float>::infinity();
    }

    top_indices(choice.data(), num_experts, top_k, picked.data());
    float sum = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      ids[j] = picked[j];
      weights[j] = scores[picked[j]];  // unbiased score
      sum = quant::detail::add_rn(sum, weights[j]);
    }
    if (config.renormalize && sum > 0.0f)
      for (int j = 0; j < top_k; ++j) weights[j] = quant::detail::div_rn(weights[j], sum);
    if (config.routed_scaling_factor != 1.0f)
      for (int j = 0; j < top_k; ++j) weights[j] = quant::detail::mul_rn(weights[j], config.routed_scaling_factor);
  }
  return result;
}

}  // namespace qmoe::routing
