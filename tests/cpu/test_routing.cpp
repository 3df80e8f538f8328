// Router math against hand-computed cases.
#include <gtest/gtest.h>

#include <cmath>

#include "qmoe/error.h"
#include "routing/router_math.h"
#include "routing/routing.h"

namespace qmoe {
namespace {

TEST(Routing, SoftmaxTopKRenormalized) {
  // logits (ln 1, ln 2, ln 3, ln 4): softmax = (0.1, 0.2, 0.3, 0.4); top-2 = experts 3, 2;
  // renormalised weights 0.4/0.7 and 0.3/0.7.
  const float logits[4] = {std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  RoutingConfig cfg;
  const auto r = routing::route(logits, 1, 4, 2, cfg, nullptr);
  ASSERT_EQ(r.ids.size(), 2u);
  EXPECT_EQ(r.ids[0], 3);
  EXPECT_EQ(r.ids[1], 2);
  EXPECT_NEAR(r.weights[0], 4.0 / 7.0, 1e-6);
  EXPECT_NEAR(r.weights[1], 3.0 / 7.0, 1e-6);
}

TEST(Routing, SoftmaxWithoutRenormalization) {
  const float logits[4] = {std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  RoutingConfig cfg;
  cfg.renormalize = false;
  const auto r = routing::route(logits, 1, 4, 2, cfg, nullptr);
  EXPECT_NEAR(r.weights[0], 0.4, 1e-6);
  EXPECT_NEAR(r.weights[1], 0.3, 1e-6);
}

TEST(Routing, TiesGoToTheLowerExpertId) {
  const float logits[6] = {1.0f, 2.0f, 2.0f, 0.5f, 2.0f, 1.0f};
  RoutingConfig cfg;
  const auto r = routing::route(logits, 1, 6, 3, cfg, nullptr);
  EXPECT_EQ(r.ids[0], 1);
  EXPECT_EQ(r.ids[1], 2);
  EXPECT_EQ(r.ids[2], 4);
}

TEST(Routing, SigmoidWithCorrectionBiasUsesUnbiasedWeights) {
  // scores sigmoid(0) = 0.5 for all; bias picks experts 2 then 0; weights are the unbiased 0.5s,
  // renormalised to 0.5 each, then scaled by 2.5.
  const float logits[4] = {0, 0, 0, 0};
  const float bias[4] = {0.2f, -1.0f, 0.3f, 0.1f};
  RoutingConfig cfg;
  cfg.scoring = Scoring::kSigmoid;
  cfg.routed_scaling_factor = 2.5f;
  const auto r = routing::route(logits, 1, 4, 2, cfg, bias);
  EXPECT_EQ(r.ids[0], 2);
  EXPECT_EQ(r.ids[1], 0);
  EXPECT_NEAR(r.weights[0], 1.25, 1e-6);
  EXPECT_NEAR(r.weights[1], 1.25, 1e-6);
}

TEST(Routing, GroupedTopKKeepsTheBestGroups) {
  // 8 experts in 4 groups of 2, keep 2 groups. With a correction bias a group scores the sum of
  // its top-2 (score + bias). sigmoid(logit) for logits chosen so groups 1 and 3 win although
  // expert 0 alone has the largest score.
  const float logits[8] = {3.0f, -3.0f, 1.0f, 1.0f, -2.0f, -2.0f, 0.5f, 2.0f};
  const float bias[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  RoutingConfig cfg;
  cfg.scoring = Scoring::kSigmoid;
  cfg.num_expert_group = 4;
  cfg.topk_group = 2;
  const auto r = routing::route(logits, 1, 8, 2, cfg, bias);
  // group sums: g0 = s(3)+s(-3) = 1.0, g1 = 2 s(1) = 1.462, g2 = 2 s(-2) = 0.238, g3 = s(.5)+s(2) = 1.503
  // kept groups 3 and 1; best experts there: 7 (s(2) = .881) then 2 (s(1) = .731, lower id than 3).
  EXPECT_EQ(r.ids[0], 7);
  EXPECT_EQ(r.ids[1], 2);
  const double s7 = 1.0 / (1.0 + std::exp(-2.0)), s2 = 1.0 / (1.0 + std::exp(-1.0));
  EXPECT_NEAR(r.weights[0], s7 / (s7 + s2), 1e-6);
  EXPECT_NEAR(r.weights[1], s2 / (s7 + s2), 1e-6);
}

TEST(Routing, GroupedTopKWithoutBiasUsesGroupMax) {
  // Softmax scores; group score = max. Expert 0 alone makes group 0 win.
  const float logits[8] = {3.0f, -3.0f, 1.0f, 1.0f, -2.0f, -2.0f, 0.5f, 2.0f};
  RoutingConfig cfg;
  cfg.num_expert_group = 4;
  cfg.topk_group = 2;
  const auto r = routing::route(logits, 1, 8, 2, cfg, nullptr);
  // group maxima: g0 3, g1 1, g2 -2, g3 2 -> groups 0 and 3 -> experts 0 and 7.
  EXPECT_EQ(r.ids[0], 0);
  EXPECT_EQ(r.ids[1], 7);
}

TEST(Routing, Llama4TopOneSigmoidOfTheLogit) {
  const float logits[3] = {0.5f, 2.0f, -1.0f};
  RoutingConfig cfg;
  cfg.custom_llama4 = true;
  cfg.router_weight_on_input = true;
  const auto r = routing::route(logits, 1, 3, 1, cfg, nullptr);
  EXPECT_EQ(r.ids[0], 1);
  EXPECT_NEAR(r.weights[0], 1.0 / (1.0 + std::exp(-2.0)), 1e-6);
}

TEST(Routing, RejectsBadInput) {
  const float logits[4] = {0, NAN, 0, 0};
  RoutingConfig cfg;
  EXPECT_THROW(routing::route(logits, 1, 4, 2, cfg, nullptr), Error);
  const float ok[4] = {0, 1, 2, 3};
  EXPECT_THROW(routing::route(ok, 1, 4, 5, cfg, nullptr), Error);
  cfg.router_weight_on_input = true;
  EXPECT_THROW(routing::route(ok, 1, 4, 2, cfg, nullptr), Error);
  RoutingConfig grouped;
  grouped.num_expert_group = 3;
  grouped.topk_group = 1;
  EXPECT_THROW(routing::route(ok, 1, 4, 1, grouped, nullptr), Error);
}

}  // namespace
}  // namespace qmoe

namespace qmoe {
namespace {

TEST(RouterMath, ExpIsAccurateOverTheRouterRange) {
  // router_exp replaces std::exp so CPU and GPU agree bit for bit; it must stay within a few ulp.
  double worst = 0.0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {  // normal-range results
    const double want = std::exp(static_cast<double>(x));
    const double got = routing::router_exp(x);
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  EXPECT_LT(worst, 2e-7);
  EXPECT_EQ(routing::router_exp(0.0f), 1.0f);
  EXPECT_EQ(routing::router_exp(-200.0f), 0.0f);
  EXPECT_TRUE(std::isinf(routing::router_exp(100.0f)));
  EXPECT_NEAR(routing::router_sigmoid(0.0f), 0.5f, 0.0f);
}

}  // namespace
}  // namespace qmoe
