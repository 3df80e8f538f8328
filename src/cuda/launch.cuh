// Programmatic dependent launch (Hopper) between the forward's kernels, so that a kernel's launch
// and prologue overlap the previous kernel's tail (at 1 token a forward is ~10 launches of a few µs
// each). On by default for decode forwards (chaining.h); QMOE_PDL=0 launches every kernel plainly
// (A/B runs, debugging).
//
// The protocol every chained kernel follows:
// - chain_wait() before reading anything the immediately preceding kernel wrote (its inputs) and
//   before writing anything it reads; griddepcontrol.wait returns once the preceding grid has
//   completed and its writes are visible;
// - chain_release() only after chain_wait(): the next kernel may then launch. So when a kernel
//   runs at all, the kernel before its predecessor has completed, and what that and earlier
//   kernels wrote (routing, grouping) may be read before chain_wait(), through L2 (__ldcg: the
//   PTX model promises visibility only after the wait, so not from a possibly stale L1 line);
// - a CTA that exits early waits first, so that no grid completes before its predecessor.
// The decode GEMM reads the grouping before its wait: that is safe because at least one chained
// kernel that waits before it releases (the input conversion) always runs between the grouping and
// each GEMM (cuda_backend.cpp).
// Without the launch attribute (QMOE_PDL=0, or a ChainedLaunchScope that turned chaining off) a
// kernel starts after its predecessor completes and chain_wait() returns at once; chain_release()
// still lets a following chained launch start early, which the protocol above makes safe (e.g. a
// decode forward's routing, which waits first, after a prefill forward's combine).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "cuda/chaining.h"

namespace qmoe::cuda {

__device__ __forceinline__ void chain_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void chain_release() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
// Both, at the top of a kernel that reads its predecessor's output from the start.
__device__ __forceinline__ void chain_start() {
  chain_wait();
  chain_release();
}

// kernel<<<grid, block, smem, stream>>>(args...), chained to the previous kernel where enabled.
template <class... Params, class... Args>
cudaError_t launch_chained(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                           Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = chained_launches() ? attr : nullptr;
  config.numAttrs = chained_launches() ? 1 : 0;
  // As `kernel<<<...>>>(...); return cudaGetLastError();`: a failed launch is returned and cleared.
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  return cudaGetLastError();
}

}  // namespace qmoe::cuda
