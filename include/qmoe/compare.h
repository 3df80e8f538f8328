// Comparing layer outputs, and the tolerance policy (docs/tolerances.md) in one place.
#pragma once

#include <cstdint>
#include <string>

#include "qmoe/moe.h"
#include "qmoe/tensor.h"

namespace qmoe {

struct OutputDiff {
  double max_abs_error = 0.0;
  double max_abs_ref = 0.0;
  double rel_l2 = 0.0;        // ||out - ref||_2 / ||ref||_2
  int64_t worst_index = -1;   // flat index of max_abs_error
  bool finite = true;         // no NaN/Inf in `out`
};

// `out` and `ref`: same shape, dtype F32/F64/BF16/F16.
OutputDiff compare_outputs(const Tensor& out, const Tensor& ref);

// Whether the CUDA backend runs a prefill GEMM for this forward (`tokens`: the batch; < 0: any)
// whose sums differ slightly from the reference's (the FP8 MMA's reduced-precision accumulator,
// W4A8's bf16-rounded weights), so that activation codes move; its outputs are then held to
// cuda_prefill_rel_l2 (0 where no such GEMM runs), against the reference and torch fixtures alike.
// `repacked_copy`: whether the CudaMoeLayer may hold a repacked copy (repacked_copy_possible: its
// option, a nonzero budget; it changes W4A8-INT8's prefill kernel).
bool cuda_prefill_moves_codes(const MoeLayer& layer, const ForwardOptions& options, int64_t tokens = -1,
                              bool repacked_copy = true);
double cuda_prefill_rel_l2(const MoeLayer& layer, const ForwardOptions& options, int64_t tokens = -1,
                           bool repacked_copy = true);
inline constexpr double kCudaPrefillRelL2 = 3e-2;      // FP8 prefill GEMMs
inline constexpr double kCudaPrefillW4A8RelL2 = 4e-2;  // the W4A8 prefill GEMM (weights rounded too)
// Either, for batches of 1-3 tokens (`tokens` known): their rel_l2 averages over few outputs, so a
// few moved codes weigh more (FP8 at one token on the H200: 3.3e-2 once, 2.5e-2 at most in 38 other
// runs; a wrong scale, group or row gives 1e-1 and more).
inline constexpr double kCudaPrefillFewTokensRelL2 = 6e-2;
inline constexpr int64_t kCudaPrefillFewTokens = 3;

enum class Comparison {
  kBackendVsReference,  // a backend against reference_forward (same numerics, other summation)
  kCudaVsReference,     // the CUDA backend against reference_forward or the CPU backend: as above,
                        // wider where an FP8 prefill GEMM (tensor-core accumulation) runs
  kVsFloat64Expected,   // against a float64 torch forward on the same dequantized weights and the
                        // same quantized activations (fixtures' expected / expected_actq)
  kVsFloat64ExpectedRoundedWeights,  // the same, but torch used compressed-tensors' bf16-rounded
                                     // weights where the layer keeps them unrounded (NVFP4)
};

// How a fixture's expected tensor relates to the layer: "expected*" keys use compressed-tensors'
// (rounded) dequantized weights, "expected_actq" the kernels' unrounded ones.
Comparison fixture_comparison(const MoeLayer& layer, const std::string& expected_key);

// Bound on rel_l2 for the layer's scheme and options; `tokens` (the batch) tells kCudaVsReference
// whether the automatic path runs the prefill kernels (-1: assume it may).
double tolerance_rel_l2(const MoeLayer& layer, const ForwardOptions& options, Comparison kind, int64_t tokens = -1,
                        bool repacked_copy = true);

}  // namespace qmoe
