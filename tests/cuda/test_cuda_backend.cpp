// The CUDA backend against the CPU backend (the oracle): every fixture, fresh random layers of
// every weight format at model-like and odd sizes, routing bit for bit, edge cases, graph capture.
// Labelled `gpu`; run on a machine with a CUDA device (see docs/gpu-testing.md).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>

#include "config/gemm_plan.h"
#include "config/gemm_tuning.h"
#include "cuda/chaining.h"
#include "cuda/dequant.h"
#include "cuda/moe_kernels.h"
#include "qmoe/checkpoint.h"
#include "qmoe/compare.h"
#include "qmoe/cuda.h"
#include "qmoe/error.h"
#include "qmoe/moe.h"
#include "qmoe/synthetic.h"
#include "quant/formats.h"
#include "routing/routing.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace qmoe {
namespace {

using test::seed_note;

std::mt19937_64& rng() {
  static std::mt19937_64 r(test::test_seed());  // fresh inputs every run (gpu_test_util.h)
  return r;
}

// ---- random layers -----------------------------------------------------------------------------

enum class Scheme { kW4A16G128, kW4A16Channel, kW4A16AsymG32, kW8A16Channel, kW8A16AsymG64, kW8A16Int8Storage, kFp8Channel, kFp8Block,
                    kFp8TensorStatic, kInt8, kNvfp4, kNvfp4ExactW4A4, kMxfp4, kDense, kInt4Fp8Codes, kW4A8Fp8, kW4A8Int8,
                    kW4A8Int8Channel, kW4A8Int8G256 };
// kInt4Fp8Codes: int4 weights with FP8 activations, the int4 code kernels' layout (W4A8-FP8 checkpoints
// with LoadOptions::w4a8_fp8_int4); kW4A8Fp8: W4A8-FP8 as the loader leaves it by default, vLLM's FP8
// products with a scale per row (w4a8_fp8_as_fp8_channel). kW4A8Int8Channel: W4A8-INT8 with vLLM's
// per-row fp32 scales. kW4A8Int8G256: groups of 256 (the int8 register kernel's sums over two
// k-tiles).

const char* name_of(Scheme s) {
  switch (s) {
    case Scheme::kW4A16G128: return "w4a16_g128";
    case Scheme::kW4A16Channel: return "w4a16_channel";
    case Scheme::kW4A16AsymG32: return "w4a16_asym_g32";
    case Scheme::kW8A16Channel: return "w8a16_channel";
    case Scheme::kW8A16AsymG64: return "w8a16_asym_g64";
    case Scheme::kW8A16Int8Storage: return "w8a16_int8_storage_g128";
    case Scheme::kFp8Channel: return "fp8_channel_token";
    case Scheme::kFp8Block: return "fp8_block";
    case Scheme::kFp8TensorStatic: return "fp8_tensor_static";
    case Scheme::kInt8: return "int8_w8a8";
    case Scheme::kNvfp4: return "nvfp4a16";
    case Scheme::kNvfp4ExactW4A4: return "nvfp4_w4a4_exact";
    case Scheme::kMxfp4: return "mxfp4";
    case Scheme::kDense: return "bf16";
    case Scheme::kInt4Fp8Codes: return "int4_fp8_codes";
    case Scheme::kW4A8Fp8: return "w4a8_fp8";
    case Scheme::kW4A8Int8: return "w4a8_int8";
    case Scheme::kW4A8Int8Channel: return "w4a8_int8_channel";
    case Scheme::kW4A8Int8G256: return "w4a8_int8_g256";
  }
  return "?";
}

Tensor random_bf16(std::vector<int64_t> shape, float lo, float hi) {
  Tensor t(DType::kBF16, std::move(shape));
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint16_t>()[i] = quant::float_to_bf16(d(rng()));
  return t;
}

Tensor random_bytes(DType dtype, std::vector<int64_t> shape) {
  Tensor t(dtype, std::move(shape));
  for (size_t i = 0; i < t.size_bytes(); ++i) t.raw()[i] = static_cast<std::byte>(rng()());
  return t;
}

// A random fp8 e4m3 tensor without NaN codes, magnitudes up to ~2.
Tensor random_fp8(std::vector<int64_t> shape) {
  Tensor t(DType::kF8E4M3, std::move(shape));
  std::normal_distribution<float> d(0.0f, 0.7f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = quant::float_to_fp8e4m3_sat(d(rng()));
  return t;
}

QuantWeight random_weight(Scheme s, int64_t rows, int64_t cols) {
  if (s == Scheme::kW4A8Fp8) return w4a8_fp8_as_fp8_channel(random_weight(Scheme::kInt4Fp8Codes, rows, cols));
  QuantWeight w;
  const int64_t group = s == Scheme::kW4A16AsymG32 || s == Scheme::kMxfp4 ? 32
                        : s == Scheme::kNvfp4                            ? 16
                        : s == Scheme::kW8A16AsymG64                     ? 64
                        : s == Scheme::kW4A8Int8G256                     ? 256
                                                                         : 128;
  const bool grouped = s != Scheme::kW8A16Channel && s != Scheme::kW4A16Channel && s != Scheme::kInt8 && s != Scheme::kFp8Channel &&
                       s != Scheme::kFp8TensorStatic && s != Scheme::kDense && s != Scheme::kFp8Block &&
                       s != Scheme::kW4A8Int8Channel;
  if (grouped && cols % group != 0) throw Error("random_weight: cols must be a multiple of the group size");
  w.rows = rows;
  w.cols = cols;
  switch (s) {
    case Scheme::kW4A16G128:
    case Scheme::kW4A16Channel:
    case Scheme::kW4A16AsymG32:
    case Scheme::kInt4Fp8Codes:
    case Scheme::kW4A8Int8:
    case Scheme::kW4A8Int8Channel:
    case Scheme::kW4A8Int8G256: {
      w.format = WeightFormat::kIntPacked;
      w.bits = 4;
      w.data = random_bytes(DType::kI32, {rows, quant::packed_words_per_row(cols, 4)});
      if (s == Scheme::kW4A16Channel) {
        w.strategy = Strategy::kChannel;
        w.scale = random_bf16({rows, 1}, 0.0005f, 0.005f);
        break;
      }
      if (s == Scheme::kW4A8Int8Channel) {  // (fp32, as vLLM's W4A8-INT8 keeps per-row scales)
        w.strategy = Strategy::kChannel;
        w.scale = Tensor(DType::kF32, {rows, 1});
        std::uniform_real_distribution<float> d(0.0005f, 0.005f);
        for (int64_t r = 0; r < rows; ++r) w.scale.data<float>()[r] = d(rng());
        break;
      }
      w.strategy = Strategy::kGroup;
      w.group_size = s == Scheme::kW4A16AsymG32 ? 32 : s == Scheme::kW4A8Int8G256 ? 256 : 128;
      w.scale = random_bf16({rows, cols / w.group_size}, 0.002f, 0.02f);
      if (s == Scheme::kW4A16AsymG32) {
        w.zero_point = Tensor(DType::kI8, {rows, cols / w.group_size});
        for (int64_t i = 0; i < w.zero_point.numel(); ++i) w.zero_point.data<int8_t>()[i] = static_cast<int8_t>(rng()() % 16) - 8;
      }
      break;
    }
    case Scheme::kW8A16Channel:
    case Scheme::kInt8: {
      w.bits = 8;
      w.strategy = Strategy::kChannel;
      if (s == Scheme::kW8A16Channel) {
        w.format = WeightFormat::kIntPacked;
        w.data = random_bytes(DType::kI32, {rows, quant::packed_words_per_row(cols, 8)});
      } else {
        w.format = WeightFormat::kIntUnpacked;
        w.data = random_bytes(DType::kI8, {rows, cols});
      }
      w.scale = random_bf16({rows, 1}, 0.0002f, 0.002f);
      break;
    }
    case Scheme::kW8A16AsymG64:
    case Scheme::kW8A16Int8Storage: {
      w.bits = 8;
      w.strategy = Strategy::kGroup;
      w.group_size = group;
      if (s == Scheme::kW8A16AsymG64) {
        w.format = WeightFormat::kIntPacked;
        w.data = random_bytes(DType::kI32, {rows, quant::packed_words_per_row(cols, 8)});
        w.zero_point = random_bytes(DType::kI8, {rows, cols / group});
      } else {
        w.format = WeightFormat::kIntUnpacked;
        w.data = random_bytes(DType::kI8, {rows, cols});
      }
      w.scale = random_bf16({rows, cols / group}, 0.0002f, 0.002f);
      break;
    }
    case Scheme::kFp8Channel:
    case Scheme::kFp8Block:
    case Scheme::kFp8TensorStatic: {
      w.format = WeightFormat::kFp8;
      w.bits = 8;
      w.data = random_fp8({rows, cols});
      if (s == Scheme::kFp8Channel) {
        w.strategy = Strategy::kChannel;
        w.scale = random_bf16({rows, 1}, 0.01f, 0.05f);
      } else if (s == Scheme::kFp8Block) {
        w.strategy = Strategy::kBlock;
        w.block_rows = w.block_cols = 128;
        w.scale = random_bf16({(rows + 127) / 128, (cols + 127) / 128}, 0.01f, 0.05f);
      } else {
        w.strategy = Strategy::kTensor;
        w.scale = random_bf16({1}, 0.01f, 0.05f);
      }
      break;
    }
    case Scheme::kNvfp4:
    case Scheme::kNvfp4ExactW4A4:
    case Scheme::kMxfp4: {
      w.bits = 4;
      w.data = random_bytes(DType::kU8, {rows, cols / 2});
      if (s == Scheme::kMxfp4) {
        w.format = WeightFormat::kMxfp4;
        w.strategy = Strategy::kGroup;
        w.group_size = 32;
        w.scale = Tensor(DType::kU8, {rows, cols / 32});
        for (int64_t i = 0; i < w.scale.numel(); ++i) w.scale.data<uint8_t>()[i] = static_cast<uint8_t>(118 + rng()() % 5);
      } else {
        w.format = WeightFormat::kNvfp4;
        w.strategy = Strategy::kTensorGroup;
        w.group_size = 16;
        w.scale = Tensor(DType::kF8E4M3, {rows, cols / 16});
        for (int64_t i = 0; i < w.scale.numel(); ++i)
          w.scale.data<uint8_t>()[i] = quant::float_to_fp8e4m3_sat(std::uniform_real_distribution<float>(20, 400)(rng()));
        w.global_scale = 20000.0f;
      }
      break;
    }
    case Scheme::kDense:
      w.format = WeightFormat::kDense;
      w.bits = 16;
      w.data = random_bf16({rows, cols}, -0.05f, 0.05f);
      break;
  }
  return w;
}

struct LayerShape {
  int experts, top_k, hidden, inter;
};

MoeLayer random_layer(Scheme s, LayerShape shape, Activation act = Activation::kSilu) {
  MoeLayer L;
  L.num_experts = L.num_local_experts = shape.experts;
  L.top_k = shape.top_k;
  L.hidden = shape.hidden;
  L.inter = shape.inter;
  L.activation = act;
  const bool w8a8 = s == Scheme::kFp8Channel || s == Scheme::kFp8Block || s == Scheme::kFp8TensorStatic ||
                    s == Scheme::kInt8 || s == Scheme::kInt4Fp8Codes || s == Scheme::kW4A8Fp8 || s == Scheme::kW4A8Int8 ||
                    s == Scheme::kW4A8Int8Channel || s == Scheme::kW4A8Int8G256;
  L.round_weights_to_scale_dtype = !w8a8 && s != Scheme::kNvfp4 && s != Scheme::kNvfp4ExactW4A4;
  switch (s) {
    case Scheme::kFp8Channel: case Scheme::kInt4Fp8Codes: case Scheme::kW4A8Fp8: L.act_quant = ActQuant::kFp8PerToken; break;
    case Scheme::kFp8Block: L.act_quant = ActQuant::kFp8Group; L.act_group_size = 128; break;
    case Scheme::kFp8TensorStatic: L.act_quant = ActQuant::kFp8Static; L.w13_input_scale = 0.01f; L.w2_input_scale = 0.002f; break;
    case Scheme::kInt8: case Scheme::kW4A8Int8: case Scheme::kW4A8Int8Channel: case Scheme::kW4A8Int8G256:
      L.act_quant = ActQuant::kInt8PerToken;
      break;
    case Scheme::kNvfp4ExactW4A4: L.act_quant = ActQuant::kNvfp4; L.w13_input_global_scale = 600.0f; L.w2_input_global_scale = 3000.0f; break;
    default: break;
  }
  const int64_t S = is_gated(act) ? 2 : 1;
  for (int e = 0; e < shape.experts; ++e) {
    L.expert_map.push_back(e);
    ExpertWeights ew;
    ew.w13 = random_weight(s, S * shape.inter, shape.hidden);
    ew.w2 = random_weight(s, shape.hidden, shape.inter);
    L.experts.push_back(std::move(ew));
  }
  return L;
}

void random_inputs(int64_t tokens, const MoeLayer& L, Tensor& x, Tensor& logits) {
  x = random_bf16({tokens, L.hidden}, -2.0f, 2.0f);
  logits = Tensor(DType::kF32, {tokens, L.num_experts});
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (int64_t i = 0; i < logits.numel(); ++i) logits.data<float>()[i] = d(rng());
}

void forward_eager_and_replayed(const CudaMoeLayer& dev, const Tensor& x, const Tensor& logits,
                                const ForwardOptions& options, int replays, Tensor* eager, Tensor* replay);

// The CUDA backend's forward. A prefill path forced on fewer tokens than a 4-bit register kernel's
// crossover runs on a layer sized for the crossover: its repacked weights exist only on layers that
// reach it (W4Prefill checks that a smaller layer says so).
Tensor cuda_forward(const MoeLayer& layer, const Tensor& x, const Tensor& logits, const ForwardOptions& options) {
  const int64_t copy_from = repacked_copy_from_tokens(layer);
  const int64_t repacked_from = copy_from == std::numeric_limits<int64_t>::max() ? 0 : copy_from;
  if (options.gemm_path != GemmPath::kPrefill || x.dim(0) >= repacked_from)
    return make_backend("cuda")->forward(layer, x, logits, options);
  CudaMoeLayer dev(layer, static_cast<int>(repacked_from));
  Tensor got, replay;
  forward_eager_and_replayed(dev, x, logits, options, 1, &got, &replay);
  return got;
}

void expect_cuda_matches_cpu(const MoeLayer& layer, const Tensor& x, const Tensor& logits, const std::string& what,
                             GemmPath path = GemmPath::kAuto, Comparison bound = Comparison::kCudaVsReference,
                             int prefill_tile = -1, int prefill_tile2 = -1) {
  auto cpu = make_backend("cpu");
  for (bool round : {true, false}) {
    ForwardOptions options;
    options.round_intermediate = round;
    options.gemm_path = path;
    options.prefill_tile = prefill_tile;
    options.prefill_tile2 = prefill_tile2;
    const Tensor want = cpu->forward(layer, x, logits, options);
    const Tensor got = cuda_forward(layer, x, logits, options);
    if (got.empty()) return;  // (a failed assertion in cuda_forward)
    const OutputDiff d = compare_outputs(got, want);
    std::printf("    %-48s %s rel_l2 %.2e\n", what.c_str(), round ? "rounded" : "fp32   ", d.rel_l2);
    EXPECT_TRUE(d.finite) << what << seed_note();
    EXPECT_LE(d.rel_l2, tolerance_rel_l2(layer, options, bound, x.dim(0)))
        << what << (round ? " (vLLM rounding)" : " (fp32 intermediates)") << " max abs err " << d.max_abs_error
        << seed_note();
  }
}

// ---- random layers of every format -------------------------------------------------------------

class RandomLayers : public ::testing::TestWithParam<Scheme> {};

TEST_P(RandomLayers, MatchTheCpuBackend) {
  REQUIRE_GPU();
  const Scheme s = GetParam();
  // A Qwen3-30B-A3B-like shape (scaled down in experts) and an odd gpt-oss-like shape.
  std::vector<LayerShape> shapes = {{16, 8, 2048, 768}};
  // gpt-oss-like sizes (2880 = 22.5 x 128, 1440 = 22.5 x 64) only where the scheme's groups divide
  // them, as the loader requires.
  const bool groups_of_64_or_more = s == Scheme::kW4A16G128 || s == Scheme::kInt4Fp8Codes || s == Scheme::kW4A8Int8 ||
                                    s == Scheme::kW4A8Int8G256 ||
                                    s == Scheme::kW4A8Fp8 ||  // (made from int4 groups of 128)
                                    s == Scheme::kFp8Block ||
                                    s == Scheme::kW8A16Int8Storage || s == Scheme::kW8A16AsymG64;
  if (!groups_of_64_or_more && s != Scheme::kNvfp4ExactW4A4) shapes.push_back({8, 4, 2880, 1440});
  for (const LayerShape& shape : shapes) {
    const MoeLayer layer = random_layer(s, shape);
    for (int64_t tokens : {1, 7, 64}) {
      Tensor x, logits;
      random_inputs(tokens, layer, x, logits);
      expect_cuda_matches_cpu(layer, x, logits, std::string(name_of(s)) + " H " + std::to_string(shape.hidden) +
                                                    " tokens " + std::to_string(tokens));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, RandomLayers,
                         ::testing::Values(Scheme::kW4A16G128, Scheme::kW4A16Channel, Scheme::kW4A16AsymG32, Scheme::kW8A16Channel,
                                           Scheme::kW8A16AsymG64, Scheme::kW8A16Int8Storage, Scheme::kFp8Channel, Scheme::kFp8Block, Scheme::kFp8TensorStatic,
                                           Scheme::kInt8, Scheme::kNvfp4, Scheme::kNvfp4ExactW4A4, Scheme::kMxfp4,
                                           Scheme::kDense, Scheme::kInt4Fp8Codes, Scheme::kW4A8Fp8, Scheme::kW4A8Int8,
                                           Scheme::kW4A8Int8Channel, Scheme::kW4A8Int8G256),
                         [](const ::testing::TestParamInfo<Scheme>& info) { return std::string(name_of(info.param)); });

// F16 models: f16 hidden states and f16 scales (or dense f16 weights), so the GEMMs run in f16
// (as_f16_model, qmoe/synthetic.h).
TEST(RandomLayerEdges, HalfPrecisionModels) {
  REQUIRE_GPU();
  for (Scheme s : {Scheme::kW4A16G128, Scheme::kW4A16AsymG32, Scheme::kW8A16AsymG64, Scheme::kW8A16Int8Storage,
                   Scheme::kDense}) {
    const MoeLayer layer = as_f16_model(random_layer(s, {16, 4, 1024, 512}));
    for (int64_t tokens : {1, 20}) {
      Tensor x, logits;
      random_inputs(tokens, layer, x, logits);
      expect_cuda_matches_cpu(layer, bf16_to_f16(x), logits,
                              std::string("f16 ") + name_of(s) + " tokens " + std::to_string(tokens));
    }
  }
}

TEST(RandomLayerEdges, ActivationsExpertMapAndRouting) {
  REQUIRE_GPU();
  // gpt-oss activation, non-gated relu2, router weight on input (top-1, Llama-4 routing).
  for (Activation act : {Activation::kSwigluOai, Activation::kRelu2NoMul, Activation::kGeluTanh}) {
    const MoeLayer layer = random_layer(Scheme::kMxfp4, {8, 2, 512, 256}, act);
    Tensor x, logits;
    random_inputs(9, layer, x, logits);
    expect_cuda_matches_cpu(layer, x, logits, "activation " + to_string(act));
  }
  // An intermediate size that is not a multiple of 4 or 8 (the activation kernel's element-wise
  // path; the CUDA-core GEMMs), gated and not.
  // 2052: whole 16-byte chunks, then a 4-column tail.
  for (int inter : {2054, 2052})
    for (Activation act : {Activation::kSilu, Activation::kRelu2NoMul}) {
      const MoeLayer odd = random_layer(Scheme::kDense, {8, 2, 520, inter}, act);
      Tensor x, logits;
      random_inputs(3, odd, x, logits);
      expect_cuda_matches_cpu(odd, x, logits, "inter " + std::to_string(inter) + ", activation " + to_string(act));
    }
  // Per-token activation quantization of rows wider than the 8192 values a block holds in registers
  // (Mixtral's 14336-wide GEMM2 input takes this path): FP8 and INT8 on the decode kernels.
  for (Scheme s : {Scheme::kFp8Channel, Scheme::kInt8}) {
    const MoeLayer wide = random_layer(s, {8, 2, 512, 8320});
    for (int64_t tokens : {1, 5}) {
      Tensor x, logits;
      random_inputs(tokens, wide, x, logits);
      expect_cuda_matches_cpu(wide, x, logits, std::string(name_of(s)) + " inter 8320 tokens " + std::to_string(tokens),
                              GemmPath::kDecode);
    }
  }
  MoeLayer llama = random_layer(Scheme::kW4A16G128, {8, 1, 512, 256});
  llama.routing.custom_llama4 = true;
  llama.routing.router_weight_on_input = true;
  llama.routing.scoring = Scoring::kSigmoid;
  llama.routing.renormalize = false;
  Tensor x, logits;
  random_inputs(5, llama, x, logits);
  expect_cuda_matches_cpu(llama, x, logits, "llama4 routing");

  // Grouped sigmoid routing with a correction bias and a scaling factor (DeepSeek-V3 style).
  MoeLayer ds = random_layer(Scheme::kFp8Block, {32, 8, 512, 256});
  ds.routing = {Scoring::kSigmoid, true, 8, 4, 2.5f, false, false};
  ds.correction_bias = random_bf16({32}, -0.1f, 0.1f);
  ds.correction_bias = Tensor(DType::kF32, {32});
  for (int e = 0; e < 32; ++e) ds.correction_bias.data<float>()[e] = std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng());
  random_inputs(33, ds, x, logits);
  expect_cuda_matches_cpu(ds, x, logits, "grouped routing");

  // Expert map with non-local experts: only odd experts live here.
  MoeLayer ep = random_layer(Scheme::kW4A16G128, {8, 2, 512, 256});
  ep.expert_map = {-1, 0, -1, 1, -1, 2, -1, 3};
  ep.num_local_experts = 4;
  ep.experts.resize(4);
  random_inputs(17, ep, x, logits);
  expect_cuda_matches_cpu(ep, x, logits, "expert map");

  // All tokens on one expert; experts with no tokens; one token.
  MoeLayer one = random_layer(Scheme::kFp8Channel, {8, 2, 512, 256});
  random_inputs(40, one, x, logits);
  for (int64_t t = 0; t < 40; ++t) {
    logits.data<float>()[t * 8 + 3] = 30.0f;
    logits.data<float>()[t * 8 + 5] = 29.0f;
  }
  expect_cuda_matches_cpu(one, x, logits, "all tokens on experts 3 and 5");
  random_inputs(1, one, x, logits);
  expect_cuda_matches_cpu(one, x, logits, "one token");
}

TEST(RandomLayerEdges, BothGroupingPathsWithAnExpertMap) {
  REQUIRE_GPU();
  // Up to 8192 slots the grouping runs in one block, above it in count / offsets / scatter
  // kernels: 1, 1024 (8192 slots: every thread's 8) and 1100 tokens x top-8 (8800 slots), half
  // the experts not local.
  MoeLayer ep = random_layer(Scheme::kW4A16G128, {16, 8, 256, 128});
  ep.expert_map.assign(16, -1);
  for (int e = 0; e < 8; ++e) ep.expert_map[2 * e + 1] = e;
  ep.num_local_experts = 8;
  ep.experts.resize(8);
  for (int64_t tokens : {1, 1024, 1100}) {
    Tensor x, logits;
    random_inputs(tokens, ep, x, logits);
    expect_cuda_matches_cpu(ep, x, logits, "expert map, tokens " + std::to_string(tokens));
  }
}

MoeLayer with_act_order(MoeLayer layer);

// The decode kernels run each expert's slots in chunks of kMmaChunkSlots, a block row each: experts
// with many chunks (a busy expert, skewed routing), one partial, and experts with a slot or none,
// on both grouping paths (one block up to 8192 slots, then count / offsets / scatter), with an expert
// map; on the tensor-core kernel weight-only, per-step-scaled (FP8 blocks), zero-point and code
// formats; on the CUDA-core GEMV its GEMM2 with fp32 intermediates (not exactly 16-bit), and the
// generic kernel with act order.
TEST(RandomLayerEdges, DecodeKernelSplitsBusyExpertsIntoChunks) {
  REQUIRE_GPU();
  // The decode path on a workspace poisoned with NaN (a slot the GEMMs miss shows in the output),
  // eager and replayed, against the CPU, with vLLM's rounding and with fp32 intermediates.
  auto expect_decode_matches_cpu = [](const MoeLayer& layer, const Tensor& x, const Tensor& logits, bool round,
                                      const std::string& what) {
    ForwardOptions options;
    options.round_intermediate = round;
    options.gemm_path = GemmPath::kDecode;
    const int T = static_cast<int>(x.dim(0));
    const int64_t bytes = CudaMoeLayer::workspace_bytes(layer, T);
    auto shared = std::make_shared<CudaWorkspace>(bytes);
    ASSERT_EQ(cudaMemset(shared->data(), 0xFF, static_cast<size_t>(bytes)), cudaSuccess);
    const CudaMoeLayer dev(layer, T, shared);
    Tensor got, replay;
    forward_eager_and_replayed(dev, x, logits, options, 1, &got, &replay);
    ASSERT_FALSE(got.empty()) << what;
    const Tensor want = make_backend("cpu")->forward(layer, x, logits, options);
    const OutputDiff d = compare_outputs(got, want);
    std::printf("    %-48s %s rel_l2 %.2e\n", what.c_str(), round ? "rounded" : "fp32   ", d.rel_l2);
    EXPECT_TRUE(d.finite) << what << seed_note();
    EXPECT_LE(d.rel_l2, tolerance_rel_l2(layer, options, Comparison::kCudaVsReference, T)) << what << seed_note();
    EXPECT_EQ(0, std::memcmp(got.raw(), replay.raw(), got.size_bytes())) << what << ": replay differs";
  };
  std::vector<std::pair<std::string, MoeLayer>> layers;
  for (Scheme s : {Scheme::kW4A16G128, Scheme::kW4A16AsymG32, Scheme::kMxfp4, Scheme::kNvfp4, Scheme::kFp8Channel,
                   Scheme::kFp8Block, Scheme::kInt8, Scheme::kDense})
    layers.emplace_back(name_of(s), random_layer(s, {8, 2, 512, 256}));
  layers.emplace_back("w4a16_g128 act order", with_act_order(random_layer(Scheme::kW4A16G128, {8, 2, 512, 256})));
  for (const auto& [name, layer] : layers) {
    Tensor x, logits;
    random_inputs(100, layer, x, logits);
    // Expert 2 in every token's top 2 (100 slots: three whole chunks and a partial one), expert 6
    // in 70 tokens' (three chunks, the last of 6 slots), experts 0, 4 and 7 in none.
    for (int64_t t = 0; t < 100; ++t) {
      float* row = logits.data<float>() + t * 8;
      row[2] = 30.0f;
      row[6] = t < 70 ? 29.0f : -30.0f;
      row[0] = row[4] = row[7] = -30.0f;
    }
    for (bool round : {true, false}) expect_decode_matches_cpu(layer, x, logits, round, name + " decode, busy experts");
  }
  // 1100 tokens x top-8 (8800 slots: the multi-launch grouping), all of them on local experts 1 and
  // 3 (global 3 and 7; 1100 slots each, 35 chunks), half the experts not local.
  MoeLayer ep = random_layer(Scheme::kW4A16G128, {16, 8, 256, 128});
  ep.expert_map.assign(16, -1);
  for (int e = 0; e < 8; ++e) ep.expert_map[2 * e + 1] = e;
  ep.num_local_experts = 8;
  ep.experts.resize(8);
  Tensor x, logits;
  random_inputs(1100, ep, x, logits);
  for (int64_t t = 0; t < 1100; ++t) {
    logits.data<float>()[t * 16 + 3] = 30.0f;
    logits.data<float>()[t * 16 + 7] = 29.0f;
  }
  for (bool round : {true, false})
    expect_decode_matches_cpu(ep, x, logits, round, "decode, expert map, 8800 slots on two busy experts");
}

// The decode path's per-expert hybrid (skewed routing): experts with at least the threshold's slots
// on the 4-bit register kernel, the others on the decode kernel, on a workspace poisoned with NaN
// (a row either side misses shows in the output), eager and replayed, against the CPU, with an
// expert map; forward_kernels says the hybrid ran, and with the threshold 0 that it did not.
TEST(RandomLayerEdges, HybridRunsBusyExpertsOnTheRegisterKernel) {
  REQUIRE_GPU();
  for (Scheme s : {Scheme::kMxfp4, Scheme::kNvfp4, Scheme::kW4A16G128}) {
    MoeLayer layer = random_layer(s, {16, 4, 512, 256});
    // Global experts 0-15, local ones the even ids (8 local experts, the odd ones elsewhere).
    layer.expert_map.assign(16, -1);
    for (int e = 0; e < 8; ++e) layer.expert_map[2 * e] = e;
    layer.num_local_experts = 8;
    layer.experts.resize(8);
    const LayerGemmPlan plan = plan_prefill_kernels(layer);
    ASSERT_TRUE(dequantizes_in_registers(plan.g1) && dequantizes_in_registers(plan.g2)) << name_of(s);
    const int max_tokens = 8192;  // past the register kernels' switch: the repacked copy exists
    const int64_t below = hybrid_max_tokens(layer, plan, max_tokens);
    ASSERT_GT(below, 8) << name_of(s);
    const int T = static_cast<int>(std::min<int64_t>(below, 60));  // (both GEMMs on the decode path)
    const int64_t bytes = CudaMoeLayer::workspace_bytes(layer, max_tokens);
    auto shared = std::make_shared<CudaWorkspace>(bytes);
    ASSERT_EQ(cudaMemset(shared->data(), 0xFF, static_cast<size_t>(bytes)), cudaSuccess);
    const CudaMoeLayer dev(layer, max_tokens, shared);
    Tensor x, logits;
    random_inputs(T, layer, x, logits);
    // Global expert 6 (local 3) in every token's top 4, expert 10 (local 5) in the first half's.
    for (int64_t t = 0; t < T; ++t) {
      float* row = logits.data<float>() + t * 16;
      row[6] = 30.0f;
      if (t < T / 2) row[10] = 29.0f;
    }
    ForwardOptions options;
    options.hybrid_busy_rows = T / 4;
    const std::string what = std::string(name_of(s)) + ", " + std::to_string(T) + " tokens";
    const auto kernels = dev.forward_kernels(T, DType::kBF16, options);
    EXPECT_EQ(kernels.first, "decode+" + to_string(plan.g1)) << what;
    EXPECT_EQ(kernels.second, "decode+" + to_string(plan.g2)) << what;
    Tensor got, replay;
    forward_eager_and_replayed(dev, x, logits, options, 1, &got, &replay);
    ASSERT_FALSE(got.empty()) << what;
    const Tensor want = make_backend("cpu")->forward(layer, x, logits, options);
    const OutputDiff d = compare_outputs(got, want);
    std::printf("    %-48s rel_l2 %.2e\n", ("hybrid " + what).c_str(), d.rel_l2);
    EXPECT_TRUE(d.finite) << what << seed_note();
    EXPECT_LE(d.rel_l2, tolerance_rel_l2(layer, options, Comparison::kCudaVsReference, T)) << what << seed_note();
    EXPECT_EQ(0, std::memcmp(got.raw(), replay.raw(), got.size_bytes())) << what << ": replay differs";
    // Its forward runs chained (the register kernels plainly inside the chain): the same bits as
    // every kernel launched plainly.
    if (cuda::chained_launches()) {
      Tensor plain, plain_replay;
      {
        const cuda::ChainedLaunchScope unchained(false);
        forward_eager_and_replayed(dev, x, logits, options, 1, &plain, &plain_replay);
      }
      EXPECT_EQ(0, std::memcmp(got.raw(), plain.raw(), got.size_bytes())) << what << ": chained differs from plain";
    }
    options.hybrid_busy_rows = 0;
    EXPECT_EQ(dev.forward_kernels(T, DType::kBF16, options), std::make_pair(std::string("decode"), std::string("decode")))
        << what;
  }
}

// ---- prefill kernels (grouped wgmma on expert-sorted rows) ---------------------------------------

TEST(PrefillKernels, MatchTheCpuBackend) {
  REQUIRE_GPU();
  for (Scheme s : {Scheme::kFp8Channel, Scheme::kFp8TensorStatic, Scheme::kInt8, Scheme::kDense, Scheme::kW4A16G128,
                   Scheme::kW4A16Channel, Scheme::kFp8Block, Scheme::kW8A16Channel, Scheme::kW8A16Int8Storage,
                   Scheme::kInt4Fp8Codes, Scheme::kW4A8Int8, Scheme::kW4A8Int8Channel, Scheme::kW4A8Int8G256}) {
    // A Qwen3-like shape scaled down in experts, and gpt-oss's odd 2880 (not a multiple of the tiles;
    // not with groups of 128, which must divide it). 128 x 128 blocks may end partial (2880 = 22.5
    // blocks: partial k-tiles, 23 input scales per row, the unfused quantization), and also get
    // 1024 x 384 (768 gate/up rows and 384 w2 inputs: not multiples of the 256-row tiles).
    std::vector<LayerShape> shapes = {{16, 8, 2048, 768}, {8, 4, 2880, 1440}};
    if (s == Scheme::kFp8Block) shapes.push_back({8, 4, 1024, 384});
    for (const LayerShape& shape : shapes) {
      if ((s == Scheme::kW4A16G128 || s == Scheme::kW8A16Int8Storage || s == Scheme::kInt4Fp8Codes || s == Scheme::kW4A8Int8 ||
           s == Scheme::kW4A8Int8Channel || s == Scheme::kW4A8Int8G256) &&
          shape.hidden == 2880)
        continue;
      const MoeLayer layer = random_layer(s, shape);
      if (s == Scheme::kW4A8Int8 || s == Scheme::kW4A8Int8Channel || s == Scheme::kW4A8Int8G256)  // (int8 MMAs)
        ASSERT_EQ(plan_layer_gemms(layer, 0, true).g1, GroupedKernel::kInt4Int8Regs);
      // (INT4 weight-only takes the register kernel where it can, CUTLASS's mixed-input kernel where
      // k is a multiple of 32 but not of 64: here w2.)
      if (s == Scheme::kW4A16Channel)
        ASSERT_EQ(plan_layer_gemms(layer, 0, true).g2,
                  shape.inter % 64 == 0 ? GroupedKernel::kInt4RegsBf16 : GroupedKernel::kInt4Bf16);
      for (int64_t tokens : {1, 7, 64, 300}) {
        Tensor x, logits;
        random_inputs(tokens, layer, x, logits);
        const std::string what = std::string(name_of(s)) + " H " + std::to_string(shape.hidden) + " tokens " +
                                 std::to_string(tokens);
        expect_cuda_matches_cpu(layer, x, logits, "prefill " + what, GemmPath::kPrefill);
      }
    }
  }
  // The automatic path on a batch past the crossover.
  for (Scheme s : {Scheme::kFp8Channel, Scheme::kInt8, Scheme::kDense, Scheme::kW4A16G128, Scheme::kFp8Block,
                   Scheme::kW8A16Channel, Scheme::kInt4Fp8Codes, Scheme::kW4A8Int8}) {
    const MoeLayer layer = random_layer(s, {8, 2, 1024, 512});
    Tensor x, logits;
    random_inputs(1024, layer, x, logits);
    expect_cuda_matches_cpu(layer, x, logits, std::string("auto ") + name_of(s) + " tokens 1024");
  }
  // A TP8-like dense layer (inter 256): the planner's 128 x 256 tile for GEMM1 and, on GEMM2's short
  // reduction, the pingpong 128 x 192 (100 rows per expert; 132-180 would take the wide tile).
  {
    const MoeLayer layer = random_layer(Scheme::kDense, {16, 8, 1024, 256});
    ASSERT_EQ(plan_grouped_tile(GroupedKernel::kBf16, 200 * 8, 16, 256), GroupedTile::kLarge);
    ASSERT_EQ(plan_grouped_tile(GroupedKernel::kBf16, 200 * 8, 16, 1024), GroupedTile::kHuge);
    Tensor x, logits;
    random_inputs(200, layer, x, logits);
    expect_cuda_matches_cpu(layer, x, logits, "auto dense inter 256 tokens 200");
  }
}

// Every tile configuration each prefill kernel has, whatever the planner would pick; a tile that is
// not built must say so before anything runs. gpt-oss's 2880 x 1440 gives partial 128/192/256-wide
// n-tiles where the scheme's groups divide it.
TEST(PrefillKernels, EveryTileMatchesTheCpuBackend) {
  REQUIRE_GPU();
  for (Scheme s : {Scheme::kFp8Channel, Scheme::kInt8, Scheme::kDense, Scheme::kW4A16G128, Scheme::kFp8Block,
                   Scheme::kW8A16Channel, Scheme::kInt4Fp8Codes, Scheme::kW4A8Int8}) {
    std::vector<LayerShape> shapes = {{16, 8, 2048, 768}};
    if (s == Scheme::kFp8Channel || s == Scheme::kInt8 || s == Scheme::kDense) shapes.push_back({8, 4, 2880, 1440});
    for (const LayerShape& shape : shapes) {
      const MoeLayer layer = random_layer(s, shape);
      const LayerGemmPlan plan = plan_layer_gemms(layer, 0, true);
      Tensor x, logits;
      random_inputs(300, layer, x, logits);
      std::vector<int> built;  // the tiles of both GEMMs' kernels
      for (int tile = 0; tile < kGroupedTiles; ++tile) {
        const auto t = static_cast<GroupedTile>(tile);
        const std::string what = std::string("prefill ") + name_of(s) + " H " + std::to_string(shape.hidden) +
                                 " tile " + to_string(t);
        if (!grouped_tile_built(plan.g1, t) || !grouped_tile_built(plan.g2, t)) {
          ForwardOptions options;
          options.gemm_path = GemmPath::kPrefill;
          options.prefill_tile = tile;
          try {
            make_backend("cuda")->forward(layer, x, logits, options);
            ADD_FAILURE() << what << ": ran a tile that is not built";
          } catch (const NotSupported& e) {
            EXPECT_NE(std::string(e.what()).find("is not built"), std::string::npos) << what << ": " << e.what();
          }
          continue;
        }
        expect_cuda_matches_cpu(layer, x, logits, what, GemmPath::kPrefill, Comparison::kCudaVsReference, tile);
        built.push_back(tile);
      }
      // GEMM1 and GEMM2 on different tiles (prefill:<tile1>/<tile2>): the first and last built, and
      // the planner's GEMM1 with the first built for GEMM2.
      ASSERT_FALSE(built.empty()) << name_of(s);
      const std::string where = std::string("prefill ") + name_of(s) + " H " + std::to_string(shape.hidden) + " tiles ";
      expect_cuda_matches_cpu(layer, x, logits, where + std::to_string(built.front()) + "/" + std::to_string(built.back()),
                              GemmPath::kPrefill, Comparison::kCudaVsReference, built.front(), built.back());
      expect_cuda_matches_cpu(layer, x, logits, where + "planned/" + std::to_string(built.front()), GemmPath::kPrefill,
                              Comparison::kCudaVsReference, -1, built.front());
      // A GEMM2 tile its kernel lacks says so, though GEMM1's is built.
      for (int tile = 0; tile < kGroupedTiles; ++tile) {
        if (grouped_tile_built(plan.g2, static_cast<GroupedTile>(tile))) continue;
        ForwardOptions options;
        options.gemm_path = GemmPath::kPrefill;
        options.prefill_tile = built.front();
        options.prefill_tile2 = tile;
        try {
          make_backend("cuda")->forward(layer, x, logits, options);
          ADD_FAILURE() << where << built.front() << "/" << tile << ": ran a GEMM2 tile that is not built";
        } catch (const NotSupported& e) {
          EXPECT_NE(std::string(e.what()).find("is not built"), std::string::npos) << where << ": " << e.what();
        }
        break;
      }
    }
  }
}

// On the prefill kernels of `s`: all tokens on two experts (the others get empty groups), one
// token; and an expert map with non-local experts on those of `map_scheme`.
void expect_prefill_edges(Scheme s, int64_t skewed_tokens, Scheme map_scheme, int64_t map_tokens) {
  MoeLayer one = random_layer(s, {8, 2, 512, 256});
  Tensor x, logits;
  random_inputs(skewed_tokens, one, x, logits);
  for (int64_t t = 0; t < skewed_tokens; ++t) {
    logits.data<float>()[t * 8 + 3] = 30.0f;
    logits.data<float>()[t * 8 + 5] = 29.0f;
  }
  const std::string name = name_of(s);
  expect_cuda_matches_cpu(one, x, logits, "prefill " + name + " all tokens on experts 3 and 5", GemmPath::kPrefill);
  random_inputs(1, one, x, logits);
  expect_cuda_matches_cpu(one, x, logits, "prefill " + name + " one token", GemmPath::kPrefill);
  MoeLayer ep = random_layer(map_scheme, {8, 2, 512, 256});
  ep.expert_map = {-1, 0, -1, 1, -1, 2, -1, 3};
  ep.num_local_experts = 4;
  ep.experts.resize(4);
  random_inputs(map_tokens, ep, x, logits);
  expect_cuda_matches_cpu(ep, x, logits, std::string("prefill ") + name_of(map_scheme) + " expert map",
                          GemmPath::kPrefill);
}

// A layer of scheme `s` (8 experts, top-2, hidden 512, inter 256) at `tokens` on the automatic path,
// where the planner picks `tile` for both GEMMs: uniform routing, all tokens on two experts (several
// such tiles each, the last partial), an expert map with non-local experts.
void expect_planned_tile_matches_cpu(Scheme s, int64_t tokens, GroupedTile tile) {
  const std::string name = std::string(name_of(s)) + " " + to_string(tile) + " tile";
  const MoeLayer layer = random_layer(s, {8, 2, 512, 256});
  const LayerGemmPlan plan = plan_layer_gemms(layer, 0, true);
  ASSERT_TRUE(use_grouped_kernel(plan.g1, tokens, 8, 2, 256)) << name;
  ASSERT_EQ(plan_grouped_tile(plan.g1, tokens * 2, 8, 512), tile) << name;
  ASSERT_EQ(plan_grouped_tile(plan.g2, tokens * 2, 8, 256), tile) << name;
  Tensor x, logits;
  random_inputs(tokens, layer, x, logits);
  expect_cuda_matches_cpu(layer, x, logits, name + " uniform");
  for (int64_t t = 0; t < tokens; ++t) {
    logits.data<float>()[t * 8 + 3] = 30.0f;
    logits.data<float>()[t * 8 + 5] = 29.0f;
  }
  expect_cuda_matches_cpu(layer, x, logits, name + " all tokens on experts 3 and 5");
  MoeLayer ep = random_layer(s, {8, 2, 512, 256});
  ep.expert_map = {-1, 0, -1, 1, -1, 2, -1, 3};
  ep.num_local_experts = 4;
  ep.experts.resize(4);
  random_inputs(tokens, ep, x, logits);
  expect_cuda_matches_cpu(ep, x, logits, name + " expert map");
}

// FP8 / INT8 / bf16's swapped 128 x 192 tile where the planner picks it (132-180 mean rows per
// expert; here 170: 680 tokens x top-2 / 8); GEMM2 writes the combine's terms (FP8, bf16) or fp32
// rows (INT8).
TEST(PrefillKernels, WideTileWhereThePlannerPicksIt) {
  REQUIRE_GPU();
  for (Scheme s : {Scheme::kFp8Channel, Scheme::kInt8, Scheme::kDense})
    expect_planned_tile_matches_cpu(s, 680, GroupedTile::kWide);
}

// The 4-bit register kernel's 320-row tile in its ranges: 280 rows per expert (1120 tokens x top-2
// / 8; one tile per expert), 560 (2240 tokens; two, the second partial) and, but for NVFP4, 840
// (3360 tokens; three).
TEST(PrefillKernels, RegisterKernel320RowTileWherePlanned) {
  REQUIRE_GPU();
  for (Scheme s : {Scheme::kW4A16G128, Scheme::kMxfp4, Scheme::kNvfp4}) {
    ASSERT_TRUE(dequantizes_in_registers(plan_layer_gemms(random_layer(s, {8, 2, 512, 256}), 0, true).g1)) << name_of(s);
    expect_planned_tile_matches_cpu(s, 1120, GroupedTile::kHuge);
    expect_planned_tile_matches_cpu(s, 2240, GroupedTile::kHuge);
    if (s != Scheme::kNvfp4) expect_planned_tile_matches_cpu(s, 3360, GroupedTile::kHuge);
  }
}

TEST(PrefillKernels, EdgeCases) {
  REQUIRE_GPU();
  expect_prefill_edges(Scheme::kFp8Channel, 400, Scheme::kFp8Channel, 257);
  // W4A16 with group and channel scales (the register kernel; CUTLASS's transposed W4A16 kernel in
  // RepackedCopy.OffKeepsOneCopyAndMatchesTheCpuBackend).
  expect_prefill_edges(Scheme::kW4A16G128, 300, Scheme::kW4A16Channel, 129);
  // INT8 weight-only: packed codes made signed at load, and int8 storage.
  expect_prefill_edges(Scheme::kW8A16Channel, 300, Scheme::kW8A16Int8Storage, 129);
  // W4A8: activation codes as bf16 values with their row scale in the epilogue; with INT8
  // activations, int8 MMAs on the register kernel.
  expect_prefill_edges(Scheme::kInt4Fp8Codes, 300, Scheme::kW4A8Int8, 129);
  expect_prefill_edges(Scheme::kW4A8Int8, 300, Scheme::kW4A8Int8, 7);
  // The bf16 W4A8 kernel's only numerical difference is its bf16 weights: against a reference that
  // rounds the weights the same way (q * s to bf16), it keeps the backend bound of same-numerics
  // backends. (W4A8-INT8 layers that round their weights so plan it instead of the int8 kernel.)
  for (Scheme s : {Scheme::kInt4Fp8Codes, Scheme::kW4A8Int8}) {
    MoeLayer rounded = random_layer(s, {16, 8, 2048, 768});
    rounded.round_weights_to_scale_dtype = true;
    ASSERT_EQ(plan_layer_gemms(rounded, 0, true).g1, GroupedKernel::kInt4Codes) << name_of(s);
    Tensor rx, rlogits;
    random_inputs(300, rounded, rx, rlogits);
    expect_cuda_matches_cpu(rounded, rx, rlogits, std::string("prefill ") + name_of(s) + " bf16 weights",
                            GemmPath::kPrefill, Comparison::kBackendVsReference);
  }
  // vLLM's W4A8-FP8 weights as the loader leaves them (w4a8_fp8_as_fp8_channel: FP8 products, a
  // scale per row): the FP8 channel kernels, decode and prefill, against the CPU.
  const MoeLayer vllm_w4a8 = random_layer(Scheme::kW4A8Fp8, {16, 8, 2048, 768});
  ASSERT_EQ(plan_layer_gemms(vllm_w4a8, 0, true).g1, GroupedKernel::kFp8);
  for (int64_t tokens : {1, 7, 300}) {
    Tensor vx, vlogits;
    random_inputs(tokens, vllm_w4a8, vx, vlogits);
    for (GemmPath path : {GemmPath::kDecode, GemmPath::kPrefill, GemmPath::kAuto})
      expect_cuda_matches_cpu(vllm_w4a8, vx, vlogits, "w4a8_fp8 as vLLM's FP8 weights, " + std::to_string(tokens) + " tokens",
                              path);
  }
  // INT4 weights with FP8 activations and f32 group scales (layers built directly: checkpoints load
  // as FP8 weights now), converted to bf16 for the prefill kernel at load.
  MoeLayer f32_scales = random_layer(Scheme::kInt4Fp8Codes, {16, 8, 2048, 768});
  for (ExpertWeights& ew : f32_scales.experts)
    for (QuantWeight* w : {&ew.w13, &ew.w2}) {
      Tensor f32(DType::kF32, w->scale.shape());
      for (int64_t i = 0; i < w->scale.numel(); ++i)
        f32.data<float>()[i] = quant::bf16_to_float(w->scale.data<uint16_t>()[i]) * 1.37f;
      w->scale = std::move(f32);
    }
  Tensor fx, flogits;
  random_inputs(200, f32_scales, fx, flogits);
  expect_cuda_matches_cpu(f32_scales, fx, flogits, "prefill w4a8_fp8 f32 scales", GemmPath::kPrefill);
  // Block scales: one input scale per 128 columns of each sorted row.
  expect_prefill_edges(Scheme::kFp8Block, 260, Scheme::kFp8Block, 97);
  // Top-1 with the router weight on the input (Llama-4): the input rows carry the rescaled values.
  Tensor x, logits;
  MoeLayer llama = random_layer(Scheme::kFp8Channel, {8, 1, 512, 256});
  llama.routing.custom_llama4 = true;
  llama.routing.router_weight_on_input = true;
  llama.routing.scoring = Scoring::kSigmoid;
  llama.routing.renormalize = false;
  random_inputs(200, llama, x, logits);
  expect_cuda_matches_cpu(llama, x, logits, "prefill router weight on input", GemmPath::kPrefill);
  // The bf16 kernel's GEMM2 writes the combine's terms: with the router weight on the input its
  // terms take no weight (a null weight array). (The automatic path: with the intermediates
  // unrounded the weighted input rows are not bf16 values, so that case has no prefill kernel and
  // runs the decode kernels.) Also all tokens on two experts, one token, an expert map.
  MoeLayer llama_dense = random_layer(Scheme::kDense, {8, 1, 512, 256});
  llama_dense.routing = llama.routing;
  random_inputs(200, llama_dense, x, logits);
  expect_cuda_matches_cpu(llama_dense, x, logits, "dense, router weight on input", GemmPath::kAuto);
  expect_prefill_edges(Scheme::kDense, 300, Scheme::kDense, 129);
  // Per-tensor dynamic input scales: GEMM2's input takes the unfused path (activation, tensor-wide
  // amax, codes, gather).
  MoeLayer dyn = random_layer(Scheme::kFp8Channel, {8, 2, 512, 256});
  dyn.act_quant = ActQuant::kFp8PerTensorDynamic;
  random_inputs(150, dyn, x, logits);
  expect_cuda_matches_cpu(dyn, x, logits, "prefill fp8 per-tensor dynamic inputs", GemmPath::kPrefill);
}

// The device API's forward of `dev` into a NaN-poisoned output, then the same forward captured in a
// graph and replayed `replays` times into another poisoned output; both outputs to the host.
void forward_eager_and_replayed(const CudaMoeLayer& dev, const Tensor& x, const Tensor& logits,
                                const ForwardOptions& options, int replays, Tensor* eager, Tensor* replay) {
  const int T = static_cast<int>(x.dim(0));
  const int64_t hidden = dev.layer().hidden;
  void *d_x, *d_logits, *d_eager, *d_graph;
  const size_t out_bytes = sizeof(float) * T * hidden;
  ASSERT_EQ(cudaMalloc(&d_x, x.size_bytes()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_logits, logits.size_bytes()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_eager, out_bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_graph, out_bytes), cudaSuccess);
  cudaMemcpy(d_x, x.raw(), x.size_bytes(), cudaMemcpyHostToDevice);
  cudaMemcpy(d_logits, logits.raw(), logits.size_bytes(), cudaMemcpyHostToDevice);
  cudaMemset(d_eager, 0xFF, out_bytes);  // NaN poison
  cudaMemset(d_graph, 0xFF, out_bytes);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  dev.forward(d_x, x.dtype(), static_cast<float*>(d_logits), static_cast<float*>(d_eager), T, stream, options);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  dev.forward(d_x, x.dtype(), static_cast<float*>(d_logits), static_cast<float*>(d_graph), T, stream, options);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < replays; ++i) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  *eager = Tensor(DType::kF32, {T, hidden});
  *replay = Tensor(DType::kF32, {T, hidden});
  cudaMemcpy(eager->raw(), d_eager, out_bytes, cudaMemcpyDeviceToHost);
  cudaMemcpy(replay->raw(), d_graph, out_bytes, cudaMemcpyDeviceToHost);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(d_x);
  cudaFree(d_logits);
  cudaFree(d_eager);
  cudaFree(d_graph);
}

// ---- prefill on dequantized weights (groups of 32, zero points, act order, MXFP4) ----------------

// A layer's forward on `dev`, eager and graph-replayed (bit for bit), against the CPU's `want`.
// `repacked_copy`: whether `dev` may hold the register kernel's copy (the tolerance follows it).
void expect_device_layer_matches(const CudaMoeLayer& dev, const Tensor& x, const Tensor& logits, const Tensor& want,
                                 const ForwardOptions& options, bool repacked_copy, const std::string& what) {
  Tensor got, replay;
  forward_eager_and_replayed(dev, x, logits, options, 2, &got, &replay);
  if (got.empty()) return;  // a failed assertion above
  EXPECT_EQ(0, std::memcmp(got.raw(), replay.raw(), got.size_bytes())) << what << ": graph replay differs";
  const OutputDiff d = compare_outputs(got, want);
  std::printf("    %-60s rel_l2 %.2e\n", what.c_str(), d.rel_l2);
  EXPECT_TRUE(d.finite) << what << seed_note();
  EXPECT_LE(d.rel_l2, tolerance_rel_l2(dev.layer(), options, Comparison::kCudaVsReference, x.dim(0), repacked_copy))
      << what << " max abs err " << d.max_abs_error << seed_note();
}

// The device API's forward with a workspace of `dequant_bytes` for dequantized experts, eager and
// graph-replayed (bit for bit), against the CPU's `want`.
void expect_dequantized_prefill_matches_cpu(const MoeLayer& layer, const Tensor& x, const Tensor& logits,
                                            const Tensor& want, const ForwardOptions& options, int max_tokens,
                                            int64_t dequant_bytes, const std::string& what) {
  const CudaMoeLayer dev(layer, max_tokens, dequant_bytes);
  expect_device_layer_matches(dev, x, logits, want, options, repacked_copy_possible(layer, dequant_bytes, true), what);
}

// Act order: each k column's group from a shuffled g_idx (every group keeps group_size columns).
MoeLayer with_act_order(MoeLayer layer) {
  for (ExpertWeights& ew : layer.experts)
    for (QuantWeight* w : {&ew.w13, &ew.w2}) {
      std::vector<int32_t> groups(w->cols);
      for (int64_t c = 0; c < w->cols; ++c) groups[c] = static_cast<int32_t>(c / w->group_size);
      std::shuffle(groups.begin(), groups.end(), rng());
      w->g_idx = Tensor(DType::kI32, {w->cols});
      std::memcpy(w->g_idx.raw(), groups.data(), groups.size() * sizeof(int32_t));
    }
  return layer;
}

// The dequantization kernel alone, bit for bit against the CPU's dequantize_row, on every layout
// the planner gives it (and a partial last batch of experts with one expert without slots).
TEST(DequantizedPrefill, WeightsAreTheCpusBitForBit) {
  REQUIRE_GPU();
  struct Case {
    std::string name;
    QuantWeight w;
    bool round = true;
    bool f16 = false;  // f16 scales dequantized to f16 (kDequantF16)
  };
  std::vector<Case> cases;
  QuantWeight g32 = random_weight(Scheme::kW4A16AsymG32, 96, 2880);
  cases.push_back({"w4a16_asym_g32", g32});
  g32.zero_point = Tensor();
  cases.push_back({"w4a16_g32", g32});
  cases.push_back({"w8a16_asym_g64", random_weight(Scheme::kW8A16AsymG64, 96, 1024)});
  cases.push_back({"w8a16_int8_storage_g128", random_weight(Scheme::kW8A16Int8Storage, 96, 1024)});
  cases.push_back({"mxfp4", random_weight(Scheme::kMxfp4, 96, 2880)});
  cases.push_back({"nvfp4 rounded to bf16", random_weight(Scheme::kNvfp4, 96, 1024)});
  cases.push_back({"nvfp4 scaled in fp32", random_weight(Scheme::kNvfp4, 96, 1024), false});
  QuantWeight fp8 = random_weight(Scheme::kFp8Channel, 96, 1024);  // as weight-only (bf16 rounding)
  cases.push_back({"fp8 channel", fp8});
  MoeLayer act_order = with_act_order(random_layer(Scheme::kW4A16G128, {1, 1, 1024, 128}));
  cases.push_back({"w4a16_g128 act order", act_order.experts[0].w13});
  cases.push_back({"w8a16 packed, channel", random_weight(Scheme::kW8A16Channel, 96, 1024)});
  cases.push_back({"fp8 128 x 128 blocks, weight-only", random_weight(Scheme::kFp8Block, 96, 1024)});
  QuantWeight g96 = random_weight(Scheme::kW4A16AsymG32, 96, 2880);  // groups of 96: a division
  g96.group_size = 96;
  g96.scale = random_bf16({96, 2880 / 96}, 0.002f, 0.02f);
  g96.zero_point = Tensor();
  cases.push_back({"w4a16_g96", g96});
  QuantWeight g8 = random_weight(Scheme::kW4A16G128, 96, 1024);  // groups of 8: a scale per 8 columns
  g8.group_size = 8;
  g8.scale = random_bf16({96, 1024 / 8}, 0.002f, 0.02f);
  cases.push_back({"w4a16_g8", g8});
  cases.push_back({"w4a16_g128", random_weight(Scheme::kW4A16G128, 96, 1024)});
  cases.push_back({"w4a16 channel", random_weight(Scheme::kW4A16Channel, 96, 1024)});
  // Scales at the edges of the bit-level conversions: products that would leave bf16's normal range
  // take the float path (tiny and huge int4 scales, MXFP4 codes 0, 1 and 255 = +inf, NVFP4 NaNs).
  QuantWeight edges = random_weight(Scheme::kW4A16G128, 96, 1024);
  const float edge_scales[] = {1e-33f, -0.01f, 0x1p99f, 0x1p101f, 0.003f, -0x1p-99f, 0x1p-101f, 0x1p-130f, INFINITY};
  for (int64_t i = 0; i < edges.scale.numel(); ++i) edges.scale.data<uint16_t>()[i] = quant::float_to_bf16(edge_scales[i % 9]);
  cases.push_back({"w4a16_g128, scales at the edges", edges});
  QuantWeight mx_codes = random_weight(Scheme::kMxfp4, 96, 2880);
  for (int64_t i = 0; i < mx_codes.scale.numel(); ++i) mx_codes.scale.data<uint8_t>()[i] = static_cast<uint8_t>(i % 256);
  cases.push_back({"mxfp4, every scale code", mx_codes});
  QuantWeight nv_codes = random_weight(Scheme::kNvfp4, 96, 1024);
  for (int64_t i = 0; i < nv_codes.scale.numel(); ++i) nv_codes.scale.data<uint8_t>()[i] = static_cast<uint8_t>(i % 256);
  cases.push_back({"nvfp4 scaled in fp32, every scale code", nv_codes, false});
  cases.push_back({"nvfp4 rounded to bf16, every scale code", nv_codes});
  // f16 models: the integer and FP8 layouts above with f16 scales, to f16; f16 edge scales (products
  // that are subnormal in f16, or overflow it).
  for (size_t i = 0, n = cases.size(); i < n; ++i) {
    const QuantWeight& w = cases[i].w;
    if (w.format == WeightFormat::kMxfp4 || w.format == WeightFormat::kNvfp4 || w.scale.dtype() != DType::kBF16) continue;
    QuantWeight f16 = w;
    f16.scale = bf16_to_f16(w.scale);
    if (cases[i].name.find("edges") != std::string::npos) {
      const float f16_edges[] = {1e-7f, -0.01f, 3000.0f, 60000.0f, 0.003f, -6e-8f, 1e-5f, 65504.0f, INFINITY};
      for (int64_t j = 0; j < f16.scale.numel(); ++j) f16.scale.data<uint16_t>()[j] = quant::float_to_f16(f16_edges[j % 9]);
    }
    cases.push_back({cases[i].name + ", f16", f16, true, true});
  }
  // Bits equal, or both NaN (the GPU's NaN payloads may differ from the CPU's).
  auto is_nan = [](uint16_t b, bool f16) {
    return f16 ? (b & 0x7C00) == 0x7C00 && (b & 0x3FF) != 0 : (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0;
  };
  for (const Case& c : cases) {
    const GemmLayout L = gemm_layout_of(c.w, c.round);
    // NVFP4 scaled in fp32: e2m1 * fp8(s) (its global divisor comes after the GEMM).
    const bool times_global = dequant_divides_by_global_scale(L);
    if (c.f16)
      ASSERT_TRUE(dequantizes_to_f16_exactly(L)) << c.name;
    else
      ASSERT_TRUE(dequantizes_to_bf16_exactly(L) || times_global) << c.name;
    // Three experts of the same weights; expert 1 has no slots, so its part of the output stays
    // poisoned. The batch is experts [1, 3).
    std::vector<void*> owned;
    auto put = [&](const Tensor& t) -> void* {
      if (t.empty()) return nullptr;
      void* d = nullptr;
      EXPECT_EQ(cudaMalloc(&d, t.size_bytes()), cudaSuccess);
      cudaMemcpy(d, t.raw(), t.size_bytes(), cudaMemcpyHostToDevice);
      owned.push_back(d);
      return d;
    };
    cuda::ExpertTensors et;
    et.data = put(c.w.data);
    if (c.w.format == WeightFormat::kIntPacked)
      ASSERT_EQ(cuda::launch_codes_to_signed(static_cast<int32_t*>(const_cast<void*>(et.data)),
                                             static_cast<int64_t>(c.w.data.size_bytes() / 4), c.w.bits, nullptr),
                cudaSuccess);
    et.scale = put(c.w.scale);
    et.zero_point = static_cast<const int8_t*>(put(c.w.zero_point));
    et.g_idx = static_cast<const int32_t*>(put(c.w.g_idx));
    et.global_scale = c.w.global_scale;
    const cuda::ExpertTensors experts_host[3] = {et, et, et};
    const int32_t offsets_host[4] = {0, 5, 5, 9};
    void *experts, *offsets, *out;
    const size_t expert_bytes = sizeof(uint16_t) * c.w.rows * c.w.cols;
    ASSERT_EQ(cudaMalloc(&experts, sizeof(experts_host)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&offsets, sizeof(offsets_host)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out, 2 * expert_bytes), cudaSuccess);
    cudaMemcpy(experts, experts_host, sizeof(experts_host), cudaMemcpyHostToDevice);
    cudaMemcpy(offsets, offsets_host, sizeof(offsets_host), cudaMemcpyHostToDevice);
    cudaMemset(out, 0xFF, 2 * expert_bytes);
    cuda::DequantParams p;
    p.layout = L;
    p.experts = static_cast<const cuda::ExpertTensors*>(experts);
    p.expert_offsets = static_cast<const int32_t*>(offsets);
    p.first = 1;
    p.count = 2;
    p.out = static_cast<uint16_t*>(out);
    p.f16 = c.f16;
    ASSERT_EQ(cuda::launch_dequantize(p, nullptr), cudaSuccess);
    std::vector<uint16_t> got(2 * c.w.rows * c.w.cols);
    ASSERT_EQ(cudaMemcpy(got.data(), out, 2 * expert_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<float> row(c.w.cols);
    int64_t mismatches = 0, not_exact = 0, untouched = 0, specials = 0;
    for (int64_t r = 0; r < c.w.rows; ++r) {
      dequantize_row(c.w, r, c.round, row.data());
      if (times_global)
        for (int64_t k = 0; k < c.w.cols; ++k) {
          const uint8_t byte = c.w.data.data<uint8_t>()[r * (c.w.cols / 2) + k / 2];
          const uint8_t s8 = c.w.scale.data<uint8_t>()[r * (c.w.cols / c.w.group_size) + k / c.w.group_size];
          row[k] = quant::e2m1_to_float(k % 2 == 0 ? byte & 0xF : byte >> 4) * quant::fp8e4m3_to_float(s8);
        }
      for (int64_t k = 0; k < c.w.cols; ++k) {
        const uint16_t want = c.f16 ? quant::float_to_f16(row[k]) : quant::float_to_bf16(row[k]);
        const uint16_t have = got[c.w.rows * c.w.cols + r * c.w.cols + k];
        const float back = c.f16 ? quant::f16_to_float(want) : quant::bf16_to_float(want);
        not_exact += !is_nan(want, c.f16) && back != row[k];
        specials += is_nan(want, c.f16) || std::isinf(back) || (c.f16 && back != 0.0f && std::fabs(back) < 0x1p-14f);
        untouched += got[r * c.w.cols + k] != 0xFFFF;
        mismatches += have != want && !(is_nan(have, c.f16) && is_nan(want, c.f16));
      }
    }
    EXPECT_EQ(not_exact, 0) << c.name << ": the CPU's values are not all " << (c.f16 ? "f16s" : "bf16s");
    // The f16 edge scales must reach f16's specials (subnormals, infinities), or they test nothing.
    if (c.f16 && c.name.find("edges") != std::string::npos) EXPECT_GT(specials, 0) << c.name;
    EXPECT_EQ(untouched, 0) << c.name << ": an expert without slots was dequantized";
    EXPECT_EQ(mismatches, 0) << c.name << seed_note();
    for (void* d : owned) cudaFree(d);
    cudaFree(experts);
    cudaFree(offsets);
    cudaFree(out);
  }
}

TEST(DequantizedPrefill, MatchesTheCpuBackend) {
  REQUIRE_GPU();
  ForwardOptions prefill;
  prefill.gemm_path = GemmPath::kPrefill;
  struct Case {
    std::string name;
    MoeLayer layer;
  };
  std::vector<Case> cases;
  // (Groups of 32 and zero points in order have the 4-bit register kernel: W4Prefill.)
  const LayerShape qwen_like{16, 8, 2048, 768}, gpt_oss_like{8, 4, 2880, 1440};
  cases.push_back({"w8a16_asym_g64 H 2048", random_layer(Scheme::kW8A16AsymG64, qwen_like)});
  cases.push_back({"w4a16_g128 act order H 2048", with_act_order(random_layer(Scheme::kW4A16G128, qwen_like))});
  cases.push_back({"w4a16_asym_g32 act order H 2880", with_act_order(random_layer(Scheme::kW4A16AsymG32, gpt_oss_like))});
  // NVFP4 weight-only where k is not a multiple of 64 (else the 4-bit kernel takes it): the global
  // scale after the GEMM.
  cases.push_back({"nvfp4a16 (global scale after the GEMM) H 2080", random_layer(Scheme::kNvfp4, {8, 4, 2080, 1440})});
  for (const Case& c : cases) {
    const LayerGemmPlan plan = plan_layer_gemms(c.layer, 0, true);
    ASSERT_EQ(plan.g1, GroupedKernel::kDequantBf16) << c.name;
    ASSERT_EQ(plan.g2, GroupedKernel::kDequantBf16) << c.name;
    const int max_tokens = static_cast<int>(grouped_min_tokens(plan.g1, c.layer.num_experts, c.layer.top_k, c.layer.inter));
    const int64_t expert_bytes = int64_t{2} * c.layer.hidden * c.layer.inter * 2;  // w13's bf16 weights
    // (300 x top-8 over 16 experts, or x top-4 over 8: 150 rows each, the bf16 kernel's wide tile
    // on the dequantized batches.)
    for (int64_t tokens : {1, 7, 64, 300}) {
      Tensor x, logits;
      random_inputs(tokens, c.layer, x, logits);
      const Tensor want = make_backend("cpu")->forward(c.layer, x, logits, prefill);
      const int max_t = std::max<int>(max_tokens, static_cast<int>(tokens));
      // All experts in one batch, one expert per batch, and 3 per batch (a short last batch).
      for (int64_t workspace : {int64_t{1} << 30, expert_bytes, 3 * expert_bytes})
        expect_dequantized_prefill_matches_cpu(c.layer, x, logits, want, prefill, max_t, workspace,
                                               "prefill " + c.name + " tokens " + std::to_string(tokens) +
                                                   " batch " + std::to_string(dequant_batch_experts(expert_bytes,
                                                   c.layer.num_local_experts, workspace)));
      // The automatic path past the crossover, through the host API.
      if (tokens == 300) expect_cuda_matches_cpu(c.layer, x, logits, "auto " + c.name + " tokens 300");
    }
  }
}

// f16 models on the prefill path: unquantized f16 experts on the f16 kernel, symmetric INT4 g128 and
// INT8 on the mixed-input kernels in f16, GPTQ / AWQ-like layouts with f16 scales (groups of 32, zero
// points, act order) on the f16 kernel after dequantization to f16, eager and
// replayed (bit for bit), with every expert in one batch and one expert per batch; then the automatic
// path past the crossover.
TEST(DequantizedPrefill, HalfPrecisionModels) {
  REQUIRE_GPU();
  ForwardOptions prefill;
  prefill.gemm_path = GemmPath::kPrefill;
  const LayerShape shape{16, 4, 1024, 512};
  struct Case {
    std::string name;
    MoeLayer layer;
    GroupedKernel kernel;
  };
  std::vector<Case> cases;
  cases.push_back({"dense", random_layer(Scheme::kDense, shape), GroupedKernel::kF16});
  cases.push_back({"w4a16_g128", random_layer(Scheme::kW4A16G128, shape), GroupedKernel::kInt4F16});
  cases.push_back({"w4a16_g128 act order", with_act_order(random_layer(Scheme::kW4A16G128, shape)), GroupedKernel::kDequantF16});
  cases.push_back({"w4a16_asym_g32", random_layer(Scheme::kW4A16AsymG32, shape), GroupedKernel::kDequantF16});
  cases.push_back({"w8a16_asym_g64", random_layer(Scheme::kW8A16AsymG64, shape), GroupedKernel::kDequantF16});
  cases.push_back({"w8a16_int8_storage", random_layer(Scheme::kW8A16Int8Storage, shape), GroupedKernel::kInt8F16});
  cases.push_back({"w8a16 packed, channel", random_layer(Scheme::kW8A16Channel, shape), GroupedKernel::kInt8F16});
  for (Case& c : cases) {
    c.layer = as_f16_model(std::move(c.layer));
    const LayerGemmPlan plan = plan_layer_gemms(c.layer, 1, true);
    ASSERT_EQ(plan.g1, c.kernel) << c.name;
    ASSERT_EQ(plan.g2, c.kernel) << c.name;
    const int64_t expert_bytes = int64_t{2} * c.layer.hidden * c.layer.inter * 2;  // w13's f16 weights
    for (int64_t tokens : {3, 540}) {  // (540 x top-4 over 16 experts: 135 rows each, the wide tile)
      Tensor x, logits;
      random_inputs(tokens, c.layer, x, logits);
      x = bf16_to_f16(x);
      const Tensor want = make_backend("cpu")->forward(c.layer, x, logits, prefill);
      const int max_t = std::max<int>(static_cast<int>(tokens), 540);
      // (All experts in one dequantization batch and one per batch; one run for the other kernels.)
      std::vector<int64_t> workspaces = {int64_t{1} << 30};
      if (dequantizes_to_workspace(c.kernel)) workspaces.push_back(expert_bytes);
      for (int64_t workspace : workspaces)
        expect_dequantized_prefill_matches_cpu(c.layer, x, logits, want, prefill, max_t, workspace,
                                               "f16 prefill " + c.name + " tokens " + std::to_string(tokens) +
                                                   " batch " + std::to_string(dequant_batch_experts(expert_bytes,
                                                   c.layer.num_local_experts, workspace)));
      if (tokens != 540) continue;
      // The automatic path: against the CPU, and bit for bit the forced prefill path's output (so it
      // ran the prefill kernels: the decode kernels' output differs, which is checked too).
      expect_cuda_matches_cpu(c.layer, x, logits, "f16 auto " + c.name + " tokens 540");
      const CudaMoeLayer dev(c.layer, max_t);
      Tensor by_path[3], replay;
      ForwardOptions decode = prefill, automatic = prefill;
      decode.gemm_path = GemmPath::kDecode;
      automatic.gemm_path = GemmPath::kAuto;
      forward_eager_and_replayed(dev, x, logits, automatic, 1, &by_path[0], &replay);
      forward_eager_and_replayed(dev, x, logits, prefill, 1, &by_path[1], &replay);
      forward_eager_and_replayed(dev, x, logits, decode, 1, &by_path[2], &replay);
      if (by_path[2].empty()) return;  // a failed assertion above
      EXPECT_EQ(0, std::memcmp(by_path[0].raw(), by_path[1].raw(), by_path[0].size_bytes()))
          << c.name << ": the automatic path at 540 tokens did not run the prefill kernels";
      EXPECT_NE(0, std::memcmp(by_path[2].raw(), by_path[1].raw(), by_path[2].size_bytes()))
          << c.name << ": decode and prefill outputs are identical, so the check above proves nothing";
    }
  }
}

// expect_device_layer_matches against the CPU backend's forward of dev.layer().
void expect_device_layer_matches_cpu(const CudaMoeLayer& dev, const Tensor& x, const Tensor& logits,
                                     const ForwardOptions& options, bool repacked_copy, const std::string& what) {
  const Tensor want = make_backend("cpu")->forward(dev.layer(), x, logits, options);
  expect_device_layer_matches(dev, x, logits, want, options, repacked_copy, what);
}

// Without a repacked copy (CudaMoeLayer's repacked_copy false) the register kernel's layers keep one
// copy of their weights and take the CUTLASS or dequantized routes (plan_grouped_kernel), eager and
// graph-replayed, against the CPU; a zero budget plans the same (repacked_copy_possible).
TEST(RepackedCopy, OffKeepsOneCopyAndMatchesTheCpuBackend) {
  REQUIRE_GPU();
  struct Case {
    Scheme scheme;
    GroupedKernel without;
  };
  for (const Case& c : {Case{Scheme::kW4A16G128, GroupedKernel::kInt4Bf16}, Case{Scheme::kW4A16Channel, GroupedKernel::kInt4Bf16},
                        Case{Scheme::kW4A16AsymG32, GroupedKernel::kDequantBf16}, Case{Scheme::kMxfp4, GroupedKernel::kDequantBf16},
                        Case{Scheme::kNvfp4, GroupedKernel::kDequantBf16}, Case{Scheme::kW4A8Int8, GroupedKernel::kInt4Codes},
                        Case{Scheme::kW4A8Int8Channel, GroupedKernel::kInt4Codes}}) {
    const MoeLayer layer = random_layer(c.scheme, {16, 8, 2048, 768});
    const std::string name = name_of(c.scheme);
    ASSERT_TRUE(dequantizes_in_registers(plan_prefill_kernels(layer).g1)) << name;
    const LayerGemmPlan off = plan_prefill_kernels(layer, false);
    ASSERT_EQ(off.g1, c.without) << name;
    ASSERT_EQ(off.g2, c.without) << name;
    int64_t min_tokens = 0;
    for (auto [g, L] : {std::pair{off.g1, &off.w13}, std::pair{off.g2, &off.w2}})
      min_tokens = std::max(min_tokens, grouped_min_tokens(g, layer.num_experts, layer.top_k, layer.inter, has_row_scales(*L)));
    const int max_t = static_cast<int>(std::max<int64_t>(min_tokens, 300));
    const CudaMoeLayer with_copy(layer, max_t);
    const CudaMoeLayer one_copy(layer, max_t, CudaMoeLayer::kDefaultDequantWorkspaceBytes, false);
    int64_t checkpoint_bytes = 0;  // (the device's codes, scales and zero points as loaded)
    for (const ExpertWeights& ew : layer.experts)
      for (const QuantWeight* w : {&ew.w13, &ew.w2})
        checkpoint_bytes += static_cast<int64_t>(w->data.size_bytes() + w->scale.size_bytes() + w->zero_point.size_bytes());
    EXPECT_EQ(one_copy.device_weight_bytes(), checkpoint_bytes) << name;
    EXPECT_GT(with_copy.device_weight_bytes(), checkpoint_bytes + checkpoint_bytes / 2) << name;
    ForwardOptions prefill;
    prefill.gemm_path = GemmPath::kPrefill;
    for (int64_t tokens : {int64_t{7}, int64_t{300}}) {
      Tensor x, logits;
      random_inputs(tokens, layer, x, logits);
      expect_device_layer_matches_cpu(one_copy, x, logits, prefill, false, "one copy " + name + " tokens " + std::to_string(tokens));
    }
    // A zero budget: no copy either; the CUTLASS kernels still run, the dequantized path does not.
    const CudaMoeLayer zero_budget(layer, max_t, 0);
    EXPECT_EQ(zero_budget.device_weight_bytes(), checkpoint_bytes) << name;
    Tensor x, logits;
    random_inputs(300, layer, x, logits);
    if (dequantizes_to_workspace(c.without))  // (checked before any launch or pointer use)
      EXPECT_THROW(zero_budget.forward(nullptr, DType::kBF16, nullptr, nullptr, 300, nullptr, prefill), NotSupported)
          << name;
    else
      expect_device_layer_matches_cpu(zero_budget, x, logits, prefill, false, "zero budget " + name + " tokens 300");
  }
  // CUTLASS's W4A16 kernel, which only layers without the copy (or with k not a multiple of 64) run
  // since the register kernel took W4A16 g128: every tile forced, all tokens on two experts (the
  // others empty), an expert map.
  const MoeLayer g128 = random_layer(Scheme::kW4A16G128, {8, 2, 512, 256});
  const CudaMoeLayer one_copy(g128, 400, CudaMoeLayer::kDefaultDequantWorkspaceBytes, false);
  ASSERT_EQ(plan_prefill_kernels(g128, false).g1, GroupedKernel::kInt4Bf16);
  Tensor x, logits;
  random_inputs(400, g128, x, logits);
  for (int t = 0; t < kGroupedTiles; ++t) {
    if (!grouped_tile_built(GroupedKernel::kInt4Bf16, static_cast<GroupedTile>(t))) continue;
    ForwardOptions tile;
    tile.gemm_path = GemmPath::kPrefill;
    tile.prefill_tile = t;
    expect_device_layer_matches_cpu(one_copy, x, logits, tile, false,
                                    "one copy w4a16_g128 tile " + to_string(static_cast<GroupedTile>(t)));
  }
  for (int64_t i = 0; i < 400; ++i) {
    logits.data<float>()[i * 8 + 3] = 30.0f;
    logits.data<float>()[i * 8 + 5] = 29.0f;
  }
  ForwardOptions prefill;
  prefill.gemm_path = GemmPath::kPrefill;
  expect_device_layer_matches_cpu(one_copy, x, logits, prefill, false, "one copy w4a16_g128 on experts 3 and 5");
  MoeLayer ep = g128;
  ep.expert_map = {-1, 0, -1, 1, -1, 2, -1, 3};
  ep.num_local_experts = 4;
  ep.experts.resize(4);
  const CudaMoeLayer ep_one_copy(ep, 400, CudaMoeLayer::kDefaultDequantWorkspaceBytes, false);
  random_inputs(129, ep, x, logits);
  expect_device_layer_matches_cpu(ep_one_copy, x, logits, prefill, false, "one copy w4a16_g128 expert map");
  // Through the Backend interface (qmoe run --no-repacked-copy): BackendOptions::repacked_copy
  // reaches the layer, so its forward is the one-copy layer's bit for bit, and not the register
  // kernel's (W4A8-INT8: without the copy its weights are rounded to bf16; W4A16's two kernels can
  // agree bit for bit).
  const MoeLayer big = random_layer(Scheme::kW4A8Int8, {16, 8, 2048, 768});
  random_inputs(300, big, x, logits);
  BackendOptions one;
  one.repacked_copy = false;
  const Tensor by_backend = make_backend("cuda", one)->forward(big, x, logits, prefill);
  const Tensor with_copy = make_backend("cuda")->forward(big, x, logits, prefill);
  Tensor by_layer, replayed;
  forward_eager_and_replayed(CudaMoeLayer(big, 300, CudaMoeLayer::kDefaultDequantWorkspaceBytes, false), x, logits,
                             prefill, 1, &by_layer, &replayed);
  ASSERT_EQ(by_backend.size_bytes(), by_layer.size_bytes());
  EXPECT_EQ(0, std::memcmp(by_backend.raw(), by_layer.raw(), by_layer.size_bytes()));
  EXPECT_NE(0, std::memcmp(by_backend.raw(), with_copy.raw(), with_copy.size_bytes()))
      << "the backend's one-copy forward equals the register kernel's: the option did not reach the layer";
  const Tensor want = make_backend("cpu")->forward(big, x, logits, prefill);
  EXPECT_LE(compare_outputs(by_backend, want).rel_l2, tolerance_rel_l2(big, prefill, Comparison::kCudaVsReference, 300, false));
}

// W4A16 with groups of 128 or channel scales on a layer with the repacked copy: the automatic path
// runs the decode kernels below the register kernel's crossover (repacked_copy_from_tokens) and the
// register kernel from it; CUTLASS's mixed-input kernel on the checkpoint's codes runs on a layer
// without the copy (and on a GEMM whose k is not a multiple of 64, from its own crossover). A layer
// sized below the crossover makes no copy, and a forced prefill path there says so before anything
// runs. (The kernels' outputs may agree bit for bit, so CudaMoeLayer::forward_kernels says which
// ran.)
TEST(RepackedCopy, W4A16TakesTheRegisterKernelFromItsCrossover) {
  REQUIRE_GPU();
  const std::string mixed = to_string(GroupedKernel::kInt4Bf16), regs = to_string(GroupedKernel::kInt4RegsBf16);
  using Kernels = std::pair<std::string, std::string>;
  // `w2_above`: w2's prefill kernel (channel scales at inter 544, k not a multiple of 64: CUTLASS's
  // kernel, from its own crossover).
  auto check = [&](const std::string& name, const MoeLayer& layer, const std::string& w2_above) {
    const int64_t from = repacked_copy_from_tokens(layer);
    const LayerGemmPlan with = plan_prefill_kernels(layer, true), without = plan_prefill_kernels(layer, false);
    ASSERT_EQ(with.g1, GroupedKernel::kInt4RegsBf16) << name;
    ASSERT_EQ(without.g1, GroupedKernel::kInt4Bf16) << name;
    const int64_t mixed_from = grouped_min_tokens(GroupedKernel::kInt4Bf16, layer.num_experts, layer.top_k, layer.inter,
                                                  has_row_scales(without.w13));
    ASSERT_LT(from + 8, mixed_from) << name;  // (the batches below: in order, and distinct)
    // Each GEMM on its plan's prefill kernel from that kernel's own crossover.
    auto on = [&](GroupedKernel g, const GemmLayout& gemm, int64_t tokens) {
      return use_grouped_kernel(g, tokens, layer.num_experts, layer.top_k, layer.inter, has_row_scales(gemm))
                 ? to_string(g)
                 : std::string("decode");
    };
    const int max_t = static_cast<int>(mixed_from + 40);
    const CudaMoeLayer with_copy(layer, max_t);
    const CudaMoeLayer one_copy(layer, max_t, CudaMoeLayer::kDefaultDequantWorkspaceBytes, false);
    const CudaMoeLayer below(layer, static_cast<int>(from - 1));
    EXPECT_EQ(below.device_weight_bytes(), one_copy.device_weight_bytes()) << name;
    EXPECT_GT(with_copy.device_weight_bytes(), one_copy.device_weight_bytes()) << name;
    ForwardOptions automatic, prefill;
    prefill.gemm_path = GemmPath::kPrefill;
    for (int64_t tokens : {from - 1, from, mixed_from - 1, mixed_from, mixed_from + 40}) {
      Tensor x, logits;
      random_inputs(tokens, layer, x, logits);
      const int t = static_cast<int>(tokens);
      const std::string what = name + ", " + std::to_string(tokens) + " tokens";
      const Kernels expected(on(with.g1, with.w13, tokens), on(with.g2, with.w2, tokens));
      EXPECT_EQ(expected.first, tokens < from ? "decode" : regs) << what;
      EXPECT_EQ(with_copy.forward_kernels(t, DType::kBF16, automatic), expected) << what;
      EXPECT_EQ(with_copy.forward_kernels(t, DType::kBF16, prefill), Kernels(regs, w2_above)) << what;
      expect_device_layer_matches_cpu(with_copy, x, logits, automatic, true, what + " auto");
      const Kernels expected_one(on(without.g1, without.w13, tokens), on(without.g2, without.w2, tokens));
      EXPECT_EQ(expected_one.first, tokens < mixed_from ? "decode" : mixed) << what;
      EXPECT_EQ(one_copy.forward_kernels(t, DType::kBF16, automatic), expected_one) << what << " without the copy";
      expect_device_layer_matches_cpu(one_copy, x, logits, automatic, true, what + " auto without the copy");
    }
    // f32 hidden states are not 16-bit rows: the decode kernels at every batch.
    EXPECT_EQ(with_copy.forward_kernels(max_t, DType::kF32, automatic), Kernels("decode", "decode")) << name;
    // Sized below the crossover: decode, and a forced prefill path says so before anything runs.
    EXPECT_EQ(below.forward_kernels(static_cast<int>(from - 1), DType::kBF16, automatic), Kernels("decode", "decode"))
        << name;
    EXPECT_THROW(below.forward(nullptr, DType::kBF16, nullptr, nullptr, 1, nullptr, prefill), NotSupported) << name;
  };
  const MoeLayer g128 = random_layer(Scheme::kW4A16G128, {8, 2, 1024, 512});
  check("w4a16_g128", g128, regs);
  check("w4a16 channel, w2 k 544", random_layer(Scheme::kW4A16Channel, {8, 2, 1024, 544}), mixed);
  // An expert map (four of eight experts local) just past the crossover.
  MoeLayer ep = g128;
  ep.expert_map = {-1, 0, -1, 1, -1, 2, -1, 3};
  ep.num_local_experts = 4;
  ep.experts.resize(4);
  const int64_t from = repacked_copy_from_tokens(ep);
  const CudaMoeLayer ep_layer(ep, static_cast<int>(from + 40));
  Tensor x, logits;
  random_inputs(from + 4, ep, x, logits);
  ForwardOptions automatic;
  EXPECT_EQ(ep_layer.forward_kernels(static_cast<int>(x.dim(0)), DType::kBF16, automatic), Kernels(regs, regs));
  expect_device_layer_matches_cpu(ep_layer, x, logits, automatic, true, "w4a16_g128 expert map, the register kernel");
}

// MXFP4, NVFP4 weight-only and INT4 (groups of 128 and 32, channel scales, zero points) on the 4-bit
// register kernel (codes repacked at load, dequantized in registers): both tiles, forced and by the
// planner, weight rows that are not whole 128-row tiles (gpt-oss's 2880), biases, layers whose w2 takes the dequantized path instead, eager and
// graph-replayed, and the automatic path past the crossover.
TEST(W4Prefill, MatchesTheCpuBackend) {
  REQUIRE_GPU();
  struct Case {
    std::string name;
    MoeLayer layer;
  };
  std::vector<Case> cases;
  cases.push_back({"mxfp4 H 2048", random_layer(Scheme::kMxfp4, {16, 8, 2048, 768})});
  // A gated activation the GEMM1 epilogue does not apply: GEMM1 on the interleaved w13 writes D in
  // source order, then the activation kernel.
  cases.push_back({"mxfp4 H 2048 gelu_tanh (not fused)", random_layer(Scheme::kMxfp4, {16, 8, 2048, 768}, Activation::kGeluTanh)});
  // gpt-oss-like (swigluoai fused with biases): w2's 2880 rows are 22.5 tiles (inter 704: k a
  // multiple of 64).
  MoeLayer gpt_oss = random_layer(Scheme::kMxfp4, {8, 4, 2880, 704}, Activation::kSwigluOai);
  std::uniform_real_distribution<float> d(-0.5f, 0.5f);
  for (ExpertWeights& ew : gpt_oss.experts)
    for (auto [w, bias] : {std::pair{&ew.w13, &ew.w13_bias}, std::pair{&ew.w2, &ew.w2_bias}}) {
      *bias = Tensor(DType::kF32, {w->rows});
      for (int64_t i = 0; i < w->rows; ++i) bias->data<float>()[i] = d(rng());
    }
  cases.push_back({"mxfp4 H 2880 swigluoai with biases", gpt_oss});
  // inter 1440 (k not a multiple of 64): w2 on the dequantized path, w13 on this kernel.
  cases.push_back({"mxfp4 H 2880 I 1440 (w2 dequantized)", random_layer(Scheme::kMxfp4, {8, 4, 2880, 1440})});
  // INT4 with groups of 128 and channel scales (W4A16's common schemes).
  cases.push_back({"w4a16_g128 H 2048", random_layer(Scheme::kW4A16G128, {16, 8, 2048, 768})});
  cases.push_back({"w4a16 channel H 2048", random_layer(Scheme::kW4A16Channel, {16, 8, 2048, 768})});
  // INT4 with zero points per group of 128 and per row: the wide scale layout (a word per k-tile).
  for (Scheme s : {Scheme::kW4A16G128, Scheme::kW4A16Channel}) {
    MoeLayer asym = random_layer(s, {16, 8, 2048, 768});
    for (ExpertWeights& ew : asym.experts)
      for (QuantWeight* w : {&ew.w13, &ew.w2}) {
        w->zero_point = Tensor(DType::kI8, {w->rows, w->scale.dim(1)});
        for (int64_t i = 0; i < w->zero_point.numel(); ++i)
          w->zero_point.data<int8_t>()[i] = static_cast<int8_t>(rng()() % 16) - 8;
      }
    cases.push_back({std::string(s == Scheme::kW4A16G128 ? "w4a16_asym_g128" : "w4a16 asym channel") + " H 2048", asym});
  }
  // INT4 with groups of 32 (Kimi-K2's scheme) and with zero points.
  for (LayerShape shape : {LayerShape{16, 8, 2048, 768}, LayerShape{8, 4, 2880, 1440}}) {
    const std::string h = " H " + std::to_string(shape.hidden) + (shape.inter % 64 ? " (w2 dequantized)" : "");
    MoeLayer g32 = random_layer(Scheme::kW4A16AsymG32, shape);
    cases.push_back({"w4a16_asym_g32" + h, g32});
    for (ExpertWeights& ew : g32.experts) ew.w13.zero_point = ew.w2.zero_point = Tensor();
    cases.push_back({"w4a16_g32 (Kimi-K2's scheme)" + h, g32});
  }
  // NVFP4 weight-only (its global scale divides the sums in the kernel's epilogue; on the
  // dequantized path after the GEMM).
  cases.push_back({"nvfp4a16 H 2048", random_layer(Scheme::kNvfp4, {16, 8, 2048, 768})});
  cases.push_back({"nvfp4a16 H 2880 I 1440 (w2 dequantized)", random_layer(Scheme::kNvfp4, {8, 4, 2880, 1440})});
  for (const Case& c : cases) {
    const LayerGemmPlan plan = plan_layer_gemms(c.layer, 0, true);
    const WeightFormat format = c.layer.experts[0].w13.format;
    const GroupedKernel fp4 = format == WeightFormat::kNvfp4   ? GroupedKernel::kNvfp4Bf16
                              : format == WeightFormat::kMxfp4 ? GroupedKernel::kMxfp4Bf16
                                                               : GroupedKernel::kInt4RegsBf16;
    ASSERT_EQ(plan.g1, fp4) << c.name;
    ASSERT_EQ(plan.g2, c.layer.inter % 64 == 0 ? fp4 : GroupedKernel::kDequantBf16) << c.name;
    const int min_tokens = static_cast<int>(std::max({grouped_min_tokens(plan.g1, c.layer.num_experts, c.layer.top_k, c.layer.inter),
                                                      grouped_min_tokens(plan.g2, c.layer.num_experts, c.layer.top_k, c.layer.inter),
                                                      repacked_copy_from_tokens(c.layer)}));
    // 1 and 7 tokens (a few rows on a few experts), 64, then ~142 rows per expert: the planner's
    // 192-row tile; the 128- and 256-row ones forced.
    const int64_t large = int64_t{kMxfp4Tiles.max_rows_for_128} * c.layer.num_experts / c.layer.top_k + 45;
    for (int64_t tokens : {int64_t{1}, int64_t{7}, int64_t{64}, large}) {
      Tensor x, logits;
      random_inputs(tokens, c.layer, x, logits);
      const int max_t = std::max<int>(min_tokens, static_cast<int>(tokens));
      ForwardOptions prefill;
      prefill.gemm_path = GemmPath::kPrefill;
      const Tensor want = make_backend("cpu")->forward(c.layer, x, logits, prefill);
      for (int tile : {-1, static_cast<int>(GroupedTile::kSmall), static_cast<int>(GroupedTile::kLarge)}) {
        prefill.prefill_tile = tile;
        expect_dequantized_prefill_matches_cpu(c.layer, x, logits, want, prefill, max_t, int64_t{1} << 30,
                                               "prefill " + c.name + " tokens " + std::to_string(tokens) + " tile " +
                                                   (tile < 0 ? "planned" : to_string(static_cast<GroupedTile>(tile))));
      }
      if (tokens == large) expect_cuda_matches_cpu(c.layer, x, logits, "auto " + c.name + " tokens " + std::to_string(tokens));
    }
  }
  // Forcing the path on a layer whose copy was not made (max_tokens below the crossover) says so
  // before anything runs.
  const MoeLayer& layer = cases[0].layer;
  const int64_t min_tokens = grouped_min_tokens(GroupedKernel::kMxfp4Bf16, layer.num_experts, layer.top_k, layer.inter);
  Tensor x, logits;
  random_inputs(4, layer, x, logits);
  ForwardOptions prefill;
  prefill.gemm_path = GemmPath::kPrefill;
  ASSERT_GT(min_tokens, 4);
  try {
    make_backend("cuda")->forward(layer, x, logits, prefill);  // (a layer for 4 tokens)
    ADD_FAILURE() << "forced MXFP4 prefill without its repacked copy ran";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("repacked copy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_tokens >= " + std::to_string(min_tokens)), std::string::npos) << e.what();
  }
}

// Edges (in the memcheck list of tools/gpu_test.sh): all tokens on two experts, an expert map with
// non-local experts (forced and automatic; MXFP4: its own kernel), a forced path without a workspace.
TEST(DequantizedPrefill, EdgeCases) {
  REQUIRE_GPU();
  const ForwardOptions defaults;
  ForwardOptions prefill;
  prefill.gemm_path = GemmPath::kPrefill;
  // (Act order: groups of 32 and zero points now have the 4-bit register kernel.)
  MoeLayer one = with_act_order(random_layer(Scheme::kW4A16AsymG32, {8, 2, 512, 256}));
  ASSERT_EQ(plan_layer_gemms(one, 0, true).g1, GroupedKernel::kDequantBf16);
  const int max_tokens = static_cast<int>(grouped_min_tokens(GroupedKernel::kDequantBf16, 8, 2, one.inter));
  Tensor x, logits;
  random_inputs(200, one, x, logits);
  for (int64_t t = 0; t < 200; ++t) {
    logits.data<float>()[t * 8 + 3] = 30.0f;
    logits.data<float>()[t * 8 + 5] = 29.0f;
  }
  auto cpu = make_backend("cpu");
  expect_dequantized_prefill_matches_cpu(one, x, logits, cpu->forward(one, x, logits, prefill), prefill, max_tokens,
                                         int64_t{1} << 20, "prefill w4a16_asym_g32 act order all tokens on experts 3 and 5");
  MoeLayer ep = random_layer(Scheme::kMxfp4, {8, 2, 512, 256});
  ep.expert_map = {-1, 0, -1, 1, -1, 2, -1, 3};
  ep.num_local_experts = 4;
  ep.experts.resize(4);
  random_inputs(150, ep, x, logits);
  expect_dequantized_prefill_matches_cpu(ep, x, logits, cpu->forward(ep, x, logits, prefill), prefill, max_tokens,
                                         int64_t{1} << 20, "prefill mxfp4 expert map");
  const int past = max_tokens + 37;  // past the crossover
  random_inputs(past, ep, x, logits);
  const Tensor want = cpu->forward(ep, x, logits, defaults);
  expect_dequantized_prefill_matches_cpu(ep, x, logits, want, defaults, past, int64_t{1} << 20,
                                         "auto mxfp4 expert map past the crossover");
  // Which path ran, bit for bit: past the crossover the automatic path is the forced prefill one;
  // with a zero budget (no workspace) it is the decode kernels'.
  ForwardOptions decode;
  decode.gemm_path = GemmPath::kDecode;
  auto device_forward = [&](const ForwardOptions& options, int64_t budget) {
    CudaMoeLayer dev(ep, past, budget);
    Tensor eager, replay;
    forward_eager_and_replayed(dev, x, logits, options, 1, &eager, &replay);
    return eager;
  };
  const Tensor auto_out = device_forward(defaults, int64_t{1} << 20);
  const Tensor prefill_out = device_forward(prefill, int64_t{1} << 20);
  const Tensor no_workspace_out = device_forward(defaults, 0);
  const Tensor decode_out = device_forward(decode, 0);
  ASSERT_FALSE(auto_out.empty() || prefill_out.empty() || no_workspace_out.empty() || decode_out.empty());
  EXPECT_EQ(0, std::memcmp(auto_out.raw(), prefill_out.raw(), auto_out.size_bytes())) << "auto past the crossover";
  EXPECT_EQ(0, std::memcmp(no_workspace_out.raw(), decode_out.raw(), decode_out.size_bytes())) << "zero budget";
  // (The two paths' sums differ in order; were every bit equal here, the checks above would not
  // tell them apart, which says nothing against the code.)
  if (std::memcmp(prefill_out.raw(), decode_out.raw(), decode_out.size_bytes()) == 0)
    std::printf("    note: prefill and decode paths gave identical bits on this input\n");
  // Forcing the path on a layer whose workspace was not allocated (max_tokens below the crossover)
  // says so before anything runs.
  random_inputs(4, one, x, logits);
  try {
    make_backend("cuda")->forward(one, x, logits, prefill);
    ADD_FAILURE() << "forced dequantized prefill without a workspace ran";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("max_tokens >= " + std::to_string(max_tokens)), std::string::npos) << e.what();
  }
}

// Biases (gpt-oss) on the prefill kernels: added to the sorted output rows after each GEMM.
TEST(PrefillKernels, BiasesAreAddedAfterTheGemm) {
  REQUIRE_GPU();
  ForwardOptions prefill;
  prefill.gemm_path = GemmPath::kPrefill;
  for (Scheme s : {Scheme::kMxfp4, Scheme::kNvfp4, Scheme::kFp8Channel, Scheme::kDense, Scheme::kW4A16G128}) {
    MoeLayer layer = random_layer(s, {8, 4, 1024, 512});
    std::uniform_real_distribution<float> d(-0.5f, 0.5f);
    for (ExpertWeights& ew : layer.experts)
      for (auto [w, bias] : {std::pair{&ew.w13, &ew.w13_bias}, std::pair{&ew.w2, &ew.w2_bias}}) {
        *bias = Tensor(DType::kF32, {w->rows});
        for (int64_t i = 0; i < w->rows; ++i) bias->data<float>()[i] = d(rng());
      }
    const LayerGemmPlan plan = plan_layer_gemms(layer, 0, true);
    ASSERT_NE(plan.g1, GroupedKernel::kNone) << name_of(s);
    Tensor x, logits;
    random_inputs(200, layer, x, logits);
    const std::string what = std::string("prefill ") + name_of(s) + " with biases";
    if (plan.g1 == GroupedKernel::kDequantBf16)
      expect_dequantized_prefill_matches_cpu(layer, x, logits, make_backend("cpu")->forward(layer, x, logits, prefill),
                                             prefill, std::max<int>(200, static_cast<int>(grouped_min_tokens(plan.g1, 8, 4, layer.inter))),
                                             int64_t{1} << 30, what);  // a workspace: max_tokens past the crossover
    else
      expect_cuda_matches_cpu(layer, x, logits, what, GemmPath::kPrefill);
  }
}

TEST(PrefillKernels, SchemesWithoutOneSayNotSupported) {
  REQUIRE_GPU();
  const MoeLayer layer = random_layer(Scheme::kNvfp4ExactW4A4, {8, 2, 512, 256});
  Tensor x, logits;
  random_inputs(4, layer, x, logits);
  ForwardOptions options;
  options.gemm_path = GemmPath::kPrefill;
  auto gpu = make_backend("cuda");
  EXPECT_THROW(gpu->forward(layer, x, logits, options), NotSupported);
}

// ---- routing bit for bit -----------------------------------------------------------------------

// The grouping's outputs in device memory: counts [local experts] (the multi-launch path's, zeroed
// by it), offsets [local experts + 1], sorted slots and slot experts [slots], and the chunks (their
// count, then the list: GroupingParams::num_chunks, chunks).
struct GroupingBuffers {
  int32_t *counts, *offsets, *sorted, *slot_expert, *chunks;
};
cuda::GroupingParams grouping_params(const int32_t* ids, const int32_t* map, int num_slots, int num_experts,
                                     int local_experts, const GroupingBuffers& b) {
  cuda::GroupingParams g;
  g.ids = ids;
  g.expert_map = map;
  g.num_slots = num_slots;
  g.num_experts = num_experts;
  g.num_local_experts = local_experts;
  g.counts = b.counts;
  g.expert_offsets = b.offsets;
  g.sorted_slots = b.sorted;
  g.slot_expert = b.slot_expert;
  g.num_chunks = b.chunks;
  g.chunks = b.chunks + 1;
  return g;
}

TEST(CudaRouting, IdsAndWeightsAreIdenticalToTheCpu) {
  REQUIRE_GPU();
  struct Case {
    int experts, top_k;
    RoutingConfig cfg;
    bool bias;
  };
  const std::vector<Case> cases = {
      {128, 8, {Scoring::kSoftmax, true, 0, 0, 1.0f, false, false}, false},
      {8, 2, {Scoring::kSoftmax, false, 0, 0, 1.0f, false, false}, false},
      {256, 8, {Scoring::kSigmoid, true, 8, 4, 2.5f, false, false}, true},
      {384, 8, {Scoring::kSigmoid, true, 1, 1, 2.827f, false, false}, true},
      {160, 6, {Scoring::kSoftmax, true, 8, 3, 16.0f, false, false}, false},
      {16, 1, {Scoring::kSigmoid, false, 0, 0, 1.0f, true, true}, false},
      // The limits and the rest of the variants: 512 experts; top-k = all 32 experts; Llama-4 with
      // top-k > 1; softmax with a bias; 64 groups all kept.
      {512, 8, {Scoring::kSigmoid, true, 0, 0, 1.0f, false, false}, true},
      {32, 32, {Scoring::kSoftmax, true, 0, 0, 1.0f, false, false}, false},
      {16, 3, {Scoring::kSigmoid, false, 0, 0, 1.0f, false, true}, false},
      {64, 6, {Scoring::kSoftmax, false, 0, 0, 1.0f, false, false}, true},
      {256, 8, {Scoring::kSigmoid, true, 64, 64, 1.0f, false, false}, true},
  };
  for (const Case& c : cases) {
    const int T = 333;
    std::vector<float> logits(static_cast<size_t>(T) * c.experts), bias(c.experts);
    std::normal_distribution<float> d(0.0f, 2.0f);
    for (float& v : logits) v = d(rng());
    for (int t = 0; t < T; t += 7) logits[t * c.experts + 1] = logits[t * c.experts];  // exact ties
    for (int t = 2; t < T; t += 13) {  // -0 and +0 on top (equal values: the lower index first)
      float* row = logits.data() + t * c.experts;
      for (int e = 0; e < c.experts; ++e) row[e] = -std::fabs(row[e]) - 1.0f;
      row[2] = -0.0f;
      row[3] = 0.0f;
    }
    for (float& v : bias) v = 0.1f * d(rng());
    const routing::TopK want = routing::route(logits.data(), T, c.experts, c.top_k, c.cfg, c.bias ? bias.data() : nullptr);

    float *d_logits, *d_bias, *d_weights;
    int32_t* d_ids;
    ASSERT_EQ(cudaMalloc(&d_logits, logits.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_bias, bias.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_ids, want.ids.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_weights, want.ids.size() * 4), cudaSuccess);
    cudaMemcpy(d_logits, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_bias, bias.data(), bias.size() * 4, cudaMemcpyHostToDevice);
    cuda::RoutingParams p;
    p.logits = d_logits;
    p.correction_bias = c.bias ? d_bias : nullptr;
    p.num_tokens = T;
    p.num_experts = c.experts;
    p.top_k = c.top_k;
    p.scoring = static_cast<int>(c.cfg.scoring);
    p.renormalize = c.cfg.renormalize;
    p.num_expert_group = c.cfg.num_expert_group;
    p.topk_group = c.cfg.topk_group;
    p.routed_scaling_factor = c.cfg.routed_scaling_factor;
    p.custom_llama4 = c.cfg.custom_llama4;
    p.ids = d_ids;
    p.weights = d_weights;
    ASSERT_EQ(cuda::launch_routing(p, nullptr), cudaSuccess);
    std::vector<int32_t> ids(want.ids.size());
    std::vector<float> weights(want.ids.size());
    ASSERT_EQ(cudaMemcpy(ids.data(), d_ids, ids.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaMemcpy(weights.data(), d_weights, weights.size() * 4, cudaMemcpyDeviceToHost);
    EXPECT_EQ(ids, want.ids) << c.experts << " experts";
    EXPECT_EQ(0, std::memcmp(weights.data(), want.weights.data(), weights.size() * 4)) << c.experts << " experts";

    // Decode batches route and group in one launch (up to 8 tokens; 9 takes the two kernels): the
    // first tokens' ids and weights (poisoned first), then the grouping checked against the ids
    // (each expert's segment holds exactly its slots; the chunks of the experts with slots, ascending).
    // 1, 2, 3 and 5-8 tokens: teams of 32, 16, 8 and 4 warps per token.
    for (const int T_small : {1, 2, 3, 5, 8, 9}) {
      const int S = T_small * c.top_k, E = c.experts;
      std::vector<int32_t> map(E);
      for (int e = 0; e < E; ++e) map[e] = e;
      int32_t *d_map, *d_counts, *d_offsets, *d_sorted, *d_slot_expert, *d_chunks;
      ASSERT_EQ(cudaMalloc(&d_map, E * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_counts, E * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_offsets, (E + 1) * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_sorted, S * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_slot_expert, S * 4), cudaSuccess);
      const int64_t max_chunks = mma_max_chunks(S, E);
      ASSERT_EQ(cudaMalloc(&d_chunks, (2 * max_chunks + 1) * 4), cudaSuccess);
      cudaMemset(d_chunks, 0xFF, (2 * max_chunks + 1) * 4);  // poison: -1
      cudaMemcpy(d_map, map.data(), E * 4, cudaMemcpyHostToDevice);
      cudaMemset(d_ids, 0xFF, S * 4);      // poison: -1
      cudaMemset(d_weights, 0xFF, S * 4);  // poison: NaN
      p.num_tokens = T_small;
      const cuda::GroupingParams g =
          grouping_params(d_ids, d_map, S, E, E, {d_counts, d_offsets, d_sorted, d_slot_expert, d_chunks});
      ASSERT_EQ(cuda::launch_routing_and_grouping(p, g, nullptr), cudaSuccess);
      std::vector<int32_t> ids_small(S), offsets(E + 1), sorted(S);
      std::vector<float> weights_small(S);
      ASSERT_EQ(cudaMemcpy(ids_small.data(), d_ids, S * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      cudaMemcpy(weights_small.data(), d_weights, S * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(offsets.data(), d_offsets, (E + 1) * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(sorted.data(), d_sorted, S * 4, cudaMemcpyDeviceToHost);
      std::vector<int32_t> chunks(2 * max_chunks + 1);
      cudaMemcpy(chunks.data(), d_chunks, chunks.size() * 4, cudaMemcpyDeviceToHost);
      const std::string what = std::to_string(E) + " experts, " + std::to_string(T_small) + " tokens in one launch";
      ASSERT_EQ(ids_small, std::vector<int32_t>(want.ids.begin(), want.ids.begin() + S)) << what;
      EXPECT_EQ(0, std::memcmp(weights_small.data(), want.weights.data(), S * 4)) << what;
      std::vector<int> count(E, 0);
      for (int32_t id : ids_small) ++count[id];
      std::vector<int32_t> want_active;
      for (int e = 0; e < E; ++e) {
        ASSERT_EQ(offsets[e + 1] - offsets[e], count[e]) << what << ", expert " << e;
        for (int pos = offsets[e]; pos < offsets[e + 1]; ++pos) EXPECT_EQ(ids_small[sorted[pos]], e) << what << ", position " << pos;
        if (count[e] > 0) want_active.push_back(e);
      }
      EXPECT_EQ(offsets[E], S) << what;
      // The chunks: each active expert's slots from its offset in steps of kMmaChunkSlots, in order.
      std::vector<int32_t> want_chunks = {0};
      for (int e : want_active)
        for (int pos = offsets[e]; pos < offsets[e + 1]; pos += kMmaChunkSlots) {
          want_chunks.push_back(e);
          want_chunks.push_back(pos);
          ++want_chunks[0];
        }
      ASSERT_LE(want_chunks[0], max_chunks) << what;
      EXPECT_EQ(std::vector<int32_t>(chunks.begin(), chunks.begin() + want_chunks.size()), want_chunks) << what;
      for (int32_t* d : {d_map, d_counts, d_offsets, d_sorted, d_slot_expert, d_chunks}) cudaFree(d);
    }
    cudaFree(d_logits);
    cudaFree(d_bias);
    cudaFree(d_ids);
    cudaFree(d_weights);
  }
}

// The grouping's scan (each thread a run of experts, then a block scan of the runs) at the most
// local experts (1024, a quarter of them not local), on both paths (one block up to 8192 slots,
// count / offsets / scatter above), skewed ids (a few experts with hundreds of slots, many with
// none), with and without the hybrid's busy experts: offsets, segments, chunks and busy counts
// against the host's count of the ids.
TEST(CudaGrouping, ManyExpertsOnBothPaths) {
  REQUIRE_GPU();
  const int E = 1280, local_experts = 1024;
  std::vector<int32_t> map(E, -1);
  for (int e = 0, l = 0; e < E; ++e)
    if (e % 5 != 3) map[e] = l++;
  int32_t *d_map, *d_ids, *d_counts, *d_offsets, *d_sorted, *d_slot_expert, *d_chunks, *d_busy;
  const int max_slots = 9000;
  const int64_t max_chunks = mma_max_chunks(max_slots, local_experts);
  ASSERT_EQ(cudaMalloc(&d_map, E * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_ids, max_slots * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_counts, local_experts * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_offsets, (local_experts + 1) * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_sorted, max_slots * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_slot_expert, max_slots * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_chunks, (2 * max_chunks + 1) * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_busy, local_experts * 4), cudaSuccess);
  cudaMemcpy(d_map, map.data(), E * 4, cudaMemcpyHostToDevice);
  for (const int S : {5000, 9000})
    for (const int busy_rows : {0, 40}) {
      const std::string what = std::to_string(S) + " slots, busy rows " + std::to_string(busy_rows);
      // Skewed: a third of the slots on experts 0-7, the rest spread over the first 3/4 of them.
      std::vector<int32_t> ids(S);
      std::uniform_int_distribution<int> hot(0, 7), spread(0, E * 3 / 4);
      for (int s = 0; s < S; ++s) ids[s] = s % 3 == 0 ? hot(rng()) : spread(rng());
      cudaMemcpy(d_ids, ids.data(), S * 4, cudaMemcpyHostToDevice);
      cudaMemset(d_counts, 0, local_experts * 4);  // (the multi-launch path's counts start at zero)
      cudaMemset(d_offsets, 0xFF, (local_experts + 1) * 4);  // poison: -1
      cudaMemset(d_sorted, 0xFF, S * 4);
      cudaMemset(d_slot_expert, 0xFF, S * 4);
      cudaMemset(d_chunks, 0xFF, (2 * max_chunks + 1) * 4);
      cudaMemset(d_busy, 0xFF, local_experts * 4);
      cuda::GroupingParams g = grouping_params(d_ids, d_map, S, E, local_experts,
                                               {d_counts, d_offsets, d_sorted, d_slot_expert, d_chunks});
      g.busy_rows = busy_rows;
      g.busy_counts = busy_rows > 0 ? d_busy : nullptr;
      ASSERT_EQ(cuda::launch_grouping(g, nullptr), cudaSuccess) << what;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      std::vector<int32_t> offsets(local_experts + 1), sorted(S), chunks(2 * max_chunks + 1), busy(local_experts);
      cudaMemcpy(offsets.data(), d_offsets, offsets.size() * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(sorted.data(), d_sorted, S * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(chunks.data(), d_chunks, chunks.size() * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(busy.data(), d_busy, busy.size() * 4, cudaMemcpyDeviceToHost);
      std::vector<int> count(local_experts, 0);
      int local_slots = 0;
      for (int32_t id : ids) {
        if (map[id] < 0) continue;
        ++count[map[id]];
        ++local_slots;
      }
      std::vector<int32_t> want_chunks = {0};
      int want_offset = 0, num_busy = 0;
      for (int l = 0; l < local_experts; ++l) {
        ASSERT_EQ(offsets[l], want_offset) << what << ", expert " << l;
        for (int pos = offsets[l]; pos < offsets[l] + count[l]; ++pos) ASSERT_EQ(map[ids[sorted[pos]]], l) << what;
        want_offset += count[l];
        const bool is_busy = busy_rows > 0 && count[l] >= busy_rows;
        num_busy += is_busy;
        if (busy_rows > 0) EXPECT_EQ(busy[l], is_busy ? count[l] : 0) << what << ", expert " << l;
        if (count[l] == 0 || is_busy) continue;
        for (int pos = offsets[l]; pos < offsets[l] + count[l]; pos += kMmaChunkSlots) {
          want_chunks.push_back(l);
          want_chunks.push_back(pos);
          ++want_chunks[0];
        }
      }
      EXPECT_EQ(offsets[local_experts], local_slots) << what;
      if (busy_rows > 0) EXPECT_GE(num_busy, 4) << what;  // the skew made busy experts
      EXPECT_EQ(std::vector<int32_t>(chunks.begin(), chunks.begin() + want_chunks.size()), want_chunks) << what;
    }
  for (int32_t* d : {d_map, d_ids, d_counts, d_offsets, d_sorted, d_slot_expert, d_chunks, d_busy}) cudaFree(d);
}

// ---- fixtures ----------------------------------------------------------------------------------

TEST(CudaFixtures, EveryFixtureMatchesTheCpuAndTorch) {
  REQUIRE_GPU();
  const auto manifest = nlohmann::json::parse(test::read_text(test::data_dir() + "/fixtures/manifest.json"));
  int checked = 0;
  for (const auto& f : manifest) {
    const std::string name = f.at("name");
    const std::string dir = test::fixture_dir(name);
    const Checkpoint ckpt(dir);
    const ModelConfig config = load_model_config(ckpt.config_path());
    std::map<std::string, Tensor> io = read_safetensors(dir + "/io.safetensors");
    for (int layer_idx : f.at("layers")) {
      LoadOptions options;
      if (name.rfind("w4a8_int", 0) == 0) options.target = Target::kCpu;  // sm90 rejects them (as vLLM)
      for (bool exact_w4a4 : {false, true}) {
        options.nvfp4_exact_w4a4 = exact_w4a4;
        const MoeLayer layer = load_moe_layer(ckpt, config, layer_idx, options);
        if (exact_w4a4 && layer.act_quant != ActQuant::kNvfp4) continue;
        expect_cuda_matches_cpu(layer, io.at("hidden_states"), io.at("router_logits"),
                                name + " layer " + std::to_string(layer_idx));
        ++checked;
      }
      if (name == "w4a8_fp8") {  // the int4 option: int4 codes with exact products (int4 code kernels)
        LoadOptions int4 = options;
        int4.w4a8_fp8_int4 = true;
        const MoeLayer layer = load_moe_layer(ckpt, config, layer_idx, int4);
        expect_cuda_matches_cpu(layer, io.at("hidden_states"), io.at("router_logits"), name + " int4 option");
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 28);
}

// ---- device API: poisoned output, graph capture ------------------------------------------------

// Eager forward into a NaN-poisoned output, then the same forward captured in a graph and replayed:
// fully written, bit-identical, close to the CPU; more tokens than the workspace holds is an error.
void expect_graph_replay_matches_eager(const MoeLayer& layer, int T, const ForwardOptions& options) {
  Tensor x, logits;
  random_inputs(T, layer, x, logits);
  const int max_tokens = T + 40;
  CudaMoeLayer dev(layer, max_tokens);
  Tensor eager, replay;
  forward_eager_and_replayed(dev, x, logits, options, 3, &eager, &replay);
  ASSERT_FALSE(eager.empty());
  for (int64_t i = 0; i < eager.numel(); ++i) ASSERT_TRUE(std::isfinite(eager.data<float>()[i]));
  EXPECT_EQ(0, std::memcmp(eager.raw(), replay.raw(), eager.size_bytes()));
  const Tensor cpu_out = make_backend("cpu")->forward(layer, x, logits, options);
  EXPECT_LE(compare_outputs(eager, cpu_out).rel_l2, tolerance_rel_l2(layer, options, Comparison::kCudaVsReference, T));
  // (Checked before any pointer is used.)
  EXPECT_THROW(dev.forward(nullptr, DType::kBF16, nullptr, nullptr, max_tokens + 1, nullptr, options), Error);
}

TEST(CudaMoeLayerApi, PoisonedOutputIsFullyWrittenAndGraphReplayMatchesEager) {
  REQUIRE_GPU();
  expect_graph_replay_matches_eager(random_layer(Scheme::kW4A16G128, {16, 4, 1024, 512}), 24, ForwardOptions{});
  ForwardOptions prefill;
  prefill.gemm_path = GemmPath::kPrefill;
  expect_graph_replay_matches_eager(random_layer(Scheme::kFp8Channel, {16, 4, 1024, 512}), 200, prefill);
  expect_graph_replay_matches_eager(random_layer(Scheme::kW4A16G128, {16, 4, 1024, 512}), 200, prefill);
}

// An output pointer that is only 4-byte aligned (the combine then stores one float at a time
// instead of 16-byte pieces) gives bit for bit the aligned forward's output, decode and prefill.
// The bench's timing (time_cuda_forward) with GEMM1 and GEMM2 apart: the forwards without GEMM2
// capture and run on the decode and prefill paths (the register kernel's GEMM1 with its fused
// activation among them) and give finite, positive times.
TEST(CudaMoeLayerApi, BenchTimingSplitsTheGemms) {
  REQUIRE_GPU();
  for (Scheme s : {Scheme::kW4A16G128, Scheme::kMxfp4, Scheme::kFp8Channel, Scheme::kDense}) {
    const MoeLayer layer = random_layer(s, {16, 4, 1024, 512});
    const CudaMoeLayer dev(layer, 512);
    std::vector<Tensor> xs(2), ls(2);
    for (int r = 0; r < 2; ++r) random_inputs(512, layer, xs[r], ls[r]);
    for (GemmPath path : {GemmPath::kDecode, GemmPath::kPrefill}) {
      ForwardOptions options;
      options.gemm_path = path;
      const std::string what = std::string(name_of(s)) + (path == GemmPath::kDecode ? " decode" : " prefill");
      const CudaTiming t = time_cuda_forward(dev, xs, ls, 3, options, true);
      for (double us : {t.forward_us, t.other_us, t.without_gemm2_us}) {
        EXPECT_TRUE(std::isfinite(us)) << what;
        EXPECT_GT(us, 0.0) << what;
      }
      EXPECT_EQ(cudaGetLastError(), cudaSuccess) << what;
    }
  }
}

TEST(CudaMoeLayerApi, UnalignedOutputMatchesAligned) {
  REQUIRE_GPU();
  const MoeLayer layer = random_layer(Scheme::kW4A16G128, {16, 4, 1024, 512});
  for (GemmPath path : {GemmPath::kDecode, GemmPath::kPrefill}) {
    ForwardOptions options;
    options.gemm_path = path;
    const int T = 37;
    Tensor x, logits;
    random_inputs(T, layer, x, logits);
    const CudaMoeLayer dev(layer, 300);  // (room for the prefill path's scratch)
    const size_t out_bytes = sizeof(float) * T * layer.hidden;
    void *d_x, *d_logits, *d_out;
    ASSERT_EQ(cudaMalloc(&d_x, x.size_bytes()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_logits, logits.size_bytes()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_out, 2 * out_bytes + 16), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_x, x.raw(), x.size_bytes(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_logits, logits.raw(), logits.size_bytes(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(d_out, 0xFF, 2 * out_bytes + 16), cudaSuccess);  // NaN poison
    float* aligned = static_cast<float*>(d_out);
    float* unaligned = aligned + T * layer.hidden + 1;  // 4 bytes past a 16-byte boundary
    dev.forward(d_x, x.dtype(), static_cast<float*>(d_logits), aligned, T, nullptr, options);
    dev.forward(d_x, x.dtype(), static_cast<float*>(d_logits), unaligned, T, nullptr, options);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> a(T * layer.hidden), u(T * layer.hidden);
    ASSERT_EQ(cudaMemcpy(a.data(), aligned, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(u.data(), unaligned, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(d_x);
    cudaFree(d_logits);
    cudaFree(d_out);
    for (float v : a) ASSERT_TRUE(std::isfinite(v));
    EXPECT_EQ(0, std::memcmp(a.data(), u.data(), out_bytes)) << (path == GemmPath::kDecode ? "decode" : "prefill");
  }
}

// Layers sharing one workspace (CudaWorkspace), their forwards back to back on one stream, eager and
// as one captured graph, give bit for bit the outputs of the same layers with workspaces of their
// own: decode and prefill paths, every kind of prefill scratch (sorted rows, dequantized batches,
// repacked 4-bit kernels), bf16 and f16 hidden states, a layer with a smaller max_tokens, and a
// workspace of exactly one layer's size. The shared workspace starts poisoned (0xFF), so a forward
// that read what it did not write would show. Too small a workspace is an error before any upload.
TEST(CudaMoeLayerApi, LayersSharingAWorkspaceMatchTheirOwn) {
  REQUIRE_GPU();
  const LayerShape shape{16, 4, 1024, 512};
  struct Case {
    std::string name;
    MoeLayer layer;
    int max_tokens;
    bool f16 = false;
  };
  std::vector<Case> cases;
  cases.push_back({"fp8 channel", random_layer(Scheme::kFp8Channel, shape), 400});
  cases.push_back({"mxfp4", random_layer(Scheme::kMxfp4, shape), 400});
  cases.push_back({"w4a16 asym g32", random_layer(Scheme::kW4A16AsymG32, shape), 400});
  cases.push_back({"w4a16 g128 act order", with_act_order(random_layer(Scheme::kW4A16G128, shape)), 400});
  cases.push_back({"fp8 block", random_layer(Scheme::kFp8Block, shape), 100});
  cases.push_back({"f16 w8a16 asym g64", as_f16_model(random_layer(Scheme::kW8A16AsymG64, shape)), 600, true});
  int64_t largest = 0;
  for (const Case& c : cases) largest = std::max(largest, CudaMoeLayer::workspace_bytes(c.layer, c.max_tokens));
  auto shared = std::make_shared<CudaWorkspace>(largest);
  ASSERT_EQ(cudaMemset(shared->data(), 0xFF, static_cast<size_t>(largest)), cudaSuccess);
  std::vector<std::unique_ptr<CudaMoeLayer>> own, in_shared;
  size_t free_before = 0, free_after = 0, total = 0;
  // Device memory each construction takes: the shared layer takes its own layer's less the workspace.
  auto allocated_by = [&](auto make) {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
    make();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
    return static_cast<int64_t>(free_before) - static_cast<int64_t>(free_after);
  };
  for (const Case& c : cases) {
    const int64_t own_bytes = allocated_by([&] { own.push_back(std::make_unique<CudaMoeLayer>(c.layer, c.max_tokens)); });
    const int64_t shared_bytes =
        allocated_by([&] { in_shared.push_back(std::make_unique<CudaMoeLayer>(c.layer, c.max_tokens, shared)); });
    const int64_t workspace = CudaMoeLayer::workspace_bytes(c.layer, c.max_tokens);
    EXPECT_GE(own_bytes - shared_bytes, workspace - (int64_t{4} << 20))
        << c.name << ": own " << own_bytes << ", shared " << shared_bytes << ", workspace " << workspace;
  }
  // One forward of every layer, back to back on one stream, into outputs poisoned with NaN.
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (int tokens : {1, 7, 100, 400}) {
    std::vector<Tensor> x(cases.size()), logits(cases.size());
    std::vector<void*> d_x(cases.size()), d_logits(cases.size()), d_out(cases.size() * 3);
    for (size_t i = 0; i < cases.size(); ++i) {
      const int T = std::min(tokens, cases[i].max_tokens);
      random_inputs(T, cases[i].layer, x[i], logits[i]);
      if (cases[i].f16) x[i] = bf16_to_f16(x[i]);
      ASSERT_EQ(cudaMalloc(&d_x[i], x[i].size_bytes()), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_logits[i], logits[i].size_bytes()), cudaSuccess);
      cudaMemcpy(d_x[i], x[i].raw(), x[i].size_bytes(), cudaMemcpyHostToDevice);
      cudaMemcpy(d_logits[i], logits[i].raw(), logits[i].size_bytes(), cudaMemcpyHostToDevice);
      for (int j = 0; j < 3; ++j) {
        ASSERT_EQ(cudaMalloc(&d_out[3 * i + j], sizeof(float) * T * shape.hidden), cudaSuccess);
        cudaMemset(d_out[3 * i + j], 0xFF, sizeof(float) * T * shape.hidden);
      }
    }
    auto run_all = [&](const std::vector<std::unique_ptr<CudaMoeLayer>>& layers, int out) {
      for (size_t i = 0; i < cases.size(); ++i)
        layers[i]->forward(d_x[i], x[i].dtype(), static_cast<const float*>(d_logits[i]),
                           static_cast<float*>(d_out[3 * i + out]), static_cast<int>(x[i].dim(0)), stream,
                           ForwardOptions{});
    };
    run_all(own, 0);
    run_all(in_shared, 1);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    run_all(in_shared, 2);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int r = 0; r < 2; ++r) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (size_t i = 0; i < cases.size(); ++i) {
      const size_t n = static_cast<size_t>(x[i].dim(0)) * shape.hidden;
      std::vector<float> got[3];
      for (int j = 0; j < 3; ++j) {
        got[j].resize(n);
        cudaMemcpy(got[j].data(), d_out[3 * i + j], sizeof(float) * n, cudaMemcpyDeviceToHost);
      }
      for (float v : got[0]) ASSERT_TRUE(std::isfinite(v)) << cases[i].name << " " << tokens;
      EXPECT_EQ(0, std::memcmp(got[0].data(), got[1].data(), sizeof(float) * n))
          << cases[i].name << ", " << tokens << " tokens: shared workspace differs from its own";
      EXPECT_EQ(0, std::memcmp(got[0].data(), got[2].data(), sizeof(float) * n))
          << cases[i].name << ", " << tokens << " tokens: graph replay in the shared workspace differs";
      cudaFree(d_x[i]);
      cudaFree(d_logits[i]);
      for (int j = 0; j < 3; ++j) cudaFree(d_out[3 * i + j]);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(stream);
  // A workspace of exactly one layer's size serves it; a byte less is refused before any upload.
  const Case& c = cases[1];
  const int64_t need = CudaMoeLayer::workspace_bytes(c.layer, c.max_tokens);
  EXPECT_NO_THROW(CudaMoeLayer(c.layer, c.max_tokens, std::make_shared<CudaWorkspace>(need)));
  auto small = std::make_shared<CudaWorkspace>(need - 1);
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  EXPECT_THROW(CudaMoeLayer(c.layer, c.max_tokens, small), Error);
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_EQ(free_before, free_after) << "the refused layer uploaded something";
}

// Chained launches change only when kernels start, never what they compute: decode forwards,
// chained and plain (an outer ChainedLaunchScope(false)), bit for bit, over fresh inputs (a
// missing wait would show as a stale or partial input in some repetitions).
TEST(ChainedLaunches, DecodeForwardsMatchPlainLaunchesBitForBit) {
  REQUIRE_GPU();
  if (!cuda::chained_launches()) GTEST_SKIP() << "QMOE_PDL=0: nothing is chained";
  ForwardOptions options;
  options.gemm_path = GemmPath::kDecode;  // chained launches run only without prefill kernels
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (Scheme s : {Scheme::kW4A16G128, Scheme::kMxfp4, Scheme::kFp8Channel, Scheme::kInt4Fp8Codes, Scheme::kW4A8Fp8,
                   Scheme::kDense}) {
    for (LayerShape shape : {LayerShape{16, 4, 1024, 512}, LayerShape{8, 2, 2048, 4096}}) {
      const MoeLayer layer = random_layer(s, shape);
      const int max_tokens = 24;
      CudaMoeLayer dev(layer, max_tokens);
      void *d_x, *d_logits, *d_chained, *d_plain;
      const size_t out_bytes = sizeof(float) * max_tokens * layer.hidden;
      ASSERT_EQ(cudaMalloc(&d_x, sizeof(uint16_t) * max_tokens * layer.hidden), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_logits, sizeof(float) * max_tokens * layer.num_experts), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_chained, out_bytes), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_plain, out_bytes), cudaSuccess);
      for (int rep = 0; rep < 12; ++rep) {
        const int T = std::vector<int>{1, 3, 8, 24}[rep % 4];
        Tensor x, logits;
        random_inputs(T, layer, x, logits);
        cudaMemcpy(d_x, x.raw(), x.size_bytes(), cudaMemcpyHostToDevice);
        cudaMemcpy(d_logits, logits.raw(), logits.size_bytes(), cudaMemcpyHostToDevice);
        cudaMemset(d_chained, 0xFF, out_bytes);  // NaN poison
        cudaMemset(d_plain, 0xFF, out_bytes);
        dev.forward(d_x, DType::kBF16, static_cast<float*>(d_logits), static_cast<float*>(d_chained), T, stream,
                    options);
        {
          const cuda::ChainedLaunchScope plain(false);
          dev.forward(d_x, DType::kBF16, static_cast<float*>(d_logits), static_cast<float*>(d_plain), T, stream,
                      options);
        }
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        std::vector<float> chained(T * layer.hidden), plain(T * layer.hidden);
        cudaMemcpy(chained.data(), d_chained, sizeof(float) * chained.size(), cudaMemcpyDeviceToHost);
        cudaMemcpy(plain.data(), d_plain, sizeof(float) * plain.size(), cudaMemcpyDeviceToHost);
        for (float v : plain) ASSERT_TRUE(std::isfinite(v)) << name_of(s) << " " << T << " tokens";
        EXPECT_EQ(0, std::memcmp(chained.data(), plain.data(), sizeof(float) * plain.size()))
            << name_of(s) << " hidden " << shape.hidden << ", " << T << " tokens, repetition " << rep;
      }
      cudaFree(d_x);
      cudaFree(d_logits);
      cudaFree(d_chained);
      cudaFree(d_plain);
    }
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace qmoe

// The per-forward switch of chained launches (cuda/chaining.h) nests, cannot turn chaining back on
// inside a scope that turned it off, and restores on exit, also when an exception unwinds it.
TEST(ChainedLaunches, ScopeTurnsChainingOffAndRestoresIt) {
  const bool outer = qmoe::cuda::chained_launches();  // true unless QMOE_PDL=0
  {
    const qmoe::cuda::ChainedLaunchScope on(true);
    EXPECT_EQ(qmoe::cuda::chained_launches(), outer);
  }
  {
    const qmoe::cuda::ChainedLaunchScope off(false);
    EXPECT_FALSE(qmoe::cuda::chained_launches());
    {
      const qmoe::cuda::ChainedLaunchScope on(true);
      EXPECT_FALSE(qmoe::cuda::chained_launches());
    }
    EXPECT_FALSE(qmoe::cuda::chained_launches());
  }
  EXPECT_EQ(qmoe::cuda::chained_launches(), outer);
  try {
    const qmoe::cuda::ChainedLaunchScope off(false);
    throw std::runtime_error("unwind");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(qmoe::cuda::chained_launches(), outer);
}
