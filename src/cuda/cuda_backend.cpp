// CUDA backend host side: weight upload, workspace, the launch sequence of one forward, and the
// Backend adapter (host tensors in and out) used by the CLI and the tests.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>

#include "cpu/moe_math.h"
#include "cuda/chaining.h"
#include "cuda/dequant.h"
#include "cuda/fp4_gemm.h"
#include "cuda/moe_kernels.h"
#include "qmoe/cuda.h"
#include "qmoe/error.h"

namespace qmoe {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(err));
}

// A piece of device memory (a workspace's: the layer's own allocation or a shared CudaWorkspace);
// null when empty.
class DeviceSpan {
 public:
  DeviceSpan() = default;
  DeviceSpan(void* ptr, size_t bytes) : ptr_(bytes ? ptr : nullptr), bytes_(bytes) {}
  template <class T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 protected:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A device allocation freed with the owner.
class DeviceBuffer : public DeviceSpan {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) {
    bytes_ = bytes;
    if (bytes) check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : DeviceSpan(o) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
};

DeviceBuffer upload(const void* src, size_t bytes) {
  DeviceBuffer b(bytes);
  if (bytes) check(cudaMemcpy(b.get(), src, bytes, cudaMemcpyHostToDevice), "upload");
  return b;
}

int act_kind_of(DType d) {
  switch (d) {
    case DType::kBF16: return 0;
    case DType::kF16: return 1;
    case DType::kF32: return 2;
    default: throw Error("hidden_states dtype " + std::string(dtype_name(d)) + " is not BF16, F16 or F32");
  }
}

// The kernel plan_gemm_kernel picked: the tensor-core one (16-bit inputs or codes in `in16`, with
// `in_scale` for codes), else the decode GEMV where the layout allows it, else the generic one. An
// expert gets at most one slot per token (a token's top-k ids are distinct), so `tokens` bounds the
// slots per expert without looking at the routing.
cudaError_t grouped_gemm(const cuda::GroupedGemmParams& p, GemmKernel kernel, const uint16_t* in16,
                         cuda::InputScales in_scale, bool bf16, bool has_g_idx, int tokens, cudaStream_t stream) {
  const int64_t input_rows = p.in_by_token ? tokens : int64_t{tokens} * p.top_k;
  if (kernel != GemmKernel::kCudaCore && mma_takes_input_rows(input_rows, p.layout.cols))
    return cuda::launch_grouped_mma(p, in16, in_scale, bf16, tokens * p.top_k, stream);
  const cudaError_t err = cuda::launch_grouped_gemv(p, has_g_idx, tokens, stream);
  return err == cudaErrorNotSupported ? cuda::launch_grouped_gemm(p, stream) : err;
}

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// One projection's prefill grouped GEMM: its per-group arrays (filled per forward on the device)
// and the CUTLASS instance bound to them at load.
struct PrefillGemm {
  GroupedKernel kind = GroupedKernel::kNone;
  DeviceBuffer arrays;        // problem_mnk, a, b, d, a_scale, b_scale for every local expert
  DeviceBuffer column_scale;  // [experts, n] fp32 weight scales (FP8 block: [experts, ceil(n / 128), ceil(k / 128)])
  DeviceBuffer group_scale;   // weight-only kernels: [experts, k / group, n] bf16 scales (n contiguous)
  cuda::GroupedTcBuffers buf;
  std::unique_ptr<cuda::GroupedTcGemm> gemm[kGroupedTiles];  // by GroupedTile
  // GEMM2 on the bf16 kernel (dense or dequantized weights) or the FP8 one, without biases or a
  // global scale: the same tiles writing the combine's bf16 terms (make_grouped_bf16_terms,
  // make_grouped_fp8_terms), bound to the same arrays.
  std::unique_ptr<cuda::GroupedTcGemm> gemm_terms[kGroupedTiles];
  bool has_terms = false;
  int64_t n = 0, k = 0;
  int batch_experts = 0;  // kDequantBf16 / kDequantF16: experts per dequantized batch (0: no workspace)
  GemmLayout layout;
  const cuda::ExpertTensors* experts = nullptr;  // (device)
  bool has_bias = false;  // added to the output rows after the GEMM
  bool divide_by_global = false;  // NVFP4 dequantized without its global scale (kDequantBf16)
  // kMxfp4Bf16 / kNvfp4Bf16 / kInt4RegsBf16 / kInt4Int8Regs: every expert's weights repacked (codes, then scales; fp4_gemm.h), and
  // pointers to them ([experts] codes, [experts] scales, then [experts] biases where the layer has
  // them; the kernel adds them). Empty: not allocated (the decode kernels run). NVFP4: each expert's
  // global scale ([experts] fp32), which the kernel divides the sums by.
  DeviceBuffer repacked, repacked_ptrs, global_scales;
  // w13 of gated layers: repacked with gate and up rows interleaved (fp4_gemm.h), so the kernel can
  // apply the activation in its epilogue: inter; else 0.
  int64_t gate_up_inter = 0;
};

// The 4-bit register kernel's repacked copy of each expert's weights (`host`: the device tensors'
// pointers; at most cuda::kMaxFp4GemmExperts).
// The weights' columns per scale group (k for one scale per row).
int64_t scale_group_columns(const PrefillGemm& g) {
  return g.layout.strategy == static_cast<int>(Strategy::kChannel) ? g.k : g.layout.group_size;
}
cuda::W4Format w4_format(const PrefillGemm& g) {
  switch (g.kind) {
    case GroupedKernel::kNvfp4Bf16: return cuda::W4Format::kNvfp4;
    case GroupedKernel::kInt4RegsBf16: return cuda::int4_format(g.layout.has_zero_point, scale_group_columns(g));
    case GroupedKernel::kInt4Int8Regs:  // (scales as the layer keeps them: bf16, or fp32 per row as vLLM's)
      return g.layout.scale_kind == 2 ? cuda::W4Format::kInt4Int8F32 : cuda::W4Format::kInt4Int8;
    default: return cuda::W4Format::kMxfp4;
  }
}
void repack_4bit(PrefillGemm& g, const std::vector<cuda::ExpertTensors>& host, int64_t gate_up_inter) {
  const int E = static_cast<int>(host.size());
  const cuda::W4Format format = w4_format(g);
  const int64_t codes_bytes = cuda::fp4_frag_rows(g.n) * g.k / 2;
  const int64_t scales_bytes = cuda::fp4_frag_scale_bytes(format, g.n, g.k);
  const int64_t group = scale_group_columns(g);
  g.repacked = DeviceBuffer(static_cast<size_t>(E * (codes_bytes + scales_bytes)));
  g.gate_up_inter = gate_up_inter;
  std::vector<const void*> ptrs(3 * E);
  std::vector<float> global(E);
  for (int e = 0; e < E; ++e) {
    uint8_t* codes = g.repacked.get<uint8_t>() + e * codes_bytes;
    uint8_t* scales = g.repacked.get<uint8_t>() + E * codes_bytes + e * scales_bytes;
    auto* frag_codes = reinterpret_cast<uint32_t*>(codes);
    auto* frag_scales = reinterpret_cast<uint32_t*>(scales);
    const auto* src = static_cast<const uint8_t*>(host[e].data);
    const auto* src_scales = static_cast<const uint8_t*>(host[e].scale);
    // (Every format has scales; a layer built without them would otherwise be read at null.)
    if (src_scales == nullptr) throw Error("4-bit repack: local expert " + std::to_string(e) + " has no weight scales");
    cudaError_t err;
    if (format == cuda::W4Format::kMxfp4)
      err = cuda::launch_repack_mxfp4(src, src_scales, g.n, g.k, gate_up_inter, frag_codes, frag_scales, nullptr);
    else if (format == cuda::W4Format::kNvfp4)
      err = cuda::launch_repack_nvfp4(src, src_scales, g.n, g.k, gate_up_inter, frag_codes, frag_scales, nullptr);
    else if (cuda::takes_int8_inputs(format))  // (the same device layout as below, int8 fragments)
      err = cuda::launch_repack_int4_int8(static_cast<const int32_t*>(host[e].data), host[e].scale,
                                          format == cuda::W4Format::kInt4Int8F32, g.n, g.k, group, gate_up_inter,
                                          frag_codes, frag_scales, nullptr);
    else  // INT4: signed nibbles on the device (converted at load), bf16 scales
      err = cuda::launch_repack_int4(static_cast<const int32_t*>(host[e].data),
                                     static_cast<const uint16_t*>(host[e].scale), host[e].zero_point, g.n, g.k, group,
                                     format, gate_up_inter, frag_codes, frag_scales, nullptr);
    check(err, "4-bit repack");
    ptrs[e] = codes;
    ptrs[E + e] = scales;
    ptrs[2 * E + e] = host[e].bias;
    global[e] = host[e].global_scale;
  }
  g.repacked_ptrs = upload(ptrs.data(), sizeof(const void*) * ptrs.size());
  if (format == cuda::W4Format::kNvfp4) g.global_scales = upload(global.data(), sizeof(float) * E);
  check(cudaDeviceSynchronize(), "4-bit repack");
}

// Builds projection `L`'s prefill GEMM (weights `experts` on the device, `host` their host copy).
// `terms`: GEMM2, whose bf16 or FP8 kernel also gets its terms instances; `weight_on_input`: their
// terms take no routing weight (it scaled the input).
void make_prefill_gemm(PrefillGemm& g, GroupedKernel kind, const GemmLayout& L, const cuda::ExpertTensors* experts,
                       const std::vector<cuda::ExpertTensors>& host, int num_sms, bool terms = false,
                       bool weight_on_input = false) {
  const int E = static_cast<int>(host.size());
  g.kind = kind;
  g.n = L.rows;
  g.k = L.cols;
  g.layout = L;
  g.experts = experts;
  g.has_bias = !host.empty() && host[0].bias != nullptr;
  g.divide_by_global = dequantizes_to_workspace(kind) && dequant_divides_by_global_scale(L);
  if (dequantizes_in_registers(kind)) return;  // its weights are repacked where the path is taken
  const size_t ptrs = sizeof(void*) * E;
  g.arrays = DeviceBuffer(sizeof(int32_t) * 3 * E + 7 * ptrs);
  char* base = g.arrays.get<char>();
  g.buf.a = reinterpret_cast<const void**>(base);
  g.buf.b = reinterpret_cast<const void**>(base + ptrs);
  g.buf.d = reinterpret_cast<void**>(base + 2 * ptrs);
  g.buf.a_scale = reinterpret_cast<float**>(base + 3 * ptrs);
  g.buf.b_scale = reinterpret_cast<float**>(base + 4 * ptrs);
  g.buf.b_group_scale = reinterpret_cast<const void**>(base + 5 * ptrs);
  g.buf.row_weight = reinterpret_cast<const float**>(base + 6 * ptrs);
  g.buf.problem_mnk = reinterpret_cast<int32_t*>(base + 7 * ptrs);
  check(cudaMemset(base, 0, g.arrays.bytes()), "cudaMemset");
  std::vector<const void*> data(E);
  for (int e = 0; e < E; ++e) data[e] = host[e].data;
  check(cudaMemcpy(g.buf.b, data.data(), ptrs, cudaMemcpyHostToDevice), "upload");
  int64_t group_size = 0;
  if (gemm_of(kind) == GroupedKernel::kBf16 || gemm_of(kind) == GroupedKernel::kF16) {  // unscaled
    g.buf.a_scale = nullptr;
    g.buf.b_scale = nullptr;
    g.buf.b_group_scale = nullptr;
  } else if (dequantizes_weights(kind)) {
    // Scales in the dequantizing mainloop: each expert's [n, k / group] scales as bf16 (f16 models: f16) [k / group, n]
    // (n-contiguous); W4A8's input rows keep their scale (the epilogue's), the others have none.
    if (kind != GroupedKernel::kInt4Codes) g.buf.a_scale = nullptr;
    g.buf.b_scale = nullptr;
    group_size = L.strategy == static_cast<int>(Strategy::kChannel) ? L.cols : L.group_size;
    const int64_t groups_k = L.strategy == static_cast<int>(Strategy::kChannel) ? 1 : L.scale_cols;
    const int64_t per_expert = groups_k * L.rows;
    g.group_scale = DeviceBuffer(sizeof(uint16_t) * E * per_expert);
    const bool f16_scales = kind == GroupedKernel::kInt4F16 || kind == GroupedKernel::kInt8F16;
    check(cuda::launch_group_scales(L, experts, E, f16_scales, g.group_scale.get<uint16_t>(), nullptr), "weight scales");
    std::vector<const void*> scales(E);
    for (int e = 0; e < E; ++e) scales[e] = g.group_scale.get<uint16_t>() + e * per_expert;
    check(cudaMemcpy(g.buf.b_group_scale, scales.data(), ptrs, cudaMemcpyHostToDevice), "upload");
    check(cudaDeviceSynchronize(), "weight scales");
  } else if (kind == GroupedKernel::kFp8Block) {
    // fp32 block scales in the checkpoint's [rows / 128, cols / 128] layout, whatever their dtype.
    g.buf.b_group_scale = nullptr;
    const int64_t per_expert = ((L.rows + 127) / 128) * ((L.cols + 127) / 128);
    g.column_scale = DeviceBuffer(sizeof(float) * E * per_expert);
    check(cuda::launch_block_scales_f32(L, experts, E, g.column_scale.get<float>(), nullptr), "weight scales");
    std::vector<float*> scales(E);
    for (int e = 0; e < E; ++e) scales[e] = g.column_scale.get<float>() + e * per_expert;
    check(cudaMemcpy(g.buf.b_scale, scales.data(), ptrs, cudaMemcpyHostToDevice), "upload");
    check(cudaDeviceSynchronize(), "weight scales");
  } else {
    g.buf.b_group_scale = nullptr;
    g.column_scale = DeviceBuffer(sizeof(float) * E * L.rows);
    check(cuda::launch_expand_column_scales(L, experts, E, g.column_scale.get<float>(), nullptr), "weight scales");
    std::vector<float*> scales(E);
    for (int e = 0; e < E; ++e) scales[e] = g.column_scale.get<float>() + e * L.rows;
    check(cudaMemcpy(g.buf.b_scale, scales.data(), ptrs, cudaMemcpyHostToDevice), "upload");
    check(cudaDeviceSynchronize(), "weight scales");
  }
  // Every tile configuration of the kernel, bound to the same arrays (a few KB each).
  try {
    for (int t = 0; t < kGroupedTiles; ++t) {
      const auto tile = static_cast<GroupedTile>(t);
      switch (kind) {
        case GroupedKernel::kFp8: g.gemm[t] = cuda::make_grouped_fp8(tile, g.buf, E, g.n, g.k, num_sms); break;
        case GroupedKernel::kInt8: g.gemm[t] = cuda::make_grouped_int8(tile, g.buf, E, g.n, g.k, num_sms); break;
        case GroupedKernel::kBf16:
        case GroupedKernel::kDequantBf16: g.gemm[t] = cuda::make_grouped_bf16(tile, g.buf, E, g.n, g.k, num_sms); break;
        case GroupedKernel::kF16:
        case GroupedKernel::kDequantF16: g.gemm[t] = cuda::make_grouped_f16(tile, g.buf, E, g.n, g.k, num_sms); break;
        case GroupedKernel::kInt4Bf16:
        case GroupedKernel::kInt4Codes:
          g.gemm[t] = cuda::make_grouped_int4_bf16(tile, g.buf, E, g.n, g.k, group_size, num_sms);
          break;
        case GroupedKernel::kFp8Block: g.gemm[t] = cuda::make_grouped_fp8_block(tile, g.buf, E, g.n, g.k, num_sms); break;
        case GroupedKernel::kMxfp4Bf16:
        case GroupedKernel::kNvfp4Bf16:
        case GroupedKernel::kInt4RegsBf16:
        case GroupedKernel::kInt4Int8Regs: break;
        case GroupedKernel::kInt8Bf16:
          g.gemm[t] = cuda::make_grouped_int8_bf16(tile, g.buf, E, g.n, g.k, group_size, num_sms);
          break;
        case GroupedKernel::kInt4F16:
          g.gemm[t] = cuda::make_grouped_int4_f16(tile, g.buf, E, g.n, g.k, group_size, num_sms);
          break;
        case GroupedKernel::kInt8F16:
          g.gemm[t] = cuda::make_grouped_int8_f16(tile, g.buf, E, g.n, g.k, group_size, num_sms);
          break;
        case GroupedKernel::kNone: break;
      }
    }
    if (terms && cutlass_writes_terms(kind, L, g.has_bias)) {
      const bool bf16 = gemm_of(kind) == GroupedKernel::kBf16;  // (else FP8)
      cuda::GroupedTcBuffers buf = g.buf;
      if (weight_on_input) buf.row_weight = nullptr;  // (a weight of 1)
      for (int t = 0; t < kGroupedTiles; ++t) {
        const auto tile = static_cast<GroupedTile>(t);
        g.gemm_terms[t] = bf16 ? cuda::make_grouped_bf16_terms(tile, buf, E, g.n, g.k, num_sms)
                               : cuda::make_grouped_fp8_terms(tile, buf, E, g.n, g.k, num_sms);
      }
      g.has_terms = true;
    }
  } catch (const std::exception& e) {
    throw Error(std::string("prefill GEMM setup: ") + e.what());
  }
}

// Whether launch_activation_rows takes GEMM2's input: row-wise 8-bit quantization (FP8 per token or
// static, INT8 per token; FP8 per group of 128 columns where they divide the row) with an activation
// row that fits in shared memory, or 16-bit rows; 4-column chunks.
// (Unquantized bf16 prefill GEMMs take 16-bit rows, which need no quantization.)
bool row_wise(GroupedKernel g, const cpu::ActQuantParams& q, int64_t cols) {
  if (g == GroupedKernel::kInt4Codes)  // the codes as bf16 values
    return q.kind == ActQuant::kFp8PerToken || q.kind == ActQuant::kFp8Static || q.kind == ActQuant::kInt8PerToken;
  if (takes_16bit_rows(g)) return q.kind == ActQuant::kNone;
  if (q.kind == ActQuant::kFp8Group) return q.group_size == 128 && cols % 128 == 0;
  return q.kind == ActQuant::kFp8PerToken || q.kind == ActQuant::kFp8Static || q.kind == ActQuant::kInt8PerToken;
}
bool fused_activation_fits(GroupedKernel g, const cpu::ActQuantParams& q, int64_t inter) {
  return row_wise(g, q, inter) && inter % 4 == 0 && inter * 4 <= cuda::kMaxActivationRowBytes;
}

// Whether launch_input_rows takes GEMM1's input (row-wise quantization or none, 8-column chunks).
bool fused_input_fits(GroupedKernel g, const cpu::ActQuantParams& q, int64_t hidden, int top_k) {
  return row_wise(g, q, hidden) && hidden % 8 == 0 && top_k <= 32;
}

struct CudaMoeLayer::Impl {
  const MoeLayer* layer = nullptr;
  int max_tokens = 0;
  std::vector<DeviceBuffer> weights;  // every expert tensor
  DeviceBuffer w13_experts, w2_experts;  // ExpertTensors[num_local]
  // The GEMM plan (layouts, kernels) for each hidden dtype kind (BF16, F16, F32) and rounding
  // option, made once here rather than on every forward.
  LayerGemmPlan plans[3][2];
  int num_sms = 1;  // of the device current at load
  DeviceBuffer expert_map, correction_bias;
  // Workspace (max_tokens): pieces of `own_workspace` or of `shared_workspace` (plan_layer_workspace).
  DeviceBuffer own_workspace;
  std::shared_ptr<CudaWorkspace> shared_workspace;
  DeviceSpan x, x16, x_scale, u, act, act16, act_scale, y, ids, weights_buf, counts, offsets, sorted_slots, slot_expert, amax, chunks;
  // Prefill path: each GEMM's input rows in expert order with their scales, and where each slot's
  // GEMM2 output row is.
  PrefillGemm prefill1, prefill2;
  DeviceSpan sorted_rows, sorted_scales, slot_position;
  // The decode path's per-expert hybrid (hybrid_max_tokens): the register kernel's act rows of the
  // busy experts (bf16, sorted positions) and each local expert's busy count.
  DeviceSpan hybrid_rows, busy_counts;
  // kDequantBf16's bf16 (kDequantF16's f16) weights of one batch of experts (either projection's).
  DeviceSpan dequantized;
  int64_t weight_bytes = 0;
};

static_assert(CudaMoeLayer::kDefaultDequantWorkspaceBytes == kDefaultDequantWorkspaceBytes,
              "qmoe inspect reports the workspace of the default budget");

CudaWorkspace::CudaWorkspace(int64_t bytes) : bytes_(bytes) {
  if (cuda_device_count() == 0) throw NotSupported("no CUDA device is available");
  if (bytes < 0) throw Error("CudaWorkspace: negative size");
  check(cudaGetDevice(&device_), "cudaGetDevice");
  if (bytes == 0) return;
  check(cudaMalloc(&data_, static_cast<size_t>(bytes)), "cudaMalloc (shared workspace)");
  // Defined contents before any layer's forward (see CudaMoeLayer's own workspace).
  check(cudaMemset(data_, 0, static_cast<size_t>(bytes)), "cudaMemset");
  check(cudaDeviceSynchronize(), "cudaMemset");
}

CudaWorkspace::~CudaWorkspace() {
  if (data_) cudaFree(data_);
}

static_assert(cuda::kMaxFp4GemmExperts == kMaxRegisterKernelExperts);

int64_t CudaMoeLayer::workspace_bytes(const MoeLayer& layer, int max_tokens, int64_t dequant_workspace_bytes,
                                      bool repacked_copy) {
  const bool copy = repacked_copy_possible(layer, dequant_workspace_bytes, repacked_copy);
  return plan_layer_workspace(layer, max_tokens, dequant_workspace_bytes, copy).total_bytes;
}

CudaMoeLayer::CudaMoeLayer(const MoeLayer& layer, int max_tokens, int64_t dequant_workspace_bytes, bool repacked_copy)
    : CudaMoeLayer(layer, max_tokens, nullptr, dequant_workspace_bytes, repacked_copy) {}

CudaMoeLayer::CudaMoeLayer(const MoeLayer& layer, int max_tokens, std::shared_ptr<CudaWorkspace> workspace,
                           int64_t dequant_workspace_bytes, bool repacked_copy)
    : impl_(std::make_unique<Impl>()) {
  if (cuda_device_count() == 0) throw NotSupported("no CUDA device is available");
  if (max_tokens <= 0) throw Error("CudaMoeLayer: max_tokens must be positive");
  Impl& m = *impl_;
  // (Where no repacked copy can be made the layer plans as without one.)
  const bool copy = repacked_copy_possible(layer, dequant_workspace_bytes, repacked_copy);
  // The workspace first: a shared one too small, or on another device, fails before any upload.
  const LayerWorkspace ws = plan_layer_workspace(layer, max_tokens, dequant_workspace_bytes, copy);
  if (workspace) {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    if (workspace->device() != device)
      throw Error("CudaMoeLayer: the shared workspace is on device " + std::to_string(workspace->device()) +
                  ", the current device is " + std::to_string(device));
    if (workspace->bytes() < ws.total_bytes)
      throw Error("CudaMoeLayer: the shared workspace holds " + std::to_string(workspace->bytes()) +
                  " bytes, this layer needs " + std::to_string(ws.total_bytes) + " (CudaMoeLayer::workspace_bytes)");
    m.shared_workspace = std::move(workspace);
  }
  m.layer = &layer;
  m.max_tokens = max_tokens;
  const int E = layer.num_local_experts;
  std::vector<cuda::ExpertTensors> w13(E), w2(E);
  auto put = [&](const Tensor& t) -> const void* {
    if (t.empty()) return nullptr;
    m.weights.push_back(upload(t.raw(), t.size_bytes()));
    m.weight_bytes += static_cast<int64_t>(t.size_bytes());
    return m.weights.back().get();
  };
  for (int e = 0; e < E; ++e) {  // expert by expert: host copies are the canonical tensors
    const ExpertWeights& ew = layer.experts[e];
    for (auto [src, dst, bias] : {std::tuple{&ew.w13, &w13[e], &ew.w13_bias}, std::tuple{&ew.w2, &w2[e], &ew.w2_bias}}) {
      dst->data = put(src->data);
      if (src->format == WeightFormat::kIntPacked && (src->bits == 4 || src->bits == 8))  // signed codes on the device
        check(cuda::launch_codes_to_signed(static_cast<int32_t*>(const_cast<void*>(dst->data)),
                                           static_cast<int64_t>(src->data.size_bytes() / 4), src->bits, nullptr),
              "integer codes");
      dst->scale = put(src->scale);
      dst->zero_point = static_cast<const int8_t*>(put(src->zero_point));
      dst->g_idx = static_cast<const int32_t*>(put(src->g_idx));
      dst->bias = static_cast<const float*>(put(*bias));
      dst->global_scale = src->global_scale;
    }
  }
  check(cudaDeviceSynchronize(), "weight upload");  // the code conversion precedes any caller stream
  for (int kind = 0; kind < 3; ++kind)
    for (int round = 0; round < 2; ++round)
      m.plans[kind][round] = plan_layer_gemms(layer, kind, round == 1, copy);
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&m.num_sms, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
  m.w13_experts = upload(w13.data(), sizeof(cuda::ExpertTensors) * E);
  m.w2_experts = upload(w2.data(), sizeof(cuda::ExpertTensors) * E);
  std::vector<int32_t> map(layer.expert_map.begin(), layer.expert_map.end());
  m.expert_map = upload(map.data(), map.size() * sizeof(int32_t));
  if (!layer.correction_bias.empty())
    m.correction_bias = upload(layer.correction_bias.raw(), layer.correction_bias.size_bytes());

  const int64_t I = layer.inter;
  if (!m.shared_workspace) m.own_workspace = DeviceBuffer(static_cast<size_t>(ws.total_bytes));
  char* base = m.shared_workspace ? static_cast<char*>(m.shared_workspace->data()) : m.own_workspace.get<char>();
  auto piece = [&](LayerWorkspace::Piece p) {
    return DeviceSpan(base + ws.offset[p], static_cast<size_t>(ws.bytes[p]));
  };
  using W = LayerWorkspace;
  m.x = piece(W::kX);
  m.x16 = piece(W::kX16);
  m.x_scale = piece(W::kXScale);
  m.u = piece(W::kU);
  m.act = piece(W::kAct);
  m.act16 = piece(W::kAct16);
  m.act_scale = piece(W::kActScale);
  m.y = piece(W::kY);
  m.ids = piece(W::kIds);
  m.weights_buf = piece(W::kRouterWeights);
  m.counts = piece(W::kCounts);
  m.offsets = piece(W::kOffsets);
  m.sorted_slots = piece(W::kSortedSlots);
  m.slot_expert = piece(W::kSlotExpert);
  m.amax = piece(W::kAmax);
  m.chunks = piece(W::kChunks);
  m.sorted_rows = piece(W::kSortedRows);
  m.sorted_scales = piece(W::kSortedScales);
  m.slot_position = piece(W::kSlotPosition);
  m.dequantized = piece(W::kDequantized);
  m.hybrid_rows = piece(W::kHybridRows);
  m.busy_counts = piece(W::kBusyCounts);
  // Defined contents in a workspace of its own: the decode GEMM blocks read their chunk before
  // checking it against the count (a shared workspace is zeroed when made, then holds what forwards
  // left).
  if (!m.shared_workspace) check(cudaMemset(m.chunks.get(), 0, m.chunks.bytes()), "cudaMemset");

  // Prefill kernels for the projections that have one (plan_prefill_kernels: one whatever the
  // hidden dtype; the dtypes that do not plan it run the decode kernels).
  const LayerGemmPlan prefill_plan = plan_prefill_kernels(layer, copy);
  const GroupedKernel g1 = prefill_plan.g1, g2 = prefill_plan.g2;
  if (g1 != GroupedKernel::kNone)
    make_prefill_gemm(m.prefill1, g1, prefill_plan.w13, m.w13_experts.get<cuda::ExpertTensors>(), w13, m.num_sms);
  if (g2 != GroupedKernel::kNone)
    make_prefill_gemm(m.prefill2, g2, prefill_plan.w2, m.w2_experts.get<cuda::ExpertTensors>(), w2, m.num_sms, true,
                      layer.routing.router_weight_on_input);
  // kDequantBf16 / kDequantF16: the batches its workspace piece holds (0: the decode kernels).
  m.prefill1.batch_experts = ws.dequant.w13;
  m.prefill2.batch_experts = ws.dequant.w2;
  // The 4-bit register kernel (planned only where repacked_copy_possible): the repacked weights,
  // from max_tokens at its crossover (repacked_copy_from_tokens). (Its bf16-input formats plan only
  // for bf16 hidden states; W4A8-INT8 takes int8 rows quantized from any.)
  for (auto [g, host] : {std::pair{&m.prefill1, &w13}, std::pair{&m.prefill2, &w2}})
    if (dequantizes_in_registers(g->kind) &&
        max_tokens >= grouped_min_tokens(g->kind, layer.num_experts, layer.top_k, layer.inter, has_row_scales(g->layout))) {
      repack_4bit(*g, *host, g == &m.prefill1 && layer.gated() ? I : 0);
      m.weight_bytes += static_cast<int64_t>(g->repacked.bytes());
    }
}

namespace {
// kDequantBf16 / kDequantF16 without its workspace, the FP4 kernel without its repacked weights.
bool unprepared(const PrefillGemm& g) {
  return (dequantizes_to_workspace(g.kind) && g.batch_experts == 0) ||
         (dequantizes_in_registers(g.kind) && g.repacked.bytes() == 0);
}

}  // namespace

// What a forward of `tokens` runs: the plan of its hidden dtype and rounding, each GEMM's prefill
// kernel, and whether each GEMM takes it (else the decode kernels). Checks nothing; run() does.
struct CudaMoeLayer::Selection {
  const LayerGemmPlan* plan;
  const PrefillGemm *pre1, *pre2;
  bool prefill1, prefill2;
};
CudaMoeLayer::Selection CudaMoeLayer::choose_plan(int tokens, int kind, const ForwardOptions& options) const {
  const Impl& m = *impl_;
  const MoeLayer& L = *m.layer;
  Selection s;
  s.plan = &m.plans[kind][options.round_intermediate ? 1 : 0];
  s.pre1 = &m.prefill1;
  s.pre2 = &m.prefill2;
  auto prefill = [&](GroupedKernel g, const PrefillGemm& gemm) {
    if (g != GroupedKernel::kNone && unprepared(gemm)) return false;
    switch (options.gemm_path) {
      case GemmPath::kDecode: return false;
      case GemmPath::kPrefill: return g != GroupedKernel::kNone;
      default: return use_grouped_kernel(g, tokens, L.num_experts, L.top_k, L.inter, has_row_scales(gemm.layout));
    }
  };
  s.prefill1 = prefill(s.plan->g1, *s.pre1);
  s.prefill2 = prefill(s.plan->g2, *s.pre2);
  return s;
}

CudaMoeLayer::~CudaMoeLayer() = default;

// The per-expert hybrid (gemm_plan.h hybrid_busy_rows): on the automatic path's decode forwards of
// bf16 models with vLLM's rounding, where both GEMMs have the register kernel's repacked copy with
// the fused activation and terms epilogues and the workspace holds the act rows. (Read once:
// QMOE_HYBRID_ROWS, the default threshold, for A/B runs.)
int CudaMoeLayer::hybrid_busy_rows_of(int tokens, int kind, const ForwardOptions& options, const Selection& s) const {
  static const int env_hybrid_rows = [] {
    const char* env = std::getenv("QMOE_HYBRID_ROWS");
    return env ? std::max(0, static_cast<int>(std::strtol(env, nullptr, 10))) : 0;
  }();
  const Impl& m = *impl_;
  const MoeLayer& L = *m.layer;
  const PrefillGemm &reg1 = m.prefill1, &reg2 = m.prefill2;
  const int64_t num_slots = int64_t{tokens} * L.top_k;
  const bool fits =
      options.gemm_path == GemmPath::kAuto && !s.prefill1 && !s.prefill2 && kind == 0 && options.round_intermediate &&
      dequantizes_in_registers(reg1.kind) && dequantizes_in_registers(reg2.kind) && !unprepared(reg1) &&
      !unprepared(reg2) && reg1.gate_up_inter > 0 && cuda::fuses_activation(static_cast<int>(L.activation)) &&
      cpu::gemm2_act_quant(L).kind == ActQuant::kNone &&
      gemm2_writes_terms(reg2.kind, s.plan->w2, reg2.has_bias, kind, options.round_intermediate) &&
      static_cast<int64_t>(m.hybrid_rows.bytes()) >= 2 * num_slots * L.inter &&
      reinterpret_cast<uintptr_t>(m.sorted_rows.get()) % 16 == 0;
  if (!fits) return 0;
  return hybrid_busy_rows(reg1.kind, reg2.kind, num_slots,
                          options.hybrid_busy_rows >= 0 ? options.hybrid_busy_rows : env_hybrid_rows);
}

std::pair<std::string, std::string> CudaMoeLayer::forward_kernels(int tokens, DType hidden_dtype,
                                                                  const ForwardOptions& options) const {
  const int kind = act_kind_of(hidden_dtype);
  const Selection s = choose_plan(tokens, kind, options);
  if (hybrid_busy_rows_of(tokens, kind, options, s) > 0)
    return {"decode+" + to_string(impl_->prefill1.kind), "decode+" + to_string(impl_->prefill2.kind)};
  return {s.prefill1 ? to_string(s.plan->g1) : "decode", s.prefill2 ? to_string(s.plan->g2) : "decode"};
}
int CudaMoeLayer::max_tokens() const { return impl_->max_tokens; }
const MoeLayer& CudaMoeLayer::layer() const { return *impl_->layer; }
int64_t CudaMoeLayer::device_weight_bytes() const { return impl_->weight_bytes; }

void CudaMoeLayer::forward(const void* hidden, DType hidden_dtype, const float* router_logits, float* out, int tokens,
                           void* stream, const ForwardOptions& options) const {
  run(hidden, hidden_dtype, router_logits, out, tokens, stream, options, true, true);
}

void CudaMoeLayer::forward_without_gemms(const void* hidden, DType hidden_dtype, const float* router_logits, float* out,
                                         int tokens, void* stream, const ForwardOptions& options, bool keep_gemm1) const {
  run(hidden, hidden_dtype, router_logits, out, tokens, stream, options, keep_gemm1, false);
}

void CudaMoeLayer::run(const void* hidden, DType hidden_dtype, const float* router_logits, float* out, int tokens,
                       void* stream_ptr, const ForwardOptions& options, bool gemm1, bool gemm2) const {
  const Impl& m = *impl_;
  const MoeLayer& L = *m.layer;
  for (auto [field, t] : {std::pair{"prefill_tile", options.prefill_tile}, std::pair{"prefill_tile2", options.prefill_tile2}})
    if (t >= kGroupedTiles)
      throw Error(std::string("ForwardOptions::") + field + " " + std::to_string(t) + ": there are " +
                  std::to_string(kGroupedTiles) + " tile configurations");
  if (tokens < 0 || tokens > m.max_tokens)
    throw Error("CudaMoeLayer::forward: " + std::to_string(tokens) + " tokens, workspace holds " +
                std::to_string(m.max_tokens));
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const int kind = act_kind_of(hidden_dtype);
  const int k = L.top_k, E = L.num_local_experts;
  const int64_t H = L.hidden, I = L.inter, num_slots = static_cast<int64_t>(tokens) * k;
  const Selection chosen = choose_plan(tokens, kind, options);
  const LayerGemmPlan& plan = *chosen.plan;
  const PrefillGemm &pre1 = *chosen.pre1, &pre2 = *chosen.pre2;
  // Decode or prefill kernels, per projection (the prefill ones read the decode kernels' codes).
  if (options.gemm_path == GemmPath::kPrefill && plan.g1 == GroupedKernel::kNone && plan.g2 == GroupedKernel::kNone)
    throw NotSupported("prefill GEMMs for this scheme are not supported yet");
  // A forced tile must exist for the prefill kernel it is forced on (checked before any launch).
  const int forced_tile2 = options.prefill_tile2 >= 0 ? options.prefill_tile2 : options.prefill_tile;
  if (options.gemm_path != GemmPath::kDecode)
    for (auto [g, tile] : {std::pair{plan.g1, options.prefill_tile}, std::pair{plan.g2, forced_tile2}})
      if (tile >= 0 && g != GroupedKernel::kNone && !grouped_tile_built(g, static_cast<GroupedTile>(tile)))
        throw NotSupported("prefill tile " + to_string(static_cast<GroupedTile>(tile)) + " (" + std::to_string(tile) +
                           ") is not built for the " + to_string(g) + " kernel");
  if (options.gemm_path == GemmPath::kPrefill)
    for (const PrefillGemm* g : {&pre1, &pre2})
      if (unprepared(*g))
        throw NotSupported(std::string("prefill GEMMs of this layer ") +
                           (dequantizes_to_workspace(g->kind)
                                ? "dequantize its weights into a workspace"
                                : "run on a repacked copy of its weights (at most " +
                                      std::to_string(cuda::kMaxFp4GemmExperts) + " local experts)") +
                           " that is allocated only for max_tokens >= " +
                           std::to_string(grouped_min_tokens(g->kind, L.num_experts, k, L.inter, has_row_scales(g->layout))) +
                           " and a nonzero budget "
                           "(this layer: " + std::to_string(m.max_tokens) + " tokens)");
  const bool prefill1 = chosen.prefill1, prefill2 = chosen.prefill2;
  const int busy_rows = hybrid_busy_rows_of(tokens, kind, options, chosen);
  const PrefillGemm &reg1 = m.prefill1, &reg2 = m.prefill2;  // (the hybrid's register kernels)
  const bool hybrid = busy_rows > 0;
  // (The hybrid's register kernels are plain launches inside the chain: a plain kernel starts after
  // its predecessor completes and never releases early, which keeps launch.cuh's protocol.)
  const cuda::ChainedLaunchScope chained(!prefill1 && !prefill2);

  cuda::RoutingParams rp;
  rp.logits = router_logits;
  rp.correction_bias = m.correction_bias.get<float>();
  rp.num_tokens = tokens;
  rp.num_experts = L.num_experts;
  rp.top_k = k;
  rp.scoring = static_cast<int>(L.routing.scoring);
  rp.renormalize = L.routing.renormalize;
  rp.num_expert_group = L.routing.num_expert_group;
  rp.topk_group = L.routing.topk_group;
  rp.routed_scaling_factor = L.routing.routed_scaling_factor;
  rp.custom_llama4 = L.routing.custom_llama4;
  rp.ids = m.ids.get<int32_t>();
  rp.weights = m.weights_buf.get<float>();

  cuda::GroupingParams gp;
  gp.ids = rp.ids;
  gp.expert_map = m.expert_map.get<int32_t>();
  gp.num_slots = static_cast<int>(num_slots);
  gp.num_experts = L.num_experts;
  gp.num_local_experts = E;
  gp.counts = m.counts.get<int32_t>();
  gp.expert_offsets = m.offsets.get<int32_t>();
  gp.sorted_slots = m.sorted_slots.get<int32_t>();
  gp.slot_expert = m.slot_expert.get<int32_t>();
  gp.slot_position = m.slot_position.get<int32_t>();  // null without prefill kernels
  gp.num_chunks = m.chunks.get<int32_t>();  // (the piece: the count, then the pairs)
  gp.chunks = gp.num_chunks + 1;
  // (QMOE_MMA_CHUNK_SLOTS, for A/B runs: 8 or 16, or a multiple of kMmaChunkSlots; 1073741824: one
  // chunk per expert, as before the chunks. Read once.)
  static const int chunk_slots = [] {
    const char* env = std::getenv("QMOE_MMA_CHUNK_SLOTS");
    const long v = env ? std::strtol(env, nullptr, 10) : 0;
    const bool valid = v == kMmaMinChunkSlots || v == 2 * kMmaMinChunkSlots ||
                       (v >= kMmaChunkSlots && v <= (1 << 30) && v % kMmaChunkSlots == 0);
    return valid ? static_cast<int>(v) : kMmaChunkSlots;
  }();
  gp.chunk_slots = mma_chunk_slots(num_slots, E, chunk_slots);
  if (hybrid) {
    gp.busy_rows = busy_rows;
    gp.busy_counts = m.busy_counts.get<int32_t>();
  }
  // (Chained launches: the decode GEMMs read the grouping before they wait, so a chained kernel
  // that waits first must run between the grouping and each GEMM; the input conversion and the
  // activation do. launch.cuh.)
  check(cuda::launch_routing_and_grouping(rp, gp, stream), "routing and grouping");

  const cpu::ActQuantParams q1 = cpu::gemm1_act_quant(L), q2 = cpu::gemm2_act_quant(L);
  // The tensor-core kernels take GEMM inputs that are exactly 16-bit, or the codes of an activation
  // quantization (config/gemm_plan.h decides).
  const GemmInput &in1 = plan.in1, &in2 = plan.in2;
  const GemmKernel k1 = plan.k1, k2 = plan.k2;
  const bool mma1 = k1 == GemmKernel::kTensorCore16, codes1 = k1 == GemmKernel::kTensorCoreCodes;
  const bool mma2 = k2 == GemmKernel::kTensorCore16, codes2 = k2 == GemmKernel::kTensorCoreCodes;
  // The prefill GEMMs: the input rows in expert order (codes as fp8 e4m3), then the grouped GEMM
  // writing its rows in the same order.
  auto gather_rows = [&](const PrefillGemm& g, const uint16_t* codes, const float* scales, bool by_token,
                         int64_t cols, bool busy_only = false) {
    cuda::GatherParams gr;
    gr.in16 = codes;
    gr.in_scale = scales;
    gr.sorted_slots = gp.sorted_slots;
    gr.total_rows = gp.expert_offsets + E;
    gr.max_rows = static_cast<int>(num_slots);
    gr.by_token = by_token;
    gr.top_k = k;
    gr.k = cols;
    gr.out_kind = g.kind == GroupedKernel::kInt4Codes ? 3
                  : takes_16bit_rows(g.kind)         ? 0
                  : g.kind == GroupedKernel::kInt8 || g.kind == GroupedKernel::kInt4Int8Regs ? 2
                                                     : 1;
    gr.scales_per_row = std::max<int64_t>(1, grouped_scales_per_row(g.kind, cols));
    gr.a_rows = m.sorted_rows.get();
    gr.a_scale_rows = m.sorted_scales.get<float>();
    if (busy_only) {
      gr.busy_counts = m.busy_counts.get<int32_t>();
      gr.slot_expert = gp.slot_expert;
    }
    check(cuda::launch_gather_rows(gr, stream), "prefill gather");
  };
  auto finish_rows = [&](const PrefillGemm& g, float* d) {
    if (!g.has_bias && !g.divide_by_global) return;
    cuda::ExpertRowsParams fr;
    fr.d_rows = d;
    fr.n = g.n;
    fr.sorted_slots = gp.sorted_slots;
    fr.slot_expert = gp.slot_expert;
    fr.experts = g.experts;
    fr.total_rows = gp.expert_offsets + E;
    fr.max_rows = static_cast<int>(num_slots);
    fr.divide_by_global = g.divide_by_global;
    check(cuda::launch_finish_expert_rows(fr, stream), "prefill rows: global scale and bias");
  };
  // `rows`: the GEMM's sorted input rows. The 4-bit register kernel only: `act_rows` (GEMM1 on an
  // interleaved w13), the activation's bf16 rows, written by the GEMM's epilogue instead of d.
  // `terms` (GEMM2 on the register kernel or with PrefillGemm::has_terms): the combine's weighted
  // 16-bit terms instead of d (Fp4GemmParams::terms; the terms instances read each row's weight
  // from the last slots of sorted_scales, after the input scales: plan_layer_workspace).
  // `forced_tile`: the tile ForwardOptions forces on this GEMM, -1 for the planner's.
  // `expert_rows` (the hybrid, register kernel only): the rows of each expert to multiply.
  auto run_prefill = [&](const PrefillGemm& g, int forced_tile, void* rows, float* d, uint16_t* act_rows,
                         uint16_t* terms = nullptr, const int32_t* expert_rows = nullptr) {
    cuda::GroupedSetupParams sp;
    sp.buf = g.buf;
    sp.expert_offsets = gp.expert_offsets;
    sp.groups = E;
    sp.n = g.n;
    sp.k = g.k;
    sp.a_rows = rows;
    sp.elem_bytes = takes_16bit_rows(g.kind) ? 2 : 1;
    sp.a_scale_rows = m.sorted_scales.get<float>();
    sp.scales_per_row = std::max<int64_t>(1, grouped_scales_per_row(g.kind, g.k));
    sp.d_rows = d;
    const bool weighted_terms = terms != nullptr && !L.routing.router_weight_on_input;
    float* row_weights = weighted_terms ? m.sorted_scales.get<float>() + (m.sorted_scales.bytes() / sizeof(float) -
                                                                          static_cast<int64_t>(m.max_tokens) * k)
                                        : nullptr;  // [max_tokens * top_k]
    if (terms != nullptr) {
      sp.terms_rows = terms;
      sp.row_weights = row_weights;
    }
    const int tile = forced_tile >= 0 ? forced_tile
                                      : static_cast<int>(plan_grouped_tile(g.kind, num_slots, L.num_experts, g.k));
    sp.transposed = grouped_tile_swapped(g.kind, static_cast<GroupedTile>(tile));
    if (dequantizes_in_registers(g.kind)) {
      cuda::Fp4GemmParams fp;
      fp.format = w4_format(g);
      fp.global_scales = g.global_scales.get<float>();  // (NVFP4's; null otherwise)
      fp.frag_codes = g.repacked_ptrs.get<const uint32_t* const>();
      fp.frag_scales = fp.frag_codes + E;
      if (g.has_bias) fp.bias = reinterpret_cast<const float* const*>(fp.frag_codes + 2 * E);
      fp.expert_offsets = gp.expert_offsets;
      fp.expert_rows = expert_rows;
      fp.x = rows;
      fp.x_scale = m.sorted_scales.get<float>();  // (int8 rows: one scale per row)
      if (cuda::takes_int8_inputs(fp.format)) {
        // (Groups past the int32 sums' limit promote per 128-column k-tile: each k-tile's scales
        // are its group's.)
        const int64_t group = scale_group_columns(g);
        fp.scale_group = static_cast<int>(group <= cuda::kMaxInt8ScaleGroup ? group : 128);
      }
      fp.d = d;
      fp.experts = E;
      fp.n = static_cast<int>(g.n);
      fp.k = static_cast<int>(g.k);
      fp.total_rows = static_cast<int>(num_slots);
      fp.tile_inputs = register_tile_inputs(static_cast<GroupedTile>(tile));  // (kInt4Int8Regs: kSmall only)
      fp.num_sms = m.num_sms;
      fp.gate_up_inter = static_cast<int>(g.gate_up_inter);
      fp.act_rows = act_rows;
      fp.activation = static_cast<int>(L.activation);
      fp.limit = L.swiglu_limit;
      fp.round = options.round_intermediate;
      fp.terms = terms;
      fp.row_slots = gp.sorted_slots;
      fp.slot_weights = L.routing.router_weight_on_input ? nullptr : rp.weights;
      // (The global scale and the biases are applied by the kernel.)
      if (num_slots > 0) check(cuda::launch_fp4_grouped_gemm(fp, stream), "prefill GEMM");
      return;
    }
    if (weighted_terms)
      check(cuda::launch_sorted_row_weights(rp.weights, gp.sorted_slots, gp.expert_offsets + E,
                                            static_cast<int>(num_slots), row_weights, stream),
            "prefill terms: row weights");
    cuda::GroupedTcGemm* gemm = (terms != nullptr ? g.gemm_terms : g.gemm)[tile].get();
    if (!dequantizes_to_workspace(g.kind)) {
      check(cuda::launch_grouped_setup(sp, stream), "prefill setup");
      if (num_slots > 0) check(gemm->run(stream), "prefill GEMM");
      if (terms == nullptr) finish_rows(g, d);
      return;
    }
    // Batches of experts: dequantize their weights, then the GEMM on their rows only.
    cuda::DequantParams dq;
    dq.layout = g.layout;
    dq.experts = g.experts;
    dq.expert_offsets = gp.expert_offsets;
    dq.out = m.dequantized.get<uint16_t>();
    dq.f16 = g.kind == GroupedKernel::kDequantF16;
    cuda::DequantBatch batch;
    batch.b_rows = dq.out;
    batch.b_group_bytes = 2 * g.n * g.k;
    for (int first = 0; first < E && num_slots > 0; first += g.batch_experts) {
      dq.first = first;
      dq.count = std::min(g.batch_experts, E - first);
      check(cuda::launch_dequantize(dq, stream), "weight dequantization");
      batch.begin = first;
      batch.end = first + dq.count;
      check(cuda::launch_grouped_setup_batch(sp, batch, stream), "prefill setup");
      check(gemm->run(stream), "prefill GEMM");
    }
    if (terms == nullptr) finish_rows(g, d);
  };
  // (The prefill kernels' 16-bit rows are gathered from the tensor-core input layout, also where
  // the decode kernel is another one: act order.)
  const bool rows16_1 = prefill1 && takes_16bit_rows(plan.g1), rows16_2 = prefill2 && takes_16bit_rows(plan.g2);
  uint16_t* x16 = mma1 || codes1 || rows16_1 ? m.x16.get<uint16_t>() : nullptr;
  uint16_t* act16 = mma2 || codes2 || rows16_2 ? m.act16.get<uint16_t>() : nullptr;
  float* x_scale = codes1 ? m.x_scale.get<float>() : nullptr;
  float* act_scale = codes2 ? m.act_scale.get<float>() : nullptr;
  const float* router_weights = L.routing.router_weight_on_input ? rp.weights : nullptr;
  auto to_cuda = [](const cpu::ActQuantParams& q, uint16_t* codes16, float* row_scale) {
    return cuda::ActQuantParams{static_cast<int>(q.kind), q.group_size, q.static_scale, q.global_scale, codes16, row_scale};
  };
  // GEMM1 on the prefill kernels with a row-wise 8-bit or a 16-bit input: the hidden states go
  // straight to its sorted rows (no fp32 copy, no permuted 16-bit copy, no gather).
  // (16-byte loads of the caller's hidden states: an unaligned view takes the unfused steps.)
  const bool fused_input = prefill1 && fused_input_fits(plan.g1, q1, H, k) && reinterpret_cast<uintptr_t>(hidden) % 16 == 0;
  if (fused_input) {
    cuda::InputRowsParams ir;
    ir.hidden_states = hidden;
    ir.dtype_kind = kind;
    ir.router_weights = router_weights;
    ir.round = options.round_intermediate;
    ir.q = to_cuda(q1, nullptr, nullptr);
    ir.q.bf16_rows = plan.g1 == GroupedKernel::kInt4Codes;
    ir.tokens = tokens;
    ir.hidden = H;
    ir.top_k = k;
    ir.slot_expert = gp.slot_expert;
    ir.slot_position = gp.slot_position;
    ir.a_rows = m.sorted_rows.get();
    ir.a_scale_rows = m.sorted_scales.get<float>();
    check(cuda::launch_input_rows(ir, stream), "gemm1 input rows");
  } else {
    check(cuda::launch_convert_input(hidden, kind, tokens, H, router_weights, options.round_intermediate,
                                     m.x.get<float>(), mma1 || rows16_1 ? x16 : nullptr, stream),
          "convert");
    check(cuda::launch_fake_quantize(to_cuda(q1, codes1 ? x16 : nullptr, x_scale), m.x.get<float>(), H, nullptr,
                                     tokens, nullptr, m.amax.get<float>(), stream),
          "gemm1 input quantization");
  }

  cuda::GroupedGemmParams g1;
  g1.layout = plan.w13;
  g1.experts = m.w13_experts.get<cuda::ExpertTensors>();
  g1.expert_offsets = gp.expert_offsets;
  g1.sorted_slots = gp.sorted_slots;
  g1.num_local_experts = E;
  g1.chunks = gp.chunks;
  g1.num_chunks = gp.num_chunks;
  g1.chunk_slots = gp.chunk_slots;
  g1.max_chunks = static_cast<int>(mma_max_chunks(num_slots, E, gp.chunk_slots));  // <= kMaxGridRows (mma_chunk_slots)
  g1.in = m.x.get<float>();
  g1.in_by_token = true;
  g1.top_k = k;
  g1.out = m.u.get<float>();
  g1.num_sms = m.num_sms;
  // GEMM1 on the 4-bit register kernel with an interleaved w13, and GEMM2 taking bf16 rows: GEMM1's
  // epilogue applies the activation and writes GEMM2's sorted rows (into u's memory: GEMM1 still
  // reads sorted_rows), so the fp32 u never goes through memory.
  // (QMOE_FUSED_ACTIVATION=0, for A/B runs: the activation kernel instead. Read once.)
  static const bool fuse_activation = [] {
    const char* env = std::getenv("QMOE_FUSED_ACTIVATION");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  const bool fused_act1 = fuse_activation && prefill1 && prefill2 && dequantizes_in_registers(plan.g1) && pre1.gate_up_inter > 0 &&
                          cuda::fuses_activation(static_cast<int>(L.activation)) &&
                          takes_16bit_rows(plan.g2) && plan.g2 != GroupedKernel::kInt4Codes &&
                          q2.kind == ActQuant::kNone && fused_activation_fits(plan.g2, q2, I);
  uint16_t* act_rows = fused_act1 ? m.u.get<uint16_t>() : nullptr;  // [slots, I] bf16
  if (gemm1 && prefill1) {
    if (!fused_input) gather_rows(pre1, x16, x_scale, true, H);
    run_prefill(pre1, options.prefill_tile, m.sorted_rows.get(), g1.out, act_rows);
  }
  else if (gemm1) check(grouped_gemm(g1, k1, x16, {x_scale, in1.act_group}, kind == 0, plan.w13_has_g_idx, tokens, stream), "gemm1");
  // The hybrid's busy experts on the register kernel, in 256-row tiles (the default tile: their rows
  // are unknown on the host, and many where the layer's mean is few): the busy experts' sorted rows
  // gathered (the kernel reads no others), the activation's bf16 rows (its fused epilogue) into the
  // hybrid piece; the decode kernels above and below take the other experts (the grouping gave the
  // busy ones no chunks).
  constexpr int kHybridTile = static_cast<int>(GroupedTile::kLarge);
  uint16_t* hybrid_terms = hybrid ? reinterpret_cast<uint16_t*>(m.sorted_rows.get()) : nullptr;  // (GEMM2's, below)
  if (gemm1 && hybrid) {
    gather_rows(reg1, x16, x_scale, true, H, true);
    run_prefill(reg1, kHybridTile, m.sorted_rows.get(), nullptr, m.hybrid_rows.get<uint16_t>(), nullptr,
                m.busy_counts.get<int32_t>());
  }

  cuda::ActivationParams ap;
  ap.activation = static_cast<int>(L.activation);
  ap.limit = L.swiglu_limit;
  ap.inter = I;
  ap.gated = L.gated();
  ap.round = options.round_intermediate;
  ap.dtype_kind = kind;
  ap.sorted_slots = gp.sorted_slots;
  ap.total_slots = gp.expert_offsets + E;
  ap.max_slots = static_cast<int>(num_slots);
  ap.u = m.u.get<float>();
  ap.u_sorted = prefill1;
  ap.act = m.act.get<float>();
  ap.act16 = mma2 || rows16_2 ? act16 : nullptr;
  // Both GEMMs on the prefill kernels with a row-wise 8-bit or a 16-bit input: the activation (and
  // quantization) writes GEMM2's sorted rows directly (no fp32 activation, no permuted copy, no
  // gather).
  const bool fused_act = prefill1 && prefill2 && fused_activation_fits(plan.g2, q2, I);
  if (fused_act1) {
    // (done by GEMM1)
  } else if (fused_act) {
    cuda::ActQuantParams rows_q = to_cuda(q2, nullptr, nullptr);
    rows_q.bf16_rows = plan.g2 == GroupedKernel::kInt4Codes;
    check(cuda::launch_activation_rows(ap, rows_q, m.sorted_rows.get(), m.sorted_scales.get<float>(), stream),
          "activation and gemm2 input quantization");
  } else {
    check(cuda::launch_activation(ap, stream), "activation");
    check(cuda::launch_fake_quantize(to_cuda(q2, codes2 ? act16 : nullptr, act_scale), m.act.get<float>(), I,
                                     gp.sorted_slots, static_cast<int>(num_slots), gp.expert_offsets + E,
                                     m.amax.get<float>(), stream),
          "gemm2 input quantization");
  }

  cuda::GroupedGemmParams g2 = g1;
  g2.layout = plan.w2;
  g2.experts = m.w2_experts.get<cuda::ExpertTensors>();
  g2.in = m.act.get<float>();
  g2.in_by_token = false;
  g2.out = m.y.get<float>();
  // GEMM2 on the register kernel (bf16 rows), or on the bf16 / FP8 kernel with its terms instances, with
  // the combine rounding each weighted term to bf16: the kernel writes those terms (in y's memory,
  // half its size), the combine only sums them. (Without the GEMMs too, so that the timing of the
  // rest reads the same bytes as the forward. QMOE_CUTLASS_TERMS=0, for A/B runs: the CUTLASS
  // kernels write fp32 rows instead. Read once.)
  static const bool cutlass_terms = [] {
    const char* env = std::getenv("QMOE_CUTLASS_TERMS");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  const bool terms2 = gemm2_writes_terms(plan.g2, plan.w2, pre2.has_bias, kind, options.round_intermediate) &&
                      (dequantizes_in_registers(plan.g2) || (cutlass_terms && pre2.has_terms));
  uint16_t* terms = prefill2 && terms2 ? reinterpret_cast<uint16_t*>(m.y.get<float>()) : nullptr;
  if (gemm2 && prefill2) {
    if (!fused_act) gather_rows(pre2, act16, act_scale, false, I);
    run_prefill(pre2, forced_tile2, fused_act1 ? static_cast<void*>(act_rows) : m.sorted_rows.get(), g2.out,
                nullptr, terms);
  }
  else if (gemm2) check(grouped_gemm(g2, k2, act16, {act_scale, in2.act_group}, kind == 0, plan.w2_has_g_idx, tokens, stream), "gemm2");
  // The busy experts' GEMM2 on the register kernel: their act rows in, the combine's weighted bf16
  // terms out (into the gathered rows' memory, which GEMM1 has finished reading).
  if (gemm2 && hybrid)
    run_prefill(reg2, kHybridTile, m.hybrid_rows.get(), nullptr, nullptr, hybrid_terms,
                m.busy_counts.get<int32_t>());

  cuda::CombineParams cp;
  cp.y = m.y.get<float>();
  cp.terms = terms;
  cp.weights = rp.weights;
  cp.slot_expert = gp.slot_expert;
  cp.slot_position = prefill2 || hybrid ? gp.slot_position : nullptr;  // y rows in sorted order (also untimed GEMMs: same reads)
  if (hybrid) {
    cp.busy_counts = m.busy_counts.get<int32_t>();
    cp.busy_terms = hybrid_terms;
  }
  cp.tokens = tokens;
  cp.hidden = H;
  cp.top_k = k;
  cp.weight_on_input = L.routing.router_weight_on_input;
  cp.round = options.round_intermediate;
  cp.dtype_kind = kind;
  cp.out = out;
  check(cuda::launch_combine(cp, stream), "combine");
}

namespace {

// Median over `replays` of one graph launch (which runs `per_graph` forwards), per forward.
double time_graph(cudaGraphExec_t exec, cudaStream_t stream, int replays, int per_graph) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  for (int i = 0; i < 3; ++i) check(cudaGraphLaunch(exec, stream), "warm-up");
  std::vector<float> ms(replays);
  for (int i = 0; i < replays; ++i) {
    check(cudaEventRecord(start, stream), "event");
    check(cudaGraphLaunch(exec, stream), "graph launch");
    check(cudaEventRecord(stop, stream), "event");
    check(cudaEventSynchronize(stop), "event");
    check(cudaEventElapsedTime(&ms[i], start, stop), "event");
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return 1e3 * ms[replays / 2] / per_graph;
}

}  // namespace

double measure_copy_bandwidth_gbs(size_t bytes) {
  DeviceBuffer a(bytes), b(bytes);
  check(cudaMemset(a.get(), 1, bytes), "memset");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::vector<float> ms(10);
  for (int i = -2; i < 10; ++i) {
    check(cudaEventRecord(start), "event");
    check(cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice), "copy");
    check(cudaEventRecord(stop), "event");
    check(cudaEventSynchronize(stop), "event");
    if (i >= 0) check(cudaEventElapsedTime(&ms[i], start, stop), "event");
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return 2.0 * static_cast<double>(bytes) / (ms[5] * 1e-3) / 1e9;
}

CudaTiming time_cuda_forward(const CudaMoeLayer& layer, const std::vector<Tensor>& hidden, const std::vector<Tensor>& logits,
                             int replays, const ForwardOptions& options, bool split_gemms) {
  if (hidden.empty() || hidden.size() != logits.size()) throw Error("time_cuda_forward: need as many hidden as logits sets");
  const int64_t T = hidden[0].dim(0), H = layer.layer().hidden;
  std::vector<DeviceBuffer> xs, ls;
  for (size_t i = 0; i < hidden.size(); ++i) {
    xs.push_back(upload(hidden[i].raw(), hidden[i].size_bytes()));
    ls.push_back(upload(logits[i].raw(), logits[i].size_bytes()));
  }
  DeviceBuffer out(sizeof(float) * T * H);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  CudaTiming timing;
  // The whole forward, without the GEMMs, and (split_gemms) with GEMM1 only.
  enum Run { kForward, kOther, kWithoutGemm2 };
  for (Run run : {kForward, kOther, kWithoutGemm2}) {
    if (run == kWithoutGemm2 && !split_gemms) break;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
    try {
      for (size_t i = 0; i < xs.size(); ++i) {
        if (run == kForward)
          layer.forward(xs[i].get(), hidden[i].dtype(), ls[i].get<float>(), out.get<float>(), static_cast<int>(T), stream,
                        options);
        else
          layer.forward_without_gemms(xs[i].get(), hidden[i].dtype(), ls[i].get<float>(), out.get<float>(),
                                      static_cast<int>(T), stream, options, run == kWithoutGemm2);
      }
    } catch (...) {  // a rejected forward (e.g. NotSupported): close the capture so the caller can go on
      if (cudaStreamEndCapture(stream, &graph) == cudaSuccess) cudaGraphDestroy(graph);
      cudaGetLastError();
      cudaStreamDestroy(stream);
      throw;
    }
    check(cudaStreamEndCapture(stream, &graph), "capture");
    check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    const double us = time_graph(exec, stream, replays, static_cast<int>(xs.size()));
    (run == kForward ? timing.forward_us : run == kOther ? timing.other_us : timing.without_gemm2_us) = us;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(stream);
  return timing;
}

namespace cuda {

GroupedTileOrder grouped_tile_order() {
  static const GroupedTileOrder order = [] {
    GroupedTileOrder o;
    const char* raster = std::getenv("QMOE_RASTER");
    if (raster && (std::strcmp(raster, "m") == 0 || std::strcmp(raster, "M") == 0)) o.raster = 1;
    if (raster && (std::strcmp(raster, "n") == 0 || std::strcmp(raster, "N") == 0)) o.raster = 2;
    return o;
  }();
  return order;
}

namespace {

// Host tensors in and out; one CudaMoeLayer cached per layer object.
class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(bool repacked_copy) : repacked_copy_(repacked_copy) {}
  std::string name() const override { return "cuda"; }

  Tensor forward(const MoeLayer& layer, const Tensor& hidden_states, const Tensor& router_logits,
                 const ForwardOptions& options) override {
    // Validate on the host as the CPU backend does (shapes, dtypes, non-finite values).
    if (hidden_states.rank() != 2) throw Error("hidden_states must be 2-D [tokens, hidden], got " + hidden_states.shape_str());
    const int64_t T = hidden_states.dim(0);
    cpu::to_float_matrix(hidden_states, T, layer.hidden, "hidden_states");
    const std::vector<float> logits = cpu::to_float_matrix(router_logits, T, layer.num_experts, "router_logits");
    act_kind_of(hidden_states.dtype());
    if (!device_ || &device_->layer() != &layer || device_->max_tokens() < T)
      device_ = std::make_unique<CudaMoeLayer>(layer, static_cast<int>(std::max<int64_t>(T, 1)),
                                               CudaMoeLayer::kDefaultDequantWorkspaceBytes, repacked_copy_);
    DeviceBuffer x = upload(hidden_states.raw(), hidden_states.size_bytes());
    DeviceBuffer l = upload(logits.data(), logits.size() * sizeof(float));
    DeviceBuffer out(sizeof(float) * T * layer.hidden);
    device_->forward(x.get(), hidden_states.dtype(), l.get<float>(), out.get<float>(), static_cast<int>(T), nullptr, options);
    check(cudaDeviceSynchronize(), "forward");
    Tensor result(DType::kF32, {T, layer.hidden});
    if (result.size_bytes()) check(cudaMemcpy(result.raw(), out.get(), result.size_bytes(), cudaMemcpyDeviceToHost), "download");
    return result;
  }

 private:
  bool repacked_copy_;
  std::unique_ptr<CudaMoeLayer> device_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(bool repacked_copy) { return std::make_unique<CudaBackend>(repacked_copy); }

}  // namespace cuda
}  // namespace qmoe
