// CPU backend timing on model-shaped synthetic layers (Google Benchmark).
// The yardstick: a Qwen3-30B-A3B-sized W4A16 g128 layer (E 128, top-8, hidden 2048,
// inter 768) at 64 tokens should run well under a second on a 2-core machine.
#include <benchmark/benchmark.h>

#include <random>

#include "qmoe/moe.h"
#include "quant/formats.h"

namespace qmoe {
namespace {

// Random int4 weights (every nibble uniform) with bf16 group scales around 0.01.
QuantWeight random_w4a16(int64_t rows, int64_t cols, int64_t group, std::mt19937& rng) {
  QuantWeight w;
  w.format = WeightFormat::kIntPacked;
  w.bits = 4;
  w.rows = rows;
  w.cols = cols;
  w.strategy = Strategy::kGroup;
  w.group_size = group;
  w.data = Tensor(DType::kI32, {rows, cols / 8});
  for (int64_t i = 0; i < w.data.numel(); ++i) w.data.data<int32_t>()[i] = static_cast<int32_t>(rng());
  w.scale = Tensor(DType::kBF16, {rows, cols / group});
  std::uniform_real_distribution<float> s(0.005f, 0.015f);
  for (int64_t i = 0; i < w.scale.numel(); ++i) w.scale.data<uint16_t>()[i] = quant::float_to_bf16(s(rng));
  return w;
}

MoeLayer synthetic_layer(int experts, int top_k, int hidden, int inter) {
  std::mt19937 rng(7);
  MoeLayer layer;
  layer.num_experts = layer.num_local_experts = experts;
  layer.top_k = top_k;
  layer.hidden = hidden;
  layer.inter = inter;
  layer.decision.method = MoeMethod::kWna16Marlin;
  for (int e = 0; e < experts; ++e) {
    layer.expert_map.push_back(e);
    ExpertWeights ew;
    ew.w13 = random_w4a16(2 * inter, hidden, 128, rng);
    ew.w2 = random_w4a16(hidden, inter, 128, rng);
    layer.experts.push_back(std::move(ew));
  }
  return layer;
}

void random_inputs(int64_t tokens, int64_t hidden, int64_t experts, Tensor& x, Tensor& logits) {
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 1.0f);
  x = Tensor(DType::kBF16, {tokens, hidden});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint16_t>()[i] = quant::float_to_bf16(n(rng));
  logits = Tensor(DType::kF32, {tokens, experts});
  for (int64_t i = 0; i < logits.numel(); ++i) logits.data<float>()[i] = 2.0f * n(rng);
}

void BM_Qwen3_30B_A3B_W4A16(benchmark::State& state) {
  static const MoeLayer layer = synthetic_layer(128, 8, 2048, 768);
  const int64_t tokens = state.range(0);
  Tensor x, logits;
  random_inputs(tokens, layer.hidden, layer.num_experts, x, logits);
  auto backend = make_backend("cpu");
  const ForwardOptions options;
  for (auto _ : state) benchmark::DoNotOptimize(backend->forward(layer, x, logits, options));
  state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_Qwen3_30B_A3B_W4A16)->Arg(1)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace qmoe

BENCHMARK_MAIN();
