// Whether the forward's kernels are launched chained (programmatic dependent launch, launch.cuh):
// host-side switches, visible to the g++-compiled backend.
#pragma once

namespace qmoe::cuda {

// True unless QMOE_PDL=0 (read once) or a ChainedLaunchScope on this thread turned chaining off.
bool chained_launches();

// Chaining for the launches of one forward on the calling thread; a scope inside one that turned it
// off leaves it off. The backend chains only the forwards whose GEMMs both run decode kernels: on
// the H200 the forwards with prefill kernels measured up to 3.8% slower chained (bench/runs/
// 2026-11-30_d851252_pdl_ab.log, 2026-11-30_pdl_prefill_rows.log); the decode ones were up to 9%
// faster at 1 token, except Mixtral's 4-bit weight-only layers, 1-5% slower
// (2026-11-30_388b9f9_pdl_decode_ab.log).
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
