// Pieces of the MoE forward shared by the CPU backend and the reference: input conversion,
// activation functions, activation (fake-)quantization and intermediate rounding.
#pragma once

#include <vector>

#include "qmoe/moe.h"
#include "routing/routing.h"

namespace qmoe::cpu {

// hidden_states / router_logits as float [rows, cols]; checks rank, shape and dtype.
std::vector<float> to_float_matrix(const Tensor& t, int64_t rows_expected, int64_t cols_expected,
                                   const char* what);

// Rounds `x` to the activation dtype (bf16/f16; f32 leaves it unchanged).
float round_to_dtype(float x, DType dtype);

// Gated: u = [gate (inter) | up (inter)] -> out [inter]. Non-gated: out = act(u), u [inter].
void apply_activation(Activation act, float limit, const float* u, int64_t inter, float* out);

// Parameters of one GEMM input's activation quantization.
struct ActQuantParams {
  ActQuant kind = ActQuant::kNone;
  int group_size = 0;          // kFp8Group
  float static_scale = 0.0f;   // kFp8Static
  float global_scale = 0.0f;   // kNvfp4 input global scale (a multiplier)
};

ActQuantParams gemm1_act_quant(const MoeLayer& layer);
ActQuantParams gemm2_act_quant(const MoeLayer& layer);

// Replaces each row of `x` [rows, cols] by its quantize-dequantize image (q * scale).
// kFp8PerTensorDynamic uses one scale over all rows given.
void fake_quantize(const ActQuantParams& p, float* x, int64_t rows, int64_t cols);

// What every CPU forward starts from: routing, and the GEMM1 input (router weight applied when
// the layer asks for it, rounded, activation-quantized).
struct ForwardInputs {
  int64_t tokens = 0;
  DType act_dtype = DType::kBF16;
  std::vector<float> x;               // [tokens, hidden]
  routing::TopK topk;
  std::vector<int64_t> local_slots;   // slots t * top_k + j whose expert is local, ascending
};
ForwardInputs prepare_forward(const MoeLayer& layer, const Tensor& hidden_states, const Tensor& router_logits,
                              const ForwardOptions& options);

// Quantizes GEMM2's input rows `act` [slot, inter] of the local slots; a per-tensor dynamic scale
// spans all of them (the rows that exist on this rank).
void quantize_gemm2_input(const MoeLayer& layer, const std::vector<int64_t>& local_slots, float* act);

// Rounds to the activation dtype when the options ask for vLLM's rounding points.
inline float round_intermediate(float v, DType act_dtype, const ForwardOptions& options) {
  return options.round_intermediate ? round_to_dtype(v, act_dtype) : v;
}

}  // namespace qmoe::cpu
