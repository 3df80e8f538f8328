// The CUDA backend's kernel interface: plain parameter structs and launchers. Included by the host
// code (g++) and the kernel files (nvcc); no CUDA types beyond cudaStream_t appear here.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "config/gemm_plan.h"
#include "cuda/grouped_gemm.h"

namespace qmoe::cuda {

// How every expert of one projection is stored (the canonical layout; see config/gemm_plan.h).
using WeightLayout = GemmLayout;

// One expert's tensors on the device (canonical layout, see qmoe::QuantWeight).
struct ExpertTensors {
  const void* data = nullptr;
  const void* scale = nullptr;
  const int8_t* zero_point = nullptr;  // [rows, zp_cols] or null
  const int32_t* g_idx = nullptr;      // [cols] or null
  const float* bias = nullptr;         // [rows] or null
  float global_scale = 1.0f;
};

// out[slot, n] = sum_k dequant(W_e)[n, k] * in[row(slot), k] + bias_e[n] for every local expert e
// and each of its slots; row(slot) = slot / top_k when in_by_token, else slot.
struct GroupedGemmParams {
  WeightLayout layout;
  const ExpertTensors* experts = nullptr;  // [num_local_experts] (device)
  const int32_t* expert_offsets = nullptr; // [num_local_experts + 1] into sorted_slots (device)
  const int32_t* sorted_slots = nullptr;   // slots grouped by local expert (device)
  int num_local_experts = 0;
  // The decode kernels' blocks: only experts that got slots get them, in chunks of up to
  // chunk_slots of an expert's slots (a busy expert spreads over block rows): blockIdx.y indexes
  // chunks[0 .. *num_chunks); max_chunks (mma_max_chunks, host-side) sizes the grid.
  const int32_t* chunks = nullptr;      // [max_chunks][2]: local expert, first position in sorted_slots (device)
  const int32_t* num_chunks = nullptr;  // (device scalar)
  int max_chunks = 0;
  int chunk_slots = kMmaChunkSlots;     // (the grouping's)
  const float* in = nullptr;  // [rows, k]
  bool in_by_token = true;
  int top_k = 1;
  float* out = nullptr;       // [slots, n]
  int num_sms = 1;            // the device's multiprocessors (launch shape, plan_mma_launch)
};
cudaError_t launch_grouped_gemm(const GroupedGemmParams& p, cudaStream_t stream);
// The decode-oriented variant (16-byte weight loads, weights read once per 1, 4 or 8 slots, picked
// from `max_slots_per_expert`, a host-side bound). Returns cudaErrorNotSupported, launching
// nothing, for layouts it does not take (act-order, odd sizes).
cudaError_t launch_grouped_gemv(const GroupedGemmParams& p, bool has_g_idx, int max_slots_per_expert,
                                cudaStream_t stream);
// The tensor-core decode variant (moe_mma.cu), for the layouts and inputs plan_gemm_kernel gives a
// tensor-core kernel. It reads `in16` [rows, k]: the input rows as bf16 (`bf16`) or f16 bits, or
// with `in_scale.scale` the f16 codes of an activation quantization (ActQuantParams::codes16); each
// group of 8 columns stored as t0 t4 t1 t5 t2 t6 t3 t7 (see launch_convert_input). With codes,
// out = sum over k of code products * weight scale * input scale (in_scale[input row,
// k / in_scale.group], group 0 for one scale per row). `num_slots` (tokens * top_k, a host-side
// count) sizes the slots per pass (plan_mma_launch).
struct InputScales {
  const float* scale = nullptr;  // [input rows, ceil(k / group)] (device)
  int group = 0;                 // columns per scale; 0: one per row
};
cudaError_t launch_grouped_mma(const GroupedGemmParams& p, const uint16_t* in16, InputScales in_scale, bool bf16,
                               int num_slots, cudaStream_t stream);

struct RoutingParams {
  const float* logits = nullptr;           // [tokens, num_experts]
  const float* correction_bias = nullptr;  // [num_experts] or null
  int num_tokens = 0;
  int num_experts = 0;
  int top_k = 0;
  int scoring = 0;  // qmoe::Scoring
  bool renormalize = true;
  int num_expert_group = 0;
  int topk_group = 0;
  float routed_scaling_factor = 1.0f;
  bool custom_llama4 = false;
  int32_t* ids = nullptr;     // [tokens, top_k]
  float* weights = nullptr;   // [tokens, top_k]
};
cudaError_t launch_routing(const RoutingParams& p, cudaStream_t stream);

// Groups the slots (t * top_k + j) by local expert: counts, offsets, sorted slot list.
struct GroupingParams {
  const int32_t* ids = nullptr;         // [num_slots] global expert ids
  const int32_t* expert_map = nullptr;  // [num_experts] global -> local or -1
  int num_slots = 0;
  int num_experts = 0;
  int num_local_experts = 0;
  int32_t* counts = nullptr;          // [num_local_experts] workspace of the multi-launch path (zeroed there)
  int32_t* expert_offsets = nullptr;  // [num_local_experts + 1]
  int32_t* sorted_slots = nullptr;    // [num_slots]
  int32_t* slot_expert = nullptr;     // [num_slots] local expert of each slot, -1 if not local
  int32_t* slot_position = nullptr;   // [num_slots] or null: each local slot's index in sorted_slots
  // The slots of the experts that got any in chunks of chunk_slots, experts ascending
  // (GroupedGemmParams::chunks).
  int32_t* chunks = nullptr;      // [mma_max_chunks(num_slots, num_local_experts, chunk_slots)][2]
  int32_t* num_chunks = nullptr;  // device scalar
  int chunk_slots = kMmaChunkSlots;
  // The per-expert hybrid of the decode path (busy_rows > 0): an expert with at least busy_rows
  // slots gets no chunks (the register kernel takes it) and busy_counts[e] its slot count; the
  // others 0.
  int busy_rows = 0;
  int32_t* busy_counts = nullptr;  // [num_local_experts]
};
cudaError_t launch_grouping(const GroupingParams& p, cudaStream_t stream);
// Routing then grouping (gp.ids = rp.ids): one launch where both fit one block (decode batches).
cudaError_t launch_routing_and_grouping(const RoutingParams& rp, const GroupingParams& gp, cudaStream_t stream);

// Activation (fake-)quantization of GEMM inputs, as qmoe::cpu::fake_quantize.
struct ActQuantParams {
  int kind = 0;  // qmoe::ActQuant
  int group_size = 0;
  float static_scale = 0.0f;
  float global_scale = 0.0f;
  // Optional outputs for the tensor-core kernels (FP8 per-token/per-tensor/static/per-group and
  // INT8 per-token modes): each row's codes as f16 bits, permuted as launch_convert_input's x16, and
  // its scales (one per row; per group: ceil(cols / group_size) per row).
  uint16_t* codes16 = nullptr;  // [rows, cols]
  float* row_scale = nullptr;   // [rows, scales per row]
  // The fused prefill row kernels (launch_input_rows, launch_activation_rows), row-wise modes only:
  // each code written as its bf16 value (the W4A8 prefill kernel's rows) instead of its byte.
  bool bf16_rows = false;
};

// Quantizes rows of `x` [*, cols]: all `num_rows` rows when row_ids is null, else the rows listed in
// row_ids[0 .. *num_rows_dev) (device count). `amax` is a device float used by per-tensor modes.
cudaError_t launch_fake_quantize(const ActQuantParams& q, float* x, int64_t cols, const int32_t* row_ids,
                                 int max_rows, const int32_t* num_rows_dev, float* amax, cudaStream_t stream);

// hidden (BF16/F16/F32) -> float x [tokens, hidden]; with router_weights (top-1 Llama-4) the rows
// are scaled and re-rounded to the input dtype when `round`. When x16 is not null (BF16/F16 input
// with `round`, so x is exactly 16-bit) it also receives x's bits in the tensor-core kernels' column
// order: each group of 8 columns as t0 t4 t1 t5 t2 t6 t3 t7.
cudaError_t launch_convert_input(const void* hidden, int dtype_kind, int64_t tokens, int64_t hidden_size,
                                 const float* router_weights, bool round, float* x, uint16_t* x16,
                                 cudaStream_t stream);

// u [slot, S*inter] -> act [slot, inter] for the local slots (sorted_slots[0 .. offsets[E])),
// rounding u and act to the input dtype when `round`.
struct ActivationParams {
  int activation = 0;  // qmoe::Activation
  float limit = 7.0f;
  int64_t inter = 0;
  bool gated = true;
  bool round = true;
  int dtype_kind = 0;  // 0 BF16, 1 F16, 2 F32 (rounding target)
  const int32_t* sorted_slots = nullptr;
  const int32_t* total_slots = nullptr;  // device: offsets[num_local_experts]
  int max_slots = 0;
  float* u = nullptr;
  bool u_sorted = false;  // u's rows in sorted-slot order (the prefill GEMM's output), else by slot
  float* act = nullptr;
  uint16_t* act16 = nullptr;  // or null: act's 16-bit bits, permuted as launch_convert_input's x16
};
cudaError_t launch_activation(const ActivationParams& p, cudaStream_t stream);

// out[t, h] = round(sum_j round(w[t, j] * y[t * top_k + j, h])) over local slots, in j order.
struct CombineParams {
  const float* y = nullptr;
  // Or the weighted terms bf16(w * y), which GEMM2's epilogue wrote (Fp4GemmParams::terms; bf16
  // hidden states, round): summed as they are, in the same order.
  const uint16_t* terms = nullptr;
  const float* weights = nullptr;
  const int32_t* slot_expert = nullptr;
  const int32_t* slot_position = nullptr;  // or null: y's row of each slot (sorted prefill output)
  // The hybrid (GroupingParams::busy_rows): a slot of an expert with busy_counts > 0 reads its
  // term bf16(w * y) at busy_terms[slot_position[slot]] (the register kernel's output), the others
  // y[slot] as above.
  const int32_t* busy_counts = nullptr;
  const uint16_t* busy_terms = nullptr;
  int64_t tokens = 0;
  int64_t hidden = 0;
  int top_k = 1;
  bool weight_on_input = false;
  bool round = true;
  int dtype_kind = 0;
  float* out = nullptr;
};
cudaError_t launch_combine(const CombineParams& p, cudaStream_t stream);

// ---- prefill: grouped GEMMs on expert-sorted rows (grouped_sm90_*.cu, moe_prefill.cu) -----------

// The grouped GEMM instances and their per-group arrays: cuda/grouped_gemm.h.

// Fills the per-group arrays for the rows sorted by expert: group e covers sorted rows
// [offsets[e], offsets[e+1]) of `a_rows` (row stride k elements of `elem_bytes`), `a_scale_rows`
// and `d_rows` (row stride n floats), or for a terms instance `terms_rows` (row stride n bf16s)
// and `row_weights`; buf.b and buf.b_scale are set once at load.
struct GroupedSetupParams {
  GroupedTcBuffers buf;
  const int32_t* expert_offsets = nullptr;  // [groups + 1] (device)
  int groups = 0;
  int64_t n = 0, k = 0;
  const void* a_rows = nullptr;
  int elem_bytes = 1;
  float* a_scale_rows = nullptr;  // or null: no input scales
  int64_t scales_per_row = 1;     // input scales per sorted row (grouped_scales_per_row)
  float* d_rows = nullptr;
  uint16_t* terms_rows = nullptr;     // or null: D is d_rows
  const float* row_weights = nullptr;  // [sorted rows] (launch_sorted_row_weights), for buf.row_weight
  bool transposed = false;  // problem_mnk as (n, m_e, k): grouped_tile_swapped
};
cudaError_t launch_grouped_setup(const GroupedSetupParams& p, cudaStream_t stream);

// Each sorted row's routing weight for GEMM2's terms: row_weights[p] = slot_weights[sorted_slots[p]]
// for p < *total_rows (max_rows: a bound on it).
cudaError_t launch_sorted_row_weights(const float* slot_weights, const int32_t* sorted_slots, const int32_t* total_rows,
                                      int max_rows, float* row_weights, cudaStream_t stream);

// The prefill GEMM's input rows in expert order: row p (< *total_rows) of `a_rows` [*, k] becomes
// input row r = slot / top_k (by_token) or slot (slot = sorted_slots[p]), un-permuted from the
// tensor-core layout of launch_convert_input (`in16`: bf16/f16 bits, or f16 codes stored as fp8 e4m3
// (out_kind 1) or int8 bytes (2)); the row's scales a_scale_rows[p, :] = in_scale[r, :] when
// in_scale is given.
struct GatherParams {
  const uint16_t* in16 = nullptr;  // [input rows, k]
  const float* in_scale = nullptr;  // [input rows, scales_per_row] or null
  int64_t scales_per_row = 1;
  const int32_t* sorted_slots = nullptr;
  const int32_t* total_rows = nullptr;  // device: expert_offsets[groups]
  int max_rows = 0;
  bool by_token = true;
  int top_k = 1;
  int64_t k = 0;
  int out_kind = 0;  // 0: 16-bit as is, 1: fp8 e4m3, 2: int8, 3: f16 codes as bf16 values
  void* a_rows = nullptr;
  float* a_scale_rows = nullptr;
  // The hybrid (GroupingParams::busy_rows): only the rows of experts with busy_counts > 0 (the
  // register kernel reads no others); slot_expert gives each slot's local expert.
  const int32_t* busy_counts = nullptr;
  const int32_t* slot_expert = nullptr;
};
cudaError_t launch_gather_rows(const GatherParams& p, cudaStream_t stream);

// A prefill GEMM's output rows in expert order finished per local expert: row p (< *total_rows) of
// d_rows [*, n] divided by the expert's global scale (divide_by_global: NVFP4 weights dequantized
// without it) and then its bias added (where it has one): e = slot_expert[sorted_slots[p]], the
// decode kernels' epilogue arithmetic.
struct ExpertRowsParams {
  float* d_rows = nullptr;                 // [sorted rows, n]
  int64_t n = 0;                           // a multiple of 4
  const int32_t* sorted_slots = nullptr;
  const int32_t* slot_expert = nullptr;    // local expert of each slot
  const ExpertTensors* experts = nullptr;  // (device) their bias pointers and global scales
  const int32_t* total_rows = nullptr;     // device: expert_offsets[local experts]
  int max_rows = 0;
  bool divide_by_global = false;
};
cudaError_t launch_finish_expert_rows(const ExpertRowsParams& p, cudaStream_t stream);

// The prefill GEMM2 input straight from the prefill GEMM1 output (p.u in sorted order): activation
// as launch_activation, then, for q.kind FP8 per-token or static or INT8 per-token, 8-bit codes as
// launch_fake_quantize, written as fp8 e4m3 / int8 rows a_rows [sorted rows, inter] with
// a_scale_rows [sorted rows]; for FP8 per group of 128 columns (inter % 128 == 0) the same with
// a_scale_rows [sorted rows, inter / 128]; for q.kind 0 (unquantized, p.round, 16-bit dtype) the
// activation's 16-bit rows. inter % 4 == 0.
// 8-bit rows keep the activation row in shared memory: at most kMaxActivationRowBytes of it.
inline constexpr int kMaxActivationRowBytes = 160 * 1024;
cudaError_t launch_activation_rows(const ActivationParams& p, const ActQuantParams& q, void* a_rows,
                                   float* a_scale_rows, cudaStream_t stream);

// The prefill GEMM1 input straight from the hidden states: x as launch_convert_input computes it,
// then 8-bit codes as launch_fake_quantize (q.kind as launch_activation_rows, groups of 128 when
// hidden % 128 == 0) or, for q.kind 0 and 16-bit hidden states, x's 16-bit bits, written to the
// sorted row (GroupingParams::slot_position) of each of the token's local slots. hidden % 8 == 0.
struct InputRowsParams {
  const void* hidden_states = nullptr;  // [tokens, hidden] of dtype_kind (0 BF16, 1 F16, 2 F32)
  int dtype_kind = 0;
  const float* router_weights = nullptr;  // [tokens] (top-1 router weight on the input) or null
  bool round = true;
  ActQuantParams q;
  int64_t tokens = 0, hidden = 0;
  int top_k = 1;
  const int32_t* slot_expert = nullptr;    // [tokens * top_k]
  const int32_t* slot_position = nullptr;  // [tokens * top_k]
  void* a_rows = nullptr;                  // [sorted rows, hidden] 8-bit codes or 16-bit values
  float* a_scale_rows = nullptr;           // [sorted rows] or [sorted rows, hidden / 128] (8-bit codes only)
};
cudaError_t launch_input_rows(const InputRowsParams& p, cudaStream_t stream);

// Packed 4- and 8-bit integer weights on the device hold each code as u ^ 8 (u ^ 128), i.e. the
// signed two's-complement q = u - 8 (u - 128) that CUTLASS's int4 (int8) operand reads, instead of
// the checkpoint's offset-binary u = q + 8 (q + 128); zero points are unchanged. Packed 8-bit rows
// are then byte for byte what int8 storage holds. Every kernel that reads them expects it. In
// place, at load.
cudaError_t launch_codes_to_signed(int32_t* words, int64_t num_words, int bits, cudaStream_t stream);

// Every local expert's group (or channel) weight scales as bf16 (or, with `f16`, f16), n-contiguous:
// out [experts, groups, rows] from the canonical [rows, groups] tensors of any scale dtype; at load,
// for the mixed-input prefill kernels.
cudaError_t launch_group_scales(const WeightLayout& L, const ExpertTensors* experts, int num_experts, bool f16,
                                uint16_t* out, cudaStream_t stream);

// FP32 128 x 128 block weight scales of every local expert ([experts, ceil(rows / 128), ceil(cols /
// 128)]) from the canonical block scale tensors (any scale dtype), for the FP8 block prefill kernel.
cudaError_t launch_block_scales_f32(const WeightLayout& L, const ExpertTensors* experts, int num_experts, float* out,
                                    cudaStream_t stream);

// Per-column fp32 weight scales of every local expert ([experts, rows]) from the canonical scale
// tensors (tensor or channel strategy), as the decode kernels read them; at load.
cudaError_t launch_expand_column_scales(const WeightLayout& L, const ExpertTensors* experts, int num_experts, float* out,
                                        cudaStream_t stream);

}  // namespace qmoe::cuda
