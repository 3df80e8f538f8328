// The CUDA backend's device-level API, for engines: a layer's weights live on the GPU and forward
// runs on the caller's stream with no host synchronisation and no allocation (workspace is sized
// for `max_tokens` at construction), so it can be captured in a CUDA graph. Only present when
// qmoe is built with QMOE_CUDA (QMOE_WITH_CUDA defined).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qmoe/moe.h"

namespace qmoe {

// Number of CUDA devices visible (0 without a driver or device, or in a CPU-only build).
int cuda_device_count();

// Device scratch that the layers of a model share when their forwards run one after the other on
// one stream: a forward uses nothing an earlier forward left in it (the GEMMs read their active-expert
// entries before the bound check that discards stale ones). Size it with the largest
// CudaMoeLayer::workspace_bytes of the layers; allocated on the current device.
class CudaWorkspace {
 public:
  explicit CudaWorkspace(int64_t bytes);
  ~CudaWorkspace();
  CudaWorkspace(const CudaWorkspace&) = delete;
  CudaWorkspace& operator=(const CudaWorkspace&) = delete;
  int64_t bytes() const { return bytes_; }
  int device() const { return device_; }
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  int device_ = 0;
};

class CudaMoeLayer {
 public:
  // Uploads the layer's weights expert by expert (device memory grows by one expert at a time
  // beyond the final weights) and allocates the workspace for up to `max_tokens` tokens. That
  // workspace grows with max_tokens * top_k * (inter + hidden), mostly fp32 intermediates: at 8192
  // tokens ~4.2 GB for a Mixtral-8x7B layer, ~1.6 GB for Qwen3-30B-A3B; the layers of a model can
  // share one (CudaWorkspace).
  // Weight-only layouts without a prefill kernel of their own (act order, 8-bit zero points, k not a
  // multiple of 64, among others: `qmoe inspect --cuda-plan` names each GEMM's) run large batches
  // as bf16 GEMMs (f16 for f16 models) on their weights dequantized a batch of experts at a time
  // into a workspace of at most `dequant_workspace_bytes` (at least one expert's 16-bit weights),
  // allocated only when max_tokens reaches the batch where the automatic path takes that route.
  // Only 16-bit hidden states of the weights' dtype take it. Each layer has its own: an engine short
  // of memory (or running f32 hidden states) passes less (more, smaller batches) or 0 (those layers
  // keep the decode kernels at every size).
  // MXFP4, NVFP4 weight-only and INT4 layers (groups of a multiple of 16 or channel scales, with or
  // without zero points; k a multiple of 64), and W4A8 with INT8 activations and bf16 scales per
  // group of a multiple of 128 or per row, have a prefill kernel of their own instead, which reads a
  // copy of their weights repacked at load (codes as many bytes again as the checkpoint's, scales as
  // 32-bit words), allocated under the same conditions: max_tokens at its crossover and a nonzero
  // budget (the budget's size does not bound it), at most 1024 local experts
  // (repacked_copy_from_tokens, `qmoe inspect --cuda-plan`).
  // `repacked_copy` false keeps one copy of the weights at some prefill speed (plan_grouped_kernel;
  // `qmoe inspect --cuda-plan --no-repacked-copy` shows the plan): W4A16 with groups of >= 64 or
  // channel scales then runs CUTLASS's mixed-input kernel on the checkpoint's codes (its GEMMs about
  // as fast, the activation and the combine's weighting in passes of their own: layers ~1.1x the
  // time), W4A8-INT8 the bf16 kernel on its codes (its weights rounded to bf16), and the others the
  // dequantized path above. A zero budget or more local experts plan the same way
  // (repacked_copy_possible), so those two keep their CUTLASS prefill kernel there too.
  static constexpr int64_t kDefaultDequantWorkspaceBytes = int64_t{1} << 30;
  CudaMoeLayer(const MoeLayer& layer, int max_tokens, int64_t dequant_workspace_bytes = kDefaultDequantWorkspaceBytes,
               bool repacked_copy = true);
  // The same with `workspace` (at least workspace_bytes of this layer, on the current device) as its
  // scratch instead of an allocation of its own; layers sharing one must not run forwards
  // concurrently. Throws qmoe::Error, before uploading anything, if it is too small or elsewhere.
  CudaMoeLayer(const MoeLayer& layer, int max_tokens, std::shared_ptr<CudaWorkspace> workspace,
               int64_t dequant_workspace_bytes = kDefaultDequantWorkspaceBytes, bool repacked_copy = true);
  // The scratch a layer with these arguments uses (its own allocation, or what it needs of a shared
  // CudaWorkspace); the weights and their repacked copies are not in it.
  static int64_t workspace_bytes(const MoeLayer& layer, int max_tokens,
                                 int64_t dequant_workspace_bytes = kDefaultDequantWorkspaceBytes,
                                 bool repacked_copy = true);
  ~CudaMoeLayer();
  CudaMoeLayer(const CudaMoeLayer&) = delete;
  CudaMoeLayer& operator=(const CudaMoeLayer&) = delete;

  // Device pointers: hidden [tokens, hidden] of `hidden_dtype` (BF16/F16/F32), router_logits
  // [tokens, num_experts] F32, out [tokens, hidden] F32. `stream` is a cudaStream_t (nullptr: the
  // default stream). Inputs are not validated on the device: non-finite logits route arbitrarily.
  void forward(const void* hidden, DType hidden_dtype, const float* router_logits, float* out, int tokens,
               void* stream, const ForwardOptions& options) const;

  // The same launches with the two grouped GEMMs left out, or only GEMM2 with keep_gemm1
  // (benchmarks time the rest this way; the output is not the layer's).
  void forward_without_gemms(const void* hidden, DType hidden_dtype, const float* router_logits, float* out, int tokens,
                             void* stream, const ForwardOptions& options, bool keep_gemm1 = false) const;

  int max_tokens() const;
  const MoeLayer& layer() const;
  int64_t device_weight_bytes() const;  // the uploaded weights (and the 4-bit prefill copy)
  // The prefill kernel each GEMM (w13, w2) of a forward of `tokens` runs, by the names `qmoe inspect
  // --cuda-plan` prints, or "decode" where it runs the decode kernels ("decode+<kernel>" where the
  // per-expert hybrid gives busy experts to that prefill kernel). Validates nothing (forward throws
  // where a forced path or tile does not exist).
  std::pair<std::string, std::string> forward_kernels(int tokens, DType hidden_dtype, const ForwardOptions& options) const;

 private:
  struct Impl;
  struct Selection;  // what a forward runs (cuda_backend.cpp)
  Selection choose_plan(int tokens, int kind, const ForwardOptions& options) const;
  // The per-expert hybrid's threshold for such a forward, 0 where it does not run.
  int hybrid_busy_rows_of(int tokens, int kind, const ForwardOptions& options, const Selection& s) const;
  void run(const void* hidden, DType hidden_dtype, const float* router_logits, float* out, int tokens, void* stream,
           const ForwardOptions& options, bool gemm1, bool gemm2) const;
  std::unique_ptr<Impl> impl_;
};

// Device-to-device copy bandwidth in GB/s (bytes read + written over time), measured on `bytes`.
double measure_copy_bandwidth_gbs(size_t bytes = size_t{4} << 30);

// Benchmark timing of one layer: CUDA-graph replays of `hidden.size()` forwards over different
// inputs (consecutive forwards touch different experts, so weights stream from HBM rather than L2).
// `forward_us`: median time of one whole forward; `other_us`: the same with the two grouped GEMMs
// left out (routing, grouping, quantization, activation, combine; the prefill kernels' gathers of
// sorted rows go with the GEMMs); their difference is the GEMMs. With split_gemms also
// `without_gemm2_us`, the forward with GEMM1 but not GEMM2: GEMM2 is what it saves, GEMM1 the rest
// of the GEMMs' time (with a fused activation, GEMM1's epilogue: it goes with GEMM1).
struct CudaTiming {
  double forward_us = 0.0;
  double other_us = 0.0;
  double without_gemm2_us = 0.0;  // (split_gemms only)
  double gemm_us() const { return forward_us - other_us; }
  double gemm2_us() const { return forward_us - without_gemm2_us; }
  double gemm1_us() const { return without_gemm2_us - other_us; }
};
CudaTiming time_cuda_forward(const CudaMoeLayer& layer, const std::vector<Tensor>& hidden,
                             const std::vector<Tensor>& logits, int replays, const ForwardOptions& options,
                             bool split_gemms = false);

}  // namespace qmoe
