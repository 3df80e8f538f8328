// The MoE activations (qmoe::Activation) on the device, shared by the activation kernels
// (moe_ops.cu) and the 4-bit prefill kernel's fused epilogue (fp4_gemm.cu), so both compute the
// same float operations.
#pragma once

#include <cuda_runtime.h>

namespace qmoe::cuda {

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
// silu(x) without the division's branch, for epilogues that activate many values: the division's
// fast path as nvcc compiles x / y (approximate reciprocal, one Newton step, the quotient and one
// remainder correction), taken where no step can overflow or underflow (|x| in 2^+-60, y = 1 + e
// up to 2^60); clears `exact` elsewhere, where the caller takes silu(x) itself. The GPU test
// SiluQuick checks every float x against silu(x), bit for bit.
__device__ __forceinline__ float silu_quick(float x, bool& exact) {
  const float y = 1.0f + expf(-x);
  float r0;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r0) : "f"(y));
  const float r = __fmaf_rn(r0, __fmaf_rn(-y, r0, 1.0f), r0);
  const float ax = fabsf(x);
  exact = exact && ax >= 0x1p-60f && ax <= 0x1p60f && y <= 0x1p60f;
  const float q = __fmul_rn(x, r);
  return __fmaf_rn(r, __fmaf_rn(-y, q, x), q);
}
__device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

// The activation `activation` (qmoe::Activation's value) of gate value g and up value up (ignored
// when not gated); `limit`: the clamp of the swiglu variants.
__device__ __forceinline__ float activate(int activation, float limit, float g, float up) {
  switch (activation) {
    case 0: return silu(g) * up;
    case 1: return gelu(g) * up;
    case 2: return gelu_tanh(g) * up;
    case 3: {
      const float gc = fminf(g, limit);
      const float v = fminf(fmaxf(up, -limit), limit);
      return (v + 1.0f) * gc / (1.0f + expf(-1.702f * gc));
    }
    case 4: return fminf(silu(g), limit) * fminf(fmaxf(up, -limit), limit);
    case 5: return silu(g);
    case 6: return gelu(g);
    default: {
      const float r = fmaxf(g, 0.0f);
      return r * r;
    }
  }
}

}  // namespace qmoe::cuda
