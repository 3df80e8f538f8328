// Shared helpers of the qmoe command-line tool.
#pragma once

#include <cstdint>
#include <string>

#include "qmoe/dispatch.h"
#include "qmoe/moe.h"

namespace qmoe::cli {

// "int4 group128 sym", "fp8 channel", ... one line per args object ("none" for absent).
std::string describe_args(const std::optional<QuantArgs>& args);
std::string describe_scheme(const LayerScheme& scheme);

// The kernel family that runs the method: what vLLM runs on `target`, and what qmoe runs.
std::string vllm_kernel_family(const DispatchDecision& d, Target target);
std::string qmoe_kernel_family(const DispatchDecision& d, Target target);

std::string human_bytes(uint64_t bytes);

// A one-line progress indicator on stderr when it is a terminal; silent otherwise.
class Progress {
 public:
  explicit Progress(std::string label);
  ~Progress();
  void update(uint64_t done, uint64_t total);

 private:
  std::string label_;
  bool tty_;
  bool shown_ = false;
  double start_s_;
};

double now_seconds();

// cuda_plan: also what the CUDA backend runs per batch size (summarize_cuda_plan), from one expert's
// weights per distinct layer scheme.
// tp_size: the tensor-parallel size whose per-partition layers are reported (vLLM checks them; rank 0).
// repacked_copy: the CUDA plan of layers allowed a repacked copy of their 4-bit weights (CudaMoeLayer).
int run_inspect(const std::string& dir, Target target, bool json, bool cuda_plan = false, int tp_size = 1,
                bool verify = false, bool repacked_copy = true);

struct RunArgs {
  std::string dir;
  int layer = -1;  // -1: first MoE layer
  int tokens = 16;
  uint64_t seed = 0;
  std::string backend = "cpu";
  Target target = Target::kSm90;
  std::string inputs;
  std::string output;
  int threads = 0;
  int repeat = 3;
  int tp_rank = 0, tp_size = 1, ep_rank = 0, ep_size = 1;
  bool nvfp4_exact_w4a4 = false;
  bool w4a8_fp8_int4 = false;
  bool fp32_intermediate = false;
  bool check = true;
  bool json = false;
  bool repacked_copy = true;  // --backend cuda: BackendOptions::repacked_copy
};
int run_run(const RunArgs& args);

struct BenchArgs {
  std::string models = "all";
  std::string schemes = "w4a16_g128";
  std::string tokens = "1,8,32,64,128,512,2048,8192";
  int rotations = 8;
  int replays = 20;
  uint64_t seed = 1;
  std::string routing = "uniform";  // synthetic routing: uniform, skewed, mild or balanced (parse_synthetic_routing)
  bool f16 = false;  // f16 models (as_f16_model) with f16 hidden states
  bool split_gemms = false;  // also time GEMM1 and GEMM2 apart (one more graph per row)
  bool repacked_copy = true;  // CudaMoeLayer's: a repacked copy of 4-bit weights for the register kernel
  int max_tokens = 0;  // the batch the layers are loaded for (CudaMoeLayer's max_tokens); 0: the largest of tokens
  std::string gemm_paths = "auto";  // comma list of auto, decode, prefill
  std::string json;
};
int run_bench(const BenchArgs& args);

}  // namespace qmoe::cli
