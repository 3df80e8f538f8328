// The prefill grouped GEMM for weight-only quantized experts on Hopper: CUTLASS's pointer-array
// mixed-input grouped GEMM. The quantized weights are dequantized to bf16 in registers inside the
// mainloop (RS warpgroup MMA: only operand A may come from registers), so the product is computed
// transposed, with the weights as A (the f16 instances of f16 models: f16 for bf16 throughout):
//
//   per group (local expert) e with m_e rows:  D_e^T[n, m] = sum_k W_e[n, k] * X_e[m, k]
//
// W_e: [n, k] row-major quantized codes (k contiguous, the checkpoint's [out, in] layout),
// dequantized as RNE_bf16(q * S_e[k / group, n]) exactly like the decode kernels; X_e: [m_e, k]
// bf16 rows of the sorted input; D_e^T column-major = D_e: [m_e, n] fp32 row-major, as the other
// prefill kernels write it, times an optional scale per input row (W4A8: the rows hold 8-bit
// activation codes as bf16 values, and this is their quantization scale). Included only by
// grouped_sm90_<type>.cu instance files.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "cuda/grouped_sm90_common.cuh"
#include "cuda/grouped_gemm.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

namespace qmoe::cuda::sm90 {

using namespace cute;

// The CUTLASS types of one configuration; InputT: the inputs' and the weight scales' type (bf16 or
// f16).
template <class Config, class InputT>
struct MixedTypes {
  using ElementW = typename Config::ElementIn;  // the weight codes
  using ElementX = InputT;
  using ElementScale = InputT;
  using ElementD = float;
  using TileShape = typename Config::TileShape;
  using ClusterShape = typename Config::ClusterShape;
  static constexpr int kAlignW = 128 / cutlass::sizeof_bits<ElementW>::value;  // 16-byte rows
  static constexpr int kAlignX = 128 / cutlass::sizeof_bits<ElementX>::value;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  static constexpr int kAlignScale = 128 / cutlass::sizeof_bits<ElementScale>::value;

  // D^T = acc * x_scale[m]: a vector along the GEMM's n (the input rows), one pointer per group, read
  // element by element (a group's rows start anywhere in the sorted rows).
  using Acc = cutlass::epilogue::fusion::Sm90AccFetch;
  using XScale = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float*, float, Stride<_0, _1, _0>, 1>;
  using Mul = cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float,
                                                     cutlass::FloatRoundStyle::round_to_nearest>;
  using Epilogue = cutlass::epilogue::fusion::Sm90EVT<Mul, XScale, Acc>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::ColumnMajor*, kAlignD,
      ElementD, cutlass::layout::ColumnMajor*, kAlignD, typename Config::EpilogueSchedule, Epilogue>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cute::tuple<ElementW, ElementScale>,
      cutlass::layout::RowMajor*, kAlignW, ElementX, cutlass::layout::ColumnMajor*, kAlignX, float, TileShape,
      ClusterShape,
      StagesAfter<CollectiveEpilogue>, typename Config::KernelSchedule>::CollectiveOp;
  using Gemm = GroupedGemmOf<CollectiveMainloop, CollectiveEpilogue>;  // problems (n, m, k)
  using Kernel = typename Gemm::GemmKernel;
};

template <class Config, class InputT>
class MixedGroupedGemm final : public CutlassGrouped<typename MixedTypes<Config, InputT>::Gemm> {
  using T = MixedTypes<Config, InputT>;
  using StrideW = typename T::Kernel::InternalStrideA;
  using StrideX = typename T::Kernel::InternalStrideB;
  using StrideD = typename T::Kernel::InternalStrideD;
  using StrideScale = typename T::CollectiveMainloop::NonVoidStrideScale;

 public:
  // group_size: k elements per scale (a multiple of the tile's k, or k itself: channel scales).
  MixedGroupedGemm(const GroupedTcBuffers& buf, int groups, int64_t n, int64_t k, int64_t group_size, int num_sms)
      : CutlassGrouped<typename T::Gemm>("mixed-input grouped GEMM") {
    constexpr int kTileK = size<2>(typename T::TileShape{});
    if (n % T::kAlignScale != 0 || n % T::kAlignD != 0 || k % T::kAlignW != 0)
      throw std::invalid_argument("mixed-input grouped GEMM: n must be a multiple of " +
                                  std::to_string(T::kAlignScale) + " and k of " + std::to_string(T::kAlignW));
    if (group_size <= 0 || (group_size != k && group_size % kTileK != 0))
      throw std::invalid_argument("mixed-input grouped GEMM: group size " + std::to_string(group_size) +
                                  " is neither k nor a multiple of " + std::to_string(kTileK));
    if (buf.b_group_scale == nullptr) throw std::invalid_argument("mixed-input grouped GEMM: no weight scales");
    const int rows = static_cast<int>(n), cols = static_cast<int>(k);
    const int scale_k = static_cast<int>((k + group_size - 1) / group_size);
    StrideW* w = this->repeated(cutlass::make_cute_packed_stride(StrideW{}, {rows, cols, 1}), groups);
    StrideX* x = this->repeated(cutlass::make_cute_packed_stride(StrideX{}, {1, cols, 1}), groups);
    StrideD* d = this->repeated(cutlass::make_cute_packed_stride(StrideD{}, {rows, 1, 1}), groups);
    StrideScale* s = this->repeated(cutlass::make_cute_packed_stride(StrideScale{}, {rows, scale_k, 1}), groups);
    typename T::Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        this->problems(buf, groups),
        {reinterpret_cast<const typename T::ElementW**>(buf.b), w, reinterpret_cast<const typename T::ElementX**>(buf.a),
         x, reinterpret_cast<const typename T::ElementScale**>(buf.b_group_scale), s, static_cast<int>(group_size)},
        {{}, nullptr, nullptr, reinterpret_cast<typename T::ElementD**>(buf.d), d},
        this->hardware(num_sms)};
    // Arguments of Sm90EVT<Mul, XScale, Acc>: children first, then the node; a null array: scale 1.
    args.epilogue.thread = {{buf.a_scale, 1.0f, {}}, {}, {}};
    this->initialize(args, /*weights_are_a=*/true);
  }
};

// The instances of one weight code type, one per GroupedTile (config/gemm_plan.h: tile_config), in
// weight rows x input rows x k, all cooperative (each warpgroup owns 64 weight rows): 128 x 32 and
// 128 x 48 for a few rows per expert, 128 x 128 for some more; 128 x 192 and 128 x 256 for many, in clusters of 2 along the weight rows (the
// pair shares its input tile through TMA multicast: 2-10% faster on the model shapes). k-tiles of 64
// (128 bytes of bf16 input per row).
template <class ElementW, class InputT = cutlass::bfloat16_t>
std::unique_ptr<GroupedTcGemm> make_mixed_grouped(GroupedTile tile, const GroupedTcBuffers& buf, int groups, int64_t n,
                                                  int64_t k, int64_t group_size, int num_sms) {
  using Coop = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpiCoop = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  using Small = GroupedConfig<ElementW, float, Shape<_128, _128, _64>, Shape<_1, _1, _1>, Coop, EpiCoop>;
  using Medium = GroupedConfig<ElementW, float, Shape<_128, _192, _64>, Shape<_2, _1, _1>, Coop, EpiCoop>;
  using Large = GroupedConfig<ElementW, float, Shape<_128, _256, _64>, Shape<_2, _1, _1>, Coop, EpiCoop>;
  using Tiny = GroupedConfig<ElementW, float, Shape<_128, _32, _64>, Shape<_1, _1, _1>, Coop, EpiCoop>;
  using Tiny48 = GroupedConfig<ElementW, float, Shape<_128, _48, _64>, Shape<_1, _1, _1>, Coop, EpiCoop>;
  switch (tile) {
    case GroupedTile::kTiny48: return std::make_unique<MixedGroupedGemm<Tiny48, InputT>>(buf, groups, n, k, group_size, num_sms);
    case GroupedTile::kTiny: return std::make_unique<MixedGroupedGemm<Tiny, InputT>>(buf, groups, n, k, group_size, num_sms);
    case GroupedTile::kSmall: return std::make_unique<MixedGroupedGemm<Small, InputT>>(buf, groups, n, k, group_size, num_sms);
    case GroupedTile::kMedium: return std::make_unique<MixedGroupedGemm<Medium, InputT>>(buf, groups, n, k, group_size, num_sms);
    case GroupedTile::kLarge: return std::make_unique<MixedGroupedGemm<Large, InputT>>(buf, groups, n, k, group_size, num_sms);
    case GroupedTile::kHuge:
    case GroupedTile::kWide: return nullptr;  // not built (grouped_tile_built)
  }
  throw std::invalid_argument("mixed-input grouped GEMM: unknown tile configuration");
}

}  // namespace qmoe::cuda::sm90
