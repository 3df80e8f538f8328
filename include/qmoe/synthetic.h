// Random MoE layers of real model shapes for every weight scheme, built directly in the canonical
// layout (no checkpoint): for benchmarks and GPU tests. Values are random but valid (no NaN codes,
// scales in sensible ranges), drawn from a seeded generator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qmoe/moe.h"

namespace qmoe {

struct MoeShape {
  std::string name;  // "qwen3-30b-a3b", ...
  int num_experts = 0;
  int top_k = 0;
  int hidden = 0;
  int inter = 0;
};

// The benchmark shapes of the CUDA issue: mixtral-8x7b, qwen3-30b-a3b, deepseek-v3,
// deepseek-v3-tp8, kimi-k2-tp8, gpt-oss-120b.
const std::vector<MoeShape>& benchmark_shapes();
const MoeShape& benchmark_shape(const std::string& name);

// Schemes: bf16, w4a16_g128, w4a16_g32, w4a16_asym_g128, w8a16, mxfp4, nvfp4a16, nvfp4_w4a4,
// fp8_tensor, fp8_channel, fp8_block, int8, w4a8_fp8, w4a8_int8.
const std::vector<std::string>& synthetic_schemes();
// Throws qmoe::Error naming the known schemes when `scheme` is not one of them.
void check_synthetic_scheme(const std::string& scheme);

// Throws qmoe::Error for an unknown scheme or a shape the scheme cannot hold (group sizes).
MoeLayer synthetic_layer(const std::string& scheme, const MoeShape& shape, uint64_t seed, int threads = 0);

// How synthetic logits route tokens. kUniform: every expert equally likely (each expert gets about
// mean +- sqrt(mean) rows); kSkewed: a Zipf-like preference for low expert ids (logits biased by
// -2 ln(1 + e): the busiest expert ~15x the mean rows with 128 experts and top-8, ~45x with 384,
// 3x with 8 and top-2); kMild: the same at a quarter of the bias (~4x, ~10x, 1.5x: closer to the
// load imbalance of trained routers); kBalanced: token t goes to experts (t * top_k + j) mod
// num_experts, j < top_k, so every expert gets the same rows (within one when tokens * top_k is not
// a multiple of num_experts): the kernels' best case.
enum class SyntheticRouting { kUniform, kSkewed, kMild, kBalanced };
const char* to_string(SyntheticRouting routing);
// "uniform", "skewed", "mild" or "balanced"; throws qmoe::Error naming the known ones otherwise.
SyntheticRouting parse_synthetic_routing(const std::string& name);

// Random inputs: hidden BF16 [tokens, hidden] ~ U(-2, 2); logits F32 ~ N(0, 2^2), plus the routing's
// preference (kBalanced: a margin that makes its experts the top-k of every softmax or sigmoid
// routing without expert groups).
void synthetic_inputs(const MoeLayer& layer, int64_t tokens, uint64_t seed, SyntheticRouting routing, Tensor& hidden,
                      Tensor& logits);

// An f16 model of `layer`: its bf16 weight scales and dense bf16 weights as f16 (rounded; other
// tensors as they are), as an f16 checkpoint of the same scheme would store them. Pair it with
// f16 hidden states (bf16_to_f16 of synthetic_inputs' hidden states).
MoeLayer as_f16_model(MoeLayer layer);
// A bf16 tensor as f16 (each value rounded to nearest even); other dtypes are returned as they are.
Tensor bf16_to_f16(const Tensor& t);

}  // namespace qmoe
