#include "qmoe/synthetic.h"

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "cpu/parallel.h"
#include "qmoe/error.h"
#include "quant/formats.h"

namespace qmoe {
namespace {

// splitmix64: fast, seedable, good enough for random weights.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) { return lo + (hi - lo) * static_cast<float>(next() >> 40) * 0x1.0p-24f; }
};

void fill_bytes(Tensor& t, Rng& rng) {
  std::byte* p = t.raw();
  size_t i = 0;
  for (; i + 8 <= t.size_bytes(); i += 8) {
    const uint64_t v = rng.next();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < t.size_bytes(); ++i) p[i] = static_cast<std::byte>(rng.next());
}

Tensor bf16_tensor(std::vector<int64_t> shape, float lo, float hi, Rng& rng) {
  Tensor t(DType::kBF16, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint16_t>()[i] = quant::float_to_bf16(rng.uniform(lo, hi));
  return t;
}

struct SchemeSpec {
  std::string name;
  WeightFormat format;
  int bits;
  Strategy strategy;
  int group;  // columns per scale (0: none)
  bool asym = false;
  MoeMethod method;
  ActQuant act = ActQuant::kNone;
};

const std::vector<SchemeSpec>& specs() {
  static const std::vector<SchemeSpec> s = {
      {"bf16", WeightFormat::kDense, 16, Strategy::kTensor, 0, false, MoeMethod::kUnquantized},
      {"w4a16_g128", WeightFormat::kIntPacked, 4, Strategy::kGroup, 128, false, MoeMethod::kWna16Marlin},
      {"w4a16_g32", WeightFormat::kIntPacked, 4, Strategy::kGroup, 32, false, MoeMethod::kWna16Marlin},
      {"w4a16_asym_g128", WeightFormat::kIntPacked, 4, Strategy::kGroup, 128, true, MoeMethod::kWna16Marlin},
      {"w8a16", WeightFormat::kIntPacked, 8, Strategy::kGroup, 128, false, MoeMethod::kWna16Marlin},
      {"mxfp4", WeightFormat::kMxfp4, 4, Strategy::kGroup, 32, false, MoeMethod::kMxfp4},
      {"nvfp4a16", WeightFormat::kNvfp4, 4, Strategy::kTensorGroup, 16, false, MoeMethod::kNvfp4},
      {"nvfp4_w4a4", WeightFormat::kNvfp4, 4, Strategy::kTensorGroup, 16, false, MoeMethod::kNvfp4, ActQuant::kNvfp4},
      {"fp8_tensor", WeightFormat::kFp8, 8, Strategy::kTensor, 0, false, MoeMethod::kFp8, ActQuant::kFp8PerTensorDynamic},
      {"fp8_channel", WeightFormat::kFp8, 8, Strategy::kChannel, 0, false, MoeMethod::kFp8, ActQuant::kFp8PerToken},
      {"fp8_block", WeightFormat::kFp8, 8, Strategy::kBlock, 128, false, MoeMethod::kFp8, ActQuant::kFp8Group},
      {"int8", WeightFormat::kIntUnpacked, 8, Strategy::kChannel, 0, false, MoeMethod::kInt8, ActQuant::kInt8PerToken},
      {"w4a8_fp8", WeightFormat::kIntPacked, 4, Strategy::kGroup, 128, false, MoeMethod::kW4A8Fp8, ActQuant::kFp8PerToken},
      {"w4a8_int8", WeightFormat::kIntPacked, 4, Strategy::kGroup, 128, false, MoeMethod::kW4A8Int8, ActQuant::kInt8PerToken},
      // (one scale per row, as vLLM's W4A8-INT8 method with group -1, which keeps them in fp32; bf16 here)
      {"w4a8_int8_channel", WeightFormat::kIntPacked, 4, Strategy::kChannel, 0, false, MoeMethod::kW4A8Int8,
       ActQuant::kInt8PerToken},
  };
  return s;
}

const SchemeSpec& spec_of(const std::string& name) {
  for (const auto& s : specs())
    if (s.name == name) return s;
  std::string known;
  for (const auto& s : specs()) known += (known.empty() ? "" : ", ") + s.name;
  throw Error("unknown synthetic scheme '" + name + "' (known: " + known + ")");
}

QuantWeight random_weight(const SchemeSpec& s, int64_t rows, int64_t cols, Rng& rng) {
  QuantWeight w;
  w.format = s.format;
  w.bits = s.bits;
  w.rows = rows;
  w.cols = cols;
  w.strategy = s.strategy;
  if (s.group > 0 && cols % s.group != 0)
    throw Error("scheme " + s.name + ": input size " + std::to_string(cols) + " is not a multiple of " + std::to_string(s.group));
  switch (s.format) {
    case WeightFormat::kDense:
      w.data = bf16_tensor({rows, cols}, -0.05f, 0.05f, rng);
      return w;
    case WeightFormat::kIntPacked:
    case WeightFormat::kIntUnpacked: {
      if (s.format == WeightFormat::kIntPacked) {
        w.data = Tensor(DType::kI32, {rows, quant::packed_words_per_row(cols, s.bits)});
        fill_bytes(w.data, rng);
      } else {
        w.data = Tensor(DType::kI8, {rows, cols});
        fill_bytes(w.data, rng);
      }
      const float hi = s.bits == 4 ? 0.01f : 0.0005f;
      if (s.strategy == Strategy::kGroup) {
        w.group_size = s.group;
        w.scale = bf16_tensor({rows, cols / s.group}, hi / 4, hi, rng);
      } else {
        w.scale = bf16_tensor({rows, 1}, hi / 4, hi, rng);
      }
      if (s.asym) {
        w.zero_point = Tensor(DType::kI8, w.scale.shape());
        for (int64_t i = 0; i < w.zero_point.numel(); ++i)
          w.zero_point.data<int8_t>()[i] = static_cast<int8_t>(static_cast<int>(rng.next() % 16) - 8);
      }
      return w;
    }
    case WeightFormat::kFp8: {
      w.data = Tensor(DType::kF8E4M3, {rows, cols});
      fill_bytes(w.data, rng);
      for (int64_t i = 0; i < w.data.numel(); ++i) {  // no NaN codes, magnitudes below 2
        uint8_t& b = w.data.data<uint8_t>()[i];
        b = static_cast<uint8_t>((b & 0x80) | ((b & 0x7F) % 0x40));
      }
      if (s.strategy == Strategy::kTensor) {
        w.scale = bf16_tensor({1}, 0.01f, 0.02f, rng);
      } else if (s.strategy == Strategy::kChannel) {
        w.scale = bf16_tensor({rows, 1}, 0.01f, 0.02f, rng);
      } else {
        w.block_rows = w.block_cols = 128;
        w.scale = bf16_tensor({(rows + 127) / 128, (cols + 127) / 128}, 0.01f, 0.02f, rng);
      }
      return w;
    }
    case WeightFormat::kNvfp4:
    case WeightFormat::kMxfp4: {
      w.data = Tensor(DType::kU8, {rows, cols / 2});
      fill_bytes(w.data, rng);
      w.group_size = s.group;
      w.scale = Tensor(s.format == WeightFormat::kNvfp4 ? DType::kF8E4M3 : DType::kU8, {rows, cols / s.group});
      for (int64_t i = 0; i < w.scale.numel(); ++i)
        w.scale.data<uint8_t>()[i] = s.format == WeightFormat::kNvfp4
                                         ? quant::float_to_fp8e4m3_sat(rng.uniform(32.0f, 400.0f))
                                         : static_cast<uint8_t>(117 + rng.next() % 4);
      w.global_scale = 20000.0f;
      return w;
    }
  }
  return w;
}

}  // namespace

const std::vector<MoeShape>& benchmark_shapes() {
  static const std::vector<MoeShape> shapes = {
      {"mixtral-8x7b", 8, 2, 4096, 14336},   {"qwen3-30b-a3b", 128, 8, 2048, 768},
      {"deepseek-v3", 256, 8, 7168, 2048},   {"deepseek-v3-tp8", 256, 8, 7168, 256},
      {"kimi-k2-tp8", 384, 8, 7168, 256},    {"gpt-oss-120b", 128, 4, 2880, 2880},
  };
  return shapes;
}

const MoeShape& benchmark_shape(const std::string& name) {
  for (const auto& s : benchmark_shapes())
    if (s.name == name) return s;
  throw Error("unknown model shape '" + name + "'");
}

const std::vector<std::string>& synthetic_schemes() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& s : specs()) n.push_back(s.name);
    return n;
  }();
  return names;
}

void check_synthetic_scheme(const std::string& scheme) { spec_of(scheme); }

MoeLayer synthetic_layer(const std::string& scheme, const MoeShape& shape, uint64_t seed, int threads) {
  const SchemeSpec& s = spec_of(scheme);
  MoeLayer L;
  L.experts_prefix = "synthetic." + shape.name + "." + scheme;
  L.num_experts = L.num_local_experts = shape.num_experts;
  L.top_k = shape.top_k;
  L.hidden = shape.hidden;
  L.inter = shape.inter;
  L.decision.method = s.method;
  L.decision.vllm_class = vllm_class_name(s.method);
  L.act_quant = s.act;
  if (s.act == ActQuant::kFp8Group) L.act_group_size = 128;
  if (s.act == ActQuant::kNvfp4) {
    L.w13_input_global_scale = 600.0f;
    L.w2_input_global_scale = 3000.0f;
  }
  L.round_weights_to_scale_dtype = method_rounds_weights(s.method);
  L.experts.resize(shape.num_experts);
  for (int e = 0; e < shape.num_experts; ++e) L.expert_map.push_back(e);
  const int workers = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu::parallel_for(workers, shape.num_experts, [&](int64_t e, int) {
    Rng rng{seed * 0x100000001B3ull + static_cast<uint64_t>(e) * 0x9E3779B9ull + 1};
    L.experts[e].w13 = random_weight(s, 2LL * shape.inter, shape.hidden, rng);
    L.experts[e].w2 = random_weight(s, shape.hidden, shape.inter, rng);
    if (s.method == MoeMethod::kW4A8Fp8) {  // as the loader leaves it (vLLM's effective weights)
      L.experts[e].w13 = w4a8_fp8_as_fp8_channel(L.experts[e].w13);
      L.experts[e].w2 = w4a8_fp8_as_fp8_channel(L.experts[e].w2);
    }
  });
  return L;
}

const char* to_string(SyntheticRouting routing) {
  switch (routing) {
    case SyntheticRouting::kUniform: return "uniform";
    case SyntheticRouting::kSkewed: return "skewed";
    case SyntheticRouting::kMild: return "mild";
    case SyntheticRouting::kBalanced: return "balanced";
  }
  return "?";
}

SyntheticRouting parse_synthetic_routing(const std::string& name) {
  for (SyntheticRouting r :
       {SyntheticRouting::kUniform, SyntheticRouting::kSkewed, SyntheticRouting::kMild, SyntheticRouting::kBalanced})
    if (name == to_string(r)) return r;
  throw Error("unknown routing '" + name + "' (uniform, skewed, mild, balanced)");
}

void synthetic_inputs(const MoeLayer& layer, int64_t tokens, uint64_t seed, SyntheticRouting routing, Tensor& hidden,
                      Tensor& logits) {
  // Balanced experts' margin: far above the noise's reach (N(0, 2^2) over <= 384 experts stays
  // within ~8), and small enough that softmax and sigmoid still see distinct finite logits.
  constexpr float kBalancedMargin = 40.0f;
  Rng rng{seed ^ 0xA5A5A5A5ull};
  hidden = bf16_tensor({tokens, layer.hidden}, -2.0f, 2.0f, rng);
  const int E = layer.num_experts;
  logits = Tensor(DType::kF32, {tokens, E});
  float* out = logits.data<float>();
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  // Low expert ids preferred: the logits biased by -bias * ln(1 + e).
  const float bias = routing == SyntheticRouting::kSkewed ? 2.0f : routing == SyntheticRouting::kMild ? 0.5f : 0.0f;
  for (int64_t t = 0; t < tokens; ++t)
    for (int e = 0; e < E; ++e) out[t * E + e] = normal(gen) - bias * std::log1p(static_cast<float>(e));
  if (routing == SyntheticRouting::kBalanced) {
    if (layer.top_k > E) throw Error("balanced routing: top_k exceeds the experts");
    for (int64_t t = 0; t < tokens; ++t)
      for (int j = 0; j < layer.top_k; ++j) out[t * E + (t * layer.top_k + j) % E] += kBalancedMargin;
  }
}

Tensor bf16_to_f16(const Tensor& t) {
  if (t.dtype() != DType::kBF16) return t;
  Tensor out(DType::kF16, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i)
    out.data<uint16_t>()[i] = quant::float_to_f16(quant::bf16_to_float(t.data<uint16_t>()[i]));
  return out;
}

MoeLayer as_f16_model(MoeLayer layer) {
  for (ExpertWeights& ew : layer.experts)
    for (QuantWeight* w : {&ew.w13, &ew.w2}) {
      w->scale = bf16_to_f16(w->scale);
      if (w->format == WeightFormat::kDense) w->data = bf16_to_f16(w->data);
    }
  return layer;
}

}  // namespace qmoe
