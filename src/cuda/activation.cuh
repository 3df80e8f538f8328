// The MoE activations (qmoe::Activation) on the device, shared by the activation kernels
// (moe_ops.cu) and the 4-bit prefill kernel's fused epilogue (fp4_gemm.cu), so both compute the
// same float operations.
#pragma once

#include <cuda_runtime.h>

namespace qmoe::cuda {

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
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
