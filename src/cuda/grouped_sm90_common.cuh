// What every CUTLASS grouped GEMM instance of the prefill path shares: the configuration struct, the
// per-group problem shape, the kernel type of a mainloop and an epilogue, per-group stride arrays on
// the device, the hardware info, the can_implement / workspace / initialize sequence at load, and a
// launch-only run(). Included by the grouped_sm90_*.cuh headers and instance files only.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/grouped_gemm.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"

namespace qmoe::cuda::sm90 {

// One kernel configuration: input (or weight code) and accumulator types, tile and cluster shapes,
// schedules.
template <class ElementIn_, class ElementAcc_, class TileShape_, class ClusterShape_, class KernelSchedule_,
          class EpilogueSchedule_>
struct GroupedConfig {
  using ElementIn = ElementIn_;
  using ElementAcc = ElementAcc_;
  using TileShape = TileShape_;
  using ClusterShape = ClusterShape_;
  using KernelSchedule = KernelSchedule_;
  using EpilogueSchedule = EpilogueSchedule_;
};

// Per group (local expert): (m, n, k), or (n, m, k) for the transposed kernels (the weights as A).
using GroupProblem = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
static_assert(sizeof(GroupProblem::UnderlyingProblemShape) == 3 * sizeof(int32_t),
              "GroupedTcBuffers::problem_mnk holds three int32 per group");

// Mainloop stages: as many as fit in the shared memory the epilogue leaves.
template <class Epilogue>
using StagesAfter =
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>;

// The grouped kernel of a mainloop and an epilogue collective, behind CUTLASS's device adapter.
template <class Mainloop, class Epilogue>
using GroupedGemmOf =
    cutlass::gemm::device::GemmUniversalAdapter<cutlass::gemm::kernel::GemmUniversal<GroupProblem, Mainloop, Epilogue>>;

// `Gemm`: a cutlass::gemm::device::GemmUniversalAdapter of a grouped kernel; `name` prefixes errors.
template <class Gemm>
class CutlassGrouped : public GroupedTcGemm {
 public:
  ~CutlassGrouped() override {
    for (void* p : device_arrays_) cudaFree(p);
  }
  cudaError_t run(cudaStream_t stream) override {
    return gemm_.run(stream) == cutlass::Status::kSuccess ? cudaGetLastError() : cudaErrorLaunchFailure;
  }

 protected:
  explicit CutlassGrouped(std::string name) : name_(std::move(name)) {}

  // The per-group problem sizes: device data the setup kernel fills for every forward.
  static GroupProblem problems(const GroupedTcBuffers& buf, int groups) {
    return {groups, reinterpret_cast<GroupProblem::UnderlyingProblemShape*>(buf.problem_mnk), nullptr};
  }
  void check(cudaError_t err) const {
    if (err != cudaSuccess) throw std::runtime_error(name_ + ": " + cudaGetErrorString(err));
  }
  // A device array of `groups` copies of one stride (strides do not depend on a group's rows).
  template <class S>
  S* repeated(const S& value, int groups) {
    void* dst = nullptr;
    check(cudaMalloc(&dst, sizeof(S) * groups));
    device_arrays_.push_back(dst);
    std::vector<S> host(groups, value);
    check(cudaMemcpy(dst, host.data(), sizeof(S) * groups, cudaMemcpyHostToDevice));
    return static_cast<S*>(dst);
  }
  cutlass::KernelHardwareInfo hardware(int num_sms) const {
    cutlass::KernelHardwareInfo hw;
    check(cudaGetDevice(&hw.device_id));
    hw.sm_count = num_sms;
    return hw;
  }
  // Binds the kernel to `args` once: every pointer it reads is fixed here and the per-forward problem
  // sizes and pointers are device data, so run() is only a launch.
  // The scheduler walks each group's tiles weights-stationary: consecutive tiles share the weight
  // tile and move along the input rows (along M when the weights are B, along N when they are A:
  // `weights_are_a`, the transposed kernels). Mixtral W4A16 3-5% faster than along M,
  // the weights-as-B kernels 9-27% slower along N (A/B in bench/NOTES.md). QMOE_RASTER overrides it.
  void initialize(typename Gemm::Arguments args, bool weights_are_a = false) {
    const GroupedTileOrder order = grouped_tile_order();
    using Raster = decltype(args.scheduler.raster_order);
    args.scheduler.raster_order = weights_are_a ? Raster::AlongN : Raster::AlongM;
    if (order.raster == 1) args.scheduler.raster_order = Raster::AlongM;
    if (order.raster == 2) args.scheduler.raster_order = Raster::AlongN;
    if (gemm_.can_implement(args) != cutlass::Status::kSuccess)
      throw std::invalid_argument(name_ + ": CUTLASS cannot run this problem");
    const size_t workspace_bytes = Gemm::get_workspace_size(args);
    void* workspace = nullptr;
    if (workspace_bytes > 0) {
      check(cudaMalloc(&workspace, workspace_bytes));
      device_arrays_.push_back(workspace);
    }
    if (gemm_.initialize(args, workspace) != cutlass::Status::kSuccess)
      throw std::runtime_error(name_ + ": CUTLASS initialization failed");
  }

 private:
  Gemm gemm_;
  std::string name_;
  std::vector<void*> device_arrays_;  // strides and workspace
};

}  // namespace qmoe::cuda::sm90
