// The MoE activations (qmoe::Activation) on the device, shared by the activation kernels
// (moe_ops.cu) and the 4-bit prefill kernel's fused epilogue (fp4_gemm.cu), so both compute the
// same float operations.
#pragma once

#include <cuda_runtime.h>

namespace qmoe::cuda {

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
// a / y for y >= 1 without the division's branch, for epilogues that activate many values: the
// division's fast path as nvcc compiles it (approximate reciprocal, one Newton step, the quotient
// and one remainder correction), taken where no step can overflow or underflow (|a| in 2^+-60, y up
// to 2^60); clears `in_range` elsewhere, where the caller divides with `/` itself. The GPU tests
// DivideQuick (random pairs) and SiluQuick (every float x) check it against `/`, bit for bit.
__device__ __forceinline__ float divide_quick(float a, float y, bool& in_range) {
  float r0;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r0) : "f"(y));
  const float r = __fmaf_rn(r0, __fmaf_rn(-y, r0, 1.0f), r0);
  const float aa = fabsf(a);
  in_range = in_range && aa >= 0x1p-60f && aa <= 0x1p60f && y >= 1.0f && y <= 0x1p60f;
  const float q = __fmul_rn(a, r);
  return __fmaf_rn(r, __fmaf_rn(-y, q, a), q);
}
// silu(x) with divide_quick: clears `in_range` where the caller takes silu(x) itself.
__device__ __forceinline__ float silu_quick(float x, bool& in_range) { return divide_quick(x, 1.0f + expf(-x), in_range); }
// activate(3 (swigluoai), limit, g, up) with divide_quick, the same float operations before it.
__device__ __forceinline__ float swiglu_oai_quick(float g, float up, float limit, bool& in_range) {
  const float gc = fminf(g, limit);
  const float v = fminf(fmaxf(up, -limit), limit);
  return divide_quick((v + 1.0f) * gc, 1.0f + expf(-1.702f * gc), in_range);
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
