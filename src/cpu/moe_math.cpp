#include "cpu/moe_math.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "qmoe/error.h"
#include "quant/formats.h"

namespace qmoe::cpu {

std::vector<float> to_float_matrix(const Tensor& t, int64_t rows, int64_t cols, const char* what) {
  if (t.rank() != 2 || t.dim(0) != rows || t.dim(1) != cols)
    throw Error(std::string(what) + " has shape " + t.shape_str() + ", expected [" + std::to_string(rows) +
                ", " + std::to_string(cols) + "]");
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const int64_t n = rows * cols;
  switch (t.dtype()) {
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = quant::bf16_to_float(t.data<uint16_t>()[i]);
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = quant::f16_to_float(t.data<uint16_t>()[i]);
      break;
    case DType::kF32:
      std::copy(t.data<float>(), t.data<float>() + n, out.begin());
      break;
    default:
      throw Error(std::string(what) + " has dtype " + std::string(dtype_name(t.dtype())) +
                  ", expected BF16, F16 or F32");
  }
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(out[i]))
      throw Error(std::string(what) + " holds a non-finite value at [" + std::to_string(i / cols) + ", " +
                  std::to_string(i % cols) + "]");
  return out;
}

float round_to_dtype(float x, DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return quant::round_to_bf16(x);
    case DType::kF16:
      return quant::round_to_f16(x);
    default:
      return x;
  }
}

namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float gelu(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }
float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

}  // namespace

void apply_activation(Activation act, float limit, const float* u, int64_t inter, float* out) {
  const float* gate = u;
  const float* up = u + inter;
  switch (act) {
    case Activation::kSilu:
      for (int64_t i = 0; i < inter; ++i) out[i] = silu(gate[i]) * up[i];
      return;
    case Activation::kGelu:
      for (int64_t i = 0; i < inter; ++i) out[i] = gelu(gate[i]) * up[i];
      return;
    case Activation::kGeluTanh:
      for (int64_t i = 0; i < inter; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
      return;
    case Activation::kSwigluOai:
      // gpt-oss: alpha 1.702, gate clamped from above, up clamped both ways, (up + 1) * glu.
      for (int64_t i = 0; i < inter; ++i) {
        const float g = std::min(gate[i], limit);
        const float v = std::clamp(up[i], -limit, limit);
        out[i] = (v + 1.0f) * g / (1.0f + std::exp(-1.702f * g));
      }
      return;
    case Activation::kSwigluStep:
      for (int64_t i = 0; i < inter; ++i)
        out[i] = std::min(silu(gate[i]), limit) * std::clamp(up[i], -limit, limit);
      return;
    case Activation::kSiluNoMul:
      for (int64_t i = 0; i < inter; ++i) out[i] = silu(u[i]);
      return;
    case Activation::kGeluNoMul:
      for (int64_t i = 0; i < inter; ++i) out[i] = gelu(u[i]);
      return;
    case Activation::kRelu2NoMul:
      for (int64_t i = 0; i < inter; ++i) {
        const float r = std::max(u[i], 0.0f);
        out[i] = r * r;
      }
      return;
  }
}

ActQuantParams gemm1_act_quant(const MoeLayer& layer) {
  return {layer.act_quant, layer.act_group_size, layer.w13_input_scale, layer.w13_input_global_scale};
}

ActQuantParams gemm2_act_quant(const MoeLayer& layer) {
  return {layer.act_quant, layer.act_group_size, layer.w2_input_scale, layer.w2_input_global_scale};
}

namespace {

float amax_of(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

void fp8_rows(float* x, int64_t n, float scale) {
  const float inv = 1.0f / scale;
  for (int64_t i = 0; i < n; ++i) x[i] = quant::fp8e4m3_to_float(quant::quantize_fp8_act(x[i], inv)) * scale;
}

}  // namespace

void fake_quantize(const ActQuantParams& p, float* x, int64_t rows, int64_t cols) {
  switch (p.kind) {
    case ActQuant::kNone:
      return;
    case ActQuant::kFp8PerToken:
      for (int64_t r = 0; r < rows; ++r) {
        float* row = x + r * cols;
        fp8_rows(row, cols, quant::fp8_dynamic_scale(amax_of(row, cols)));
      }
      return;
    case ActQuant::kFp8PerTensorDynamic:
      fp8_rows(x, rows * cols, quant::fp8_dynamic_scale(amax_of(x, rows * cols)));
      return;
    case ActQuant::kFp8Static:
      fp8_rows(x, rows * cols, p.static_scale);
      return;
    case ActQuant::kFp8Group:
      // vLLM's per-token-group quantization: scale = max(amax, 1e-10) / 448, q = fp8(x / scale).
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c0 = 0; c0 < cols; c0 += p.group_size) {
          float* g = x + r * cols + c0;
          const int64_t n = std::min<int64_t>(p.group_size, cols - c0);
          const float scale = std::max(amax_of(g, n), 1e-10f) / quant::kFp8E4M3Max;
          for (int64_t i = 0; i < n; ++i)
            g[i] = quant::fp8e4m3_to_float(quant::float_to_fp8e4m3_sat(g[i] / scale)) * scale;
        }
      return;
    case ActQuant::kInt8PerToken:
      for (int64_t r = 0; r < rows; ++r) {
        float* row = x + r * cols;
        const float scale = quant::int8_dynamic_scale(amax_of(row, cols));
        for (int64_t i = 0; i < cols; ++i) row[i] = static_cast<float>(quant::quantize_int8_act(row[i], scale)) * scale;
      }
      return;
    case ActQuant::kNvfp4: {
      constexpr int kBlock = 16;
      if (cols % kBlock != 0) throw Error("NVFP4 activations need a multiple of 16 columns");
      uint8_t nibbles[kBlock];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
          float* g = x + r * cols + c0;
          const uint8_t sf = quant::quantize_nvfp4_block(g, kBlock, p.global_scale, nibbles);
          const float block_scale = quant::fp8e4m3_to_float(sf) / p.global_scale;
          for (int i = 0; i < kBlock; ++i) g[i] = quant::e2m1_to_float(nibbles[i]) * block_scale;
        }
      return;
    }
  }
}

ForwardInputs prepare_forward(const MoeLayer& layer, const Tensor& hidden_states, const Tensor& router_logits,
                              const ForwardOptions& options) {
  if (hidden_states.rank() != 2)
    throw Error("hidden_states must be 2-D [tokens, hidden], got " + hidden_states.shape_str());
  ForwardInputs in;
  in.tokens = hidden_states.dim(0);
  in.act_dtype = hidden_states.dtype();
  const int64_t T = in.tokens, H = layer.hidden;
  in.x = to_float_matrix(hidden_states, T, H, "hidden_states");
  const std::vector<float> logits = to_float_matrix(router_logits, T, layer.num_experts, "router_logits");
  in.topk = routing::route(logits.data(), static_cast<int>(T), layer.num_experts, layer.top_k, layer.routing,
                           layer.correction_bias.empty() ? nullptr : layer.correction_bias.data<float>());
  for (int64_t s = 0; s < T * layer.top_k; ++s)
    if (layer.expert_map[in.topk.ids[s]] >= 0) in.local_slots.push_back(s);
  if (layer.routing.router_weight_on_input)  // top_k == 1: slot t is token t
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        in.x[t * H + h] = round_intermediate(in.x[t * H + h] * in.topk.weights[t], in.act_dtype, options);
  fake_quantize(gemm1_act_quant(layer), in.x.data(), T, H);
  return in;
}

void quantize_gemm2_input(const MoeLayer& layer, const std::vector<int64_t>& local_slots, float* act) {
  const ActQuantParams q = gemm2_act_quant(layer);
  const int64_t I = layer.inter;
  if (q.kind != ActQuant::kFp8PerTensorDynamic) {
    for (int64_t s : local_slots) fake_quantize(q, act + s * I, 1, I);
    return;
  }
  std::vector<float> rows(local_slots.size() * I);
  for (size_t i = 0; i < local_slots.size(); ++i) std::copy_n(act + local_slots[i] * I, I, &rows[i * I]);
  fake_quantize(q, rows.data(), static_cast<int64_t>(local_slots.size()), I);
  for (size_t i = 0; i < local_slots.size(); ++i) std::copy_n(&rows[i * I], I, act + local_slots[i] * I);
}

}  // namespace qmoe::cpu
