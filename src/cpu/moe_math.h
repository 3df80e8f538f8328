// Pieces of the MoE forward shared by the CPU backend and the reference: input conversion,
// activation functions, activation (fake-)quantization and intermediate rounding.
#pragma once

#include <vector>

#include "qmoe/moe.h"

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

}  // namespace qmoe::cpu
