// Scalar router math shared by the CPU routing and the CUDA routing kernel. Every operation is an
// explicitly rounded IEEE float operation (no contraction, no library exp), so both sides compute
// bit-identical scores and hence identical top-k ids and weights.
#pragma once

#include "quant/formats.h"

namespace qmoe::routing {

// exp(x) in float: x = n ln2 + r with |r| <= ln2/2, a degree-7 Taylor polynomial for e^r
// (relative error < 2e-7), then an exact scaling by 2^n.
QMOE_HD float router_exp(float x) {
  using quant::detail::add_rn;
  using quant::detail::mul_rn;
  if (x != x) return x;
  if (x > 88.72f) return INFINITY;
  if (x < -103.97f) return 0.0f;
  const float n = rintf(mul_rn(x, 1.44269504088896341f));
  // Cody-Waite split of ln 2: the high part has few bits, so n * kLn2High is exact.
  const float r = add_rn(add_rn(x, mul_rn(-n, 0.693145751953125f)), mul_rn(-n, 1.42860682030941723212e-6f));
  float p = 1.0f / 5040.0f;
  p = add_rn(mul_rn(p, r), 1.0f / 720.0f);
  p = add_rn(mul_rn(p, r), 1.0f / 120.0f);
  p = add_rn(mul_rn(p, r), 1.0f / 24.0f);
  p = add_rn(mul_rn(p, r), 1.0f / 6.0f);
  p = add_rn(mul_rn(p, r), 0.5f);
  p = add_rn(mul_rn(p, r), 1.0f);
  p = add_rn(mul_rn(p, r), 1.0f);
  return ldexpf(p, static_cast<int>(n));
}

QMOE_HD float router_sigmoid(float x) {
  return quant::detail::div_rn(1.0f, quant::detail::add_rn(1.0f, router_exp(-x)));
}

}  // namespace qmoe::routing
