// CPU backend timing on a model-shaped synthetic layer of every scheme (Google Benchmark): a
// Qwen3-30B-A3B-sized layer (E 128, top-8, hidden 2048, inter 768) at 1 and 64 tokens. The issue's
// yardstick: W4A16 g128 at 64 tokens well under a second on a 2-core machine.
#include <benchmark/benchmark.h>

#include <map>
#include <string>

#include "qmoe/moe.h"
#include "qmoe/synthetic.h"

namespace qmoe {
namespace {

// Layers are built on first use and kept: building one takes longer than timing it.
const MoeLayer& layer_of(const std::string& scheme) {
  static std::map<std::string, MoeLayer> layers;
  auto it = layers.find(scheme);
  if (it == layers.end()) it = layers.emplace(scheme, synthetic_layer(scheme, benchmark_shape("qwen3-30b-a3b"), 7)).first;
  return it->second;
}

void run_forward(benchmark::State& state, const std::string& scheme) {
  const MoeLayer& layer = layer_of(scheme);
  const int64_t tokens = state.range(0);
  Tensor x, logits;
  synthetic_inputs(layer, tokens, 11, SyntheticRouting::kUniform, x, logits);
  auto backend = make_backend("cpu");
  const ForwardOptions options;
  for (auto _ : state) benchmark::DoNotOptimize(backend->forward(layer, x, logits, options));
  state.counters["tokens"] = static_cast<double>(tokens);
}

const bool kRegistered = [] {
  for (const std::string& scheme : synthetic_schemes())
    benchmark::RegisterBenchmark(("BM_Qwen3_30B_A3B/" + scheme).c_str(),
                                 [scheme](benchmark::State& state) { run_forward(state, scheme); })
        ->Arg(1)
        ->Arg(64)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  return true;
}();

}  // namespace
}  // namespace qmoe

BENCHMARK_MAIN();
