// Router math: scores, (grouped) top-k and weights, identical on every backend.
// Ties go to the lower expert id (and the lower group id), so ids are deterministic.
#pragma once

#include <cstdint>
#include <vector>

#include "qmoe/moe.h"

namespace qmoe::routing {

struct TopK {
  int num_tokens = 0;
  int top_k = 0;
  std::vector<int32_t> ids;    // [num_tokens, top_k] global expert ids, best first
  std::vector<float> weights;  // [num_tokens, top_k] fp32, routed_scaling_factor applied
};

// logits: [num_tokens, num_experts] fp32; correction_bias: [num_experts] or nullptr.
// Throws qmoe::Error on non-finite logits or an invalid grouping.
TopK route(const float* logits, int num_tokens, int num_experts, int top_k,
           const RoutingConfig& config, const float* correction_bias);

}  // namespace qmoe::routing
