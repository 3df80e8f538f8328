// One MoE layer of a checkpoint, loaded in the checkpoint's canonical layout, and the Backend
// interface that runs its forward pass (routing -> gate/up GEMM -> activation -> down GEMM ->
// weighted sum).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qmoe/checkpoint.h"
#include "qmoe/config.h"
#include "qmoe/dispatch.h"
#include "qmoe/tensor.h"

namespace qmoe {

// How one expert projection is stored. The CPU reference always works on this layout.
enum class WeightFormat {
  kDense,        // data [rows, cols] BF16/F16/F32
  kIntPacked,    // pack-quantized: data I32 [rows, ceil(cols*bits/32)], offset-binary bit stream
  kIntUnpacked,  // int-quantized: data I8 [rows, cols] (signed values, int4 kept one per byte)
  kFp8,          // float-quantized: data F8_E4M3 [rows, cols]
  kNvfp4,        // nvfp4-pack-quantized: data U8 [rows, cols/2], FP8 scales per 16, global divisor
  kMxfp4,        // mxfp4-pack-quantized: data U8 [rows, cols/2], E8M0 scales per 32
};
std::string to_string(WeightFormat f);

// One projection [rows = out features, cols = in features]. For w13 the gate rows come first, then
// the up rows (vLLM's w13 = concat(gate, up)).
struct QuantWeight {
  WeightFormat format = WeightFormat::kDense;
  int bits = 16;
  int64_t rows = 0;
  int64_t cols = 0;
  Strategy strategy = Strategy::kTensor;
  int64_t group_size = 0;  // columns per scale group (group / tensor_group / mx)
  int64_t block_rows = 0;  // block strategy
  int64_t block_cols = 0;
  Tensor data;
  Tensor scale;       // as on disk (BF16/F16/F32, F8_E4M3 for NVFP4, U8 E8M0 for MXFP4)
  Tensor zero_point;  // I8 [rows, groups], unpacked; empty when symmetric
  Tensor g_idx;       // I32 [cols]; empty without activation ordering
  float global_scale = 1.0f;  // NVFP4 weight_global_scale (a divisor)

  int64_t storage_bytes() const;
};

// Dequantizes row `row` into `out` [cols] with compressed-tensors' numerics. `round_to_scale_dtype`
// applies the reference's rounding of int/fp8 products to the scale dtype (weight-only methods);
// W8A8-style methods pass false because their kernels apply scales in fp32.
void dequantize_row(const QuantWeight& w, int64_t row, bool round_to_scale_dtype, float* out);

// vLLM's W4A8-FP8 weights (CompressedTensorsW4A8Fp8MoEMethod: CUTLASS's int4 x fp8 kernel on sm90)
// as FP8 codes with one scale per row. vLLM converts each row's group scales s with its dynamic
// FP8 quantization (chan = max(max|s| / 448, 1 / (448 * 512)), s8 = fp8(fp8(s / chan) / 8)), and
// its kernel's scale lookup table feeds the FP8 MMA fp8(q * s8), each product rounded to e4m3, with
// chan * 8 applied after the sum: weight code fp8(q * s8) (q the int4 value), row scale chan * 8.
// `w`: symmetric 4-bit integers (packed or in int8 storage) with group or channel scales.
QuantWeight w4a8_fp8_as_fp8_channel(const QuantWeight& w);
// The same conversion of the scales with the int4 codes kept and the products left exact: each
// group's scale becomes s8 * chan * 8 (F32), LoadOptions::w4a8_fp8_int4.
QuantWeight w4a8_fp8_exact_products(const QuantWeight& w);

struct ExpertWeights {
  QuantWeight w13;  // [S*inter, hidden], S = 2 when gated
  QuantWeight w2;   // [hidden, inter]
  Tensor w13_bias;  // F32 [S*inter] or empty
  Tensor w2_bias;   // F32 [hidden] or empty
};

// How activations are quantized before each GEMM (implied by the method and its args).
enum class ActQuant {
  kNone,
  kFp8PerToken,          // dynamic, one scale per row
  kFp8PerTensorDynamic,  // dynamic, one scale for the whole GEMM input
  kFp8Static,            // static scale from the checkpoint (max over experts)
  kFp8Group,             // dynamic, one scale per row and `act_group_size` columns
  kInt8PerToken,         // dynamic symmetric int8 per row
  kNvfp4,                // 16-element blocks with the input global scale (exact W4A4 option)
};
std::string to_string(ActQuant q);

struct RoutingConfig {
  Scoring scoring = Scoring::kSoftmax;
  bool renormalize = true;
  int num_expert_group = 0;
  int topk_group = 0;
  float routed_scaling_factor = 1.0f;
  bool router_weight_on_input = false;
  bool custom_llama4 = false;
};

struct LoadOptions {
  Target target = Target::kSm90;  // the GPU whose dispatch decision is taken
  int tp_rank = 0;                // tensor parallel: this rank holds inter/tp_size of every expert
  int tp_size = 1;
  // Expert parallel: global expert id -> local index, or -1 when another rank owns it. Empty: all
  // experts are local. Use linear_expert_map() for vLLM's linear placement.
  std::vector<int> expert_map;
  // Run NVFP4 W4A4 with its exact activation quantization instead of vLLM's Hopper behaviour
  // (weight-only Marlin). Off by default: qmoe follows vLLM.
  bool nvfp4_exact_w4a4 = false;
  // W4A8 with FP8 activations: keep the int4 codes (half the memory of vLLM's FP8 products) with the
  // exact products q * s8 * chan * 8 instead of their e4m3 rounding (w4a8_fp8_as_fp8_channel). Off by
  // default: qmoe follows vLLM. The int4 code kernels run these layers.
  bool w4a8_fp8_int4 = false;
  // Called with (bytes done, bytes total) while expert tensors are read.
  std::function<void(uint64_t, uint64_t)> progress;
};

// vLLM's determine_expert_map (linear placement; remainder experts go to the first ranks).
std::vector<int> linear_expert_map(int num_experts, int ep_size, int ep_rank);

struct MoeLayer {
  int layer = 0;
  std::string experts_prefix;
  int num_experts = 0;        // global
  int num_local_experts = 0;
  int top_k = 0;
  int hidden = 0;
  int inter = 0;              // per tensor-parallel partition
  int tp_rank = 0;
  int tp_size = 1;
  Activation activation = Activation::kSilu;
  float swiglu_limit = 7.0f;
  RoutingConfig routing;
  DispatchDecision decision;
  ActQuant act_quant = ActQuant::kNone;
  int act_group_size = 0;           // kFp8Group
  float w13_input_scale = 0.0f;     // kFp8Static: collapsed max over experts
  float w2_input_scale = 0.0f;
  float w13_input_global_scale = 0.0f;  // kNvfp4: collapsed (min multiplier = max 1/gs)
  float w2_input_global_scale = 0.0f;
  bool round_weights_to_scale_dtype = true;
  std::vector<int> expert_map;         // global -> local or -1
  std::vector<ExpertWeights> experts;  // local experts
  Tensor correction_bias;              // F32 [num_experts] or empty
  std::vector<std::string> notes;      // load-time remarks (collapsed scales, warnings)

  bool gated() const { return is_gated(activation); }
  int64_t weight_bytes() const;
};

// One parameter a vLLM method registers in create_weights (vllm-moe-system.md §3), for comparing
// layouts with vLLM. dtype "model" means the model's params_dtype (bf16/fp16).
struct MethodParam {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};
// `experts`: local experts; `inter`: per partition; `inter_full`: before tensor parallelism.
std::vector<MethodParam> vllm_method_params(const DispatchDecision& decision, int64_t experts, int64_t hidden,
                                            int64_t inter, int64_t inter_full, bool gated);

// Whether a method's kernels round the dequantized weight to the scale dtype like the
// compressed-tensors reference (Marlin-style int dequantization) or keep it exact and apply scales
// in fp32 (W8A8 styles, NVFP4's global scale). See docs/numerics.md.
bool method_rounds_weights(MoeMethod method);

// Builds the dispatch input of layer `layer` from the model config.
MoeDispatchInput dispatch_input(const ModelConfig& config, int layer, int tp_size);

// Loads one MoE layer (throws qmoe::Error naming the tensor on any problem).
MoeLayer load_moe_layer(const Checkpoint& ckpt, const ModelConfig& config, int layer,
                        const LoadOptions& options);

// Which grouped-GEMM kernels the CUDA backend runs (the CPU backend has one path).
enum class GemmPath {
  kAuto,     // by token count: decode kernels for small batches, prefill kernels from the crossover
  kDecode,   // always the decode kernels
  kPrefill,  // the prefill kernels wherever the layer has one; NotSupported if it has none yet
};
std::string to_string(GemmPath p);

struct ForwardOptions {
  // Round the GEMM1 output and the activation output to the input dtype, as vLLM's kernels do
  // (their intermediate buffers have the activation dtype). Off: keep fp32 intermediates.
  bool round_intermediate = true;
  GemmPath gemm_path = GemmPath::kAuto;
  // Benchmarks: force the prefill kernels' tile configuration i (qmoe bench --gemm-paths
  // prefill:i); -1: the planner's choice. prefill_tile2: GEMM2's own (prefill:i/j), -1: prefill_tile.
  int prefill_tile = -1;
  int prefill_tile2 = -1;
  // CUDA, decode path with skewed routing: experts with at least this many slots run on the 4-bit
  // register kernel, the rest on the decode kernel (the per-expert hybrid, config/gemm_plan.h).
  // -1: the default (QMOE_HYBRID_ROWS, else off: it pays on some shapes only, gemm_plan.h), 0: off.
  int hybrid_busy_rows = -1;
};

// A compute backend. forward() takes hidden_states [T, hidden] (BF16, F16 or F32) and
// router_logits [T, num_experts] (F32, BF16 or F16) and returns the layer output [T, hidden] F32.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Tensor forward(const MoeLayer& layer, const Tensor& hidden_states,
                         const Tensor& router_logits, const ForwardOptions& options) = 0;
};

// The most CPU threads make_backend takes (each holds a row buffer).
inline constexpr int kMaxCpuThreads = 4096;
struct BackendOptions {
  int threads = 0;  // cpu: 0 for hardware concurrency, else 1 to kMaxCpuThreads
  // cuda: whether a layer may hold a repacked copy of its 4-bit weights for the prefill kernel
  // (CudaMoeLayer's repacked_copy); false keeps one copy of the weights.
  bool repacked_copy = true;
};
// "cpu" or "cuda" (NotSupported without a CUDA build or device).
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options);
std::unique_ptr<Backend> make_backend(const std::string& name, int threads = 0);

// The independent reference: single-threaded, float64 accumulation, whole-matrix dequantization,
// plain loops. Slow on purpose; the oracle for the backends.
Tensor reference_forward(const MoeLayer& layer, const Tensor& hidden_states,
                         const Tensor& router_logits, const ForwardOptions& options);

}  // namespace qmoe
