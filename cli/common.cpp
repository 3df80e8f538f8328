#include "cli/common.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fmt/core.h>

namespace qmoe::cli {

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

std::string describe_args(const std::optional<QuantArgs>& a) {
  if (!a) return "none";
  std::string s = fmt::format("{}{}", a->type == QuantType::kInt ? "int" : "float", a->num_bits);
  switch (a->strategy) {
    case Strategy::kGroup:
      s += fmt::format(" group{}", a->group_size.value_or(0));
      break;
    case Strategy::kTensorGroup:
      s += fmt::format(" tensor_group{}", a->group_size.value_or(0));
      break;
    case Strategy::kBlock:
      s += fmt::format(" block{}x{}", (*a->block_structure)[0], (*a->block_structure)[1]);
      break;
    default:
      s += " " + to_string(a->strategy);
  }
  s += a->symmetric ? " sym" : " asym";
  if (a->dynamic == DynamicMode::kDynamic) s += " dynamic";
  if (a->dynamic == DynamicMode::kLocal) s += " dynamic-local";
  if (a->actorder != ActOrder::kNone) s += " actorder=" + to_string(a->actorder);
  return s;
}

std::string describe_scheme(const LayerScheme& s) {
  if (s.ignored) return "ignored (unquantized)";
  if (!s.weights) return "unquantized";
  return fmt::format("W: {} | A: {} | format {}", describe_args(s.weights), describe_args(s.input), s.format);
}

std::string vllm_kernel_family(const DispatchDecision& d, Target target) {
  if (target == Target::kCpu) {
    switch (d.method) {
      case MoeMethod::kW4A8Int8:
        return "dynamic_4bit_int_moe (CPU)";
      case MoeMethod::kUnquantized:
        return "CPU fused MoE";
      default:
        return "no CPU kernel in vLLM for this method";
    }
  }
  const bool blackwell = target == Target::kSm100;
  switch (d.method) {
    case MoeMethod::kUnquantized:
      return "Triton fused_moe (16-bit)";
    case MoeMethod::kWna16Marlin:
      return "Marlin MoE (moe_wna16_marlin_gemm)";
    case MoeMethod::kWna16Triton:
      return "Triton fused_moe_kernel_gptq_awq / moe_wna16_gemm";
    case MoeMethod::kMxfp4:
      return blackwell ? "CUTLASS/FlashInfer MXFP4" : "Marlin FP4 weight-only";
    case MoeMethod::kNvfp4:
      return blackwell ? "FlashInfer/CUTLASS NVFP4 grouped GEMM" : "Marlin FP4 weight-only (W4A16 fallback)";
    case MoeMethod::kFp8:
      return "Triton/CUTLASS FP8 grouped GEMM";
    case MoeMethod::kInt8:
      return "Triton fused_moe int8_w8a8";
    case MoeMethod::kW4A8Fp8:
      return "CUTLASS cutlass_moe_w4a8_fp8 (sm90)";
    case MoeMethod::kW4A8Int8:
      return "none (vLLM runs it on CPU only)";
  }
  return "?";
}

std::string qmoe_kernel_family(const DispatchDecision& d, Target target) {
#if defined(QMOE_WITH_CUDA)
  if (target != Target::kCpu)
    return "cuda: tensor-core decode GEMMs for weight-only, unquantized and FP8/INT8/W4A8 schemes, CUDA-core GEMV for "
           "the rest; on larger batches CUTLASS wgmma prefill GEMMs for FP8 (tensor/channel/128x128 block) and "
           "INT8 W8A8 (W4A8 with FP8 activations too: held as vLLM's FP8 products), W8A16 (and W4A16 and W4A8 "
           "with INT8 activations without a repacked copy; groups of >= 64 or channel scales) and bf16, a "
           "wgmma kernel of qmoe's own for MXFP4, NVFP4 weight-only, INT4 weight-only (W4A16: groups of a multiple of "
           "16 or channel scales, zero points) and W4A8 with INT8 activations, k a multiple of 64, on a repacked "
           "copy of the weights (codes dequantized in registers, the activation applied in the first GEMM's epilogue, the second writing the combine's bf16 "
           "terms), and the bf16 GEMM on dequantized weights for the other weight-only layouts (`qmoe inspect "
           "--cuda-plan` and `qmoe run` print the plan of each GEMM; bench/RESULTS.md)";
#else
  if (target != Target::kCpu) return "cuda backend: not in this build";
#endif
  return "cpu: dequantize rows + fp32 grouped GEMM";
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", v, units[u]);
}

Progress::Progress(std::string label) : label_(std::move(label)), tty_(isatty(STDERR_FILENO) != 0), start_s_(now_seconds()) {}

Progress::~Progress() {
  if (shown_) fmt::print(stderr, "\n");
}

void Progress::update(uint64_t done, uint64_t total) {
  if (!tty_ || total == 0) return;
  const double elapsed = now_seconds() - start_s_;
  if (!shown_ && elapsed < 0.5) return;  // only loads that take more than a moment
  shown_ = true;
  const double frac = static_cast<double>(done) / static_cast<double>(total);
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
  fmt::print(stderr, "\r{} {:5.1f}%  {} / {}  {}/s  ETA {:.0f}s   ", label_, 100.0 * frac, human_bytes(done),
             human_bytes(total), human_bytes(static_cast<uint64_t>(rate)), eta);
  std::fflush(stderr);
}

}  // namespace qmoe::cli
