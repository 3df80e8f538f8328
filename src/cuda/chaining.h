// Whether the forward's kernels are launched chained (programmatic dependent launch, launch.cuh):
// host-side switches, visible to the g++-compiled backend.
#pragma once

namespace qmoe::cuda {

// True unless QMOE_PDL=0 (read once) or a ChainedLaunchScope on this thread turned chaining off.
bool chained_launches();

// Chaining for the launches of one forward on the calling thread. The backend chains only the
// forwards whose GEMMs both run decode kernels: on the H200 the forwards with prefill kernels
// measured 0.5-3.8% slower chained (bench/NOTES.md, 2026-11-30), the decode ones up to 9% faster.
class ChainedLaunchScope {
 public:
  explicit ChainedLaunchScope(bool chained);
  ~ChainedLaunchScope();
  ChainedLaunchScope(const ChainedLaunchScope&) = delete;
  ChainedLaunchScope& operator=(const ChainedLaunchScope&) = delete;

 private:
  bool previous_;
};

}  // namespace qmoe::cuda
