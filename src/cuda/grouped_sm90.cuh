// The prefill grouped GEMM on Hopper: CUTLASS's pointer-array grouped GEMM (TMA loads, warpgroup
// MMA, warp-specialized persistent kernel) with a scale epilogue. Included only by the instance
// files grouped_sm90_*.cu, so the heavy templates are compiled there and nowhere else.
//
// Per group (local expert) e with m_e rows:  D_e[m, n] = sum_k A_e[m, k] * B_e[n, k] * a_scale_e[m] * b_scale_e[n]
// A_e: [m_e, k] row-major, B_e: [n, k] row-major (the checkpoint's [out, in] weights), D_e: [m_e, n]
// fp32 row-major (terms instances: bf16(row_weight_e[m] * D_e[m, n])); a null scale array means a
// scale of 1.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

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

// The CUTLASS types of one configuration. kTerms: GEMM2's terms for the combine, bf16(w[m] * D[m, n])
// with w the rows' routing weights (GroupedTcBuffers::row_weight), instead of fp32 D.
//
// kSwapped: the product computed transposed (the weights as A, the input rows as B), so that the
// tile's n counts input rows and need not be 64 or 128: an expert of 130-192 rows fits one 128 x 192
// tile instead of two 128-row ones, the second mostly padding (gemm_tuning.h). Per group e:
//   D_e^T[n, m] = sum_k B_e[n, k] * A_e[m, k] * b_scale_e[n] * a_scale_e[m]
// with D_e^T column-major, the same memory as D_e row-major; problem_mnk holds (n, m_e, k). (Swapped
// 128 x 32 and 128 x 48 tiles for a few rows per expert were measured too, FP8 channel at 4-64 rows:
// within -3..+3% of the 64 x 128 pingpong tile, up to 1.6x slower on Qwen3-30B-A3B's GEMM2, so not
// built; bench/NOTES.md, thirty-second session.) The operand layouts are the same either way (both
// K-major): only the pointers trade places.
template <class Config, bool kTerms = false, bool kSwapped = false>
struct GroupedTypes {
  using ElementIn = typename Config::ElementIn;
  using ElementAcc = typename Config::ElementAcc;
  using ElementD = std::conditional_t<kTerms, cutlass::bfloat16_t, float>;
  using TileShape = typename Config::TileShape;
  using ClusterShape = typename Config::ClusterShape;
  using LayoutD = std::conditional_t<kSwapped, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlignIn = 128 / cutlass::sizeof_bits<ElementIn>::value;  // 16-byte rows
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;

  // D = (acc * b_scale[n]) * a_scale[m], one pointer per group: the weight scales a vector along the
  // weight rows, the input scales (and the terms' routing weights) one along the input rows, read
  // element by element when they lie along the GEMM's n (a group's rows start anywhere in the sorted
  // rows).
  using Acc = cutlass::epilogue::fusion::Sm90AccFetch;
  using AlongM = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float*, float>;
  using AlongN = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float*, float>;
  using AlongNUnaligned =
      cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float*, float, Stride<_0, _1, _0>, 1>;
  using BScale = std::conditional_t<kSwapped, AlongM, AlongN>;
  using AScale = std::conditional_t<kSwapped, AlongNUnaligned, AlongM>;
  using Mul = cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float,
                                                     cutlass::FloatRoundStyle::round_to_nearest>;
  using Scaled = cutlass::epilogue::fusion::Sm90EVT<Mul, AScale, cutlass::epilogue::fusion::Sm90EVT<Mul, BScale, Acc>>;
  // Terms: w[m] * D in fp32, then rounded to bf16 to nearest even (the combine's rounding of a term).
  using RowWeight = AScale;
  using MulToBf16 = cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, cutlass::bfloat16_t, float,
                                                           cutlass::FloatRoundStyle::round_to_nearest>;
  using Epilogue = std::conditional_t<kTerms, cutlass::epilogue::fusion::Sm90EVT<MulToBf16, RowWeight, Scaled>, Scaled>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, float, void, LayoutD*, kAlignD, ElementD, LayoutD*,
      kAlignD, typename Config::EpilogueSchedule, Epilogue>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementIn, cutlass::layout::RowMajor*, kAlignIn, ElementIn,
      cutlass::layout::ColumnMajor*, kAlignIn, ElementAcc, TileShape, ClusterShape,
      StagesAfter<CollectiveEpilogue>, typename Config::KernelSchedule>::CollectiveOp;
  using Gemm = GroupedGemmOf<CollectiveMainloop, CollectiveEpilogue>;  // problems (m, n, k), swapped (n, m, k)
  using Kernel = typename Gemm::GemmKernel;
};

template <class Config, bool kTerms, bool kSwapped = false>
class GroupedGemm final : public CutlassGrouped<typename GroupedTypes<Config, kTerms, kSwapped>::Gemm> {
  using T = GroupedTypes<Config, kTerms, kSwapped>;
  using ElementIn = typename T::ElementIn;
  using ElementD = typename T::ElementD;
  using StrideA = typename T::Kernel::InternalStrideA;
  using StrideB = typename T::Kernel::InternalStrideB;
  using StrideD = typename T::Kernel::InternalStrideD;

 public:
  GroupedGemm(const GroupedTcBuffers& buf, int groups, int64_t n, int64_t k, int num_sms)
      : CutlassGrouped<typename T::Gemm>(kSwapped ? "swapped grouped GEMM" : "grouped GEMM") {
    if (n % T::kAlignD != 0 || k % T::kAlignIn != 0)
      throw std::invalid_argument(std::string(kSwapped ? "swapped " : "") + "grouped GEMM: n and k must be multiples of " +
                                  std::to_string(T::kAlignD) + " and " + std::to_string(T::kAlignIn));
    // The weights' operand: [n, k], k contiguous; the input rows': [m_e, k] (packed strides do not
    // depend on m_e); D: [m_e, n], n contiguous.
    const int rows = static_cast<int>(n), cols = static_cast<int>(k);
    using Shape3 = cute::Shape<int, int, int>;
    const Shape3 weight_rows{rows, cols, 1}, input_rows{1, cols, 1};
    StrideA* a = this->repeated(cutlass::make_cute_packed_stride(StrideA{}, kSwapped ? weight_rows : input_rows), groups);
    StrideB* b = this->repeated(cutlass::make_cute_packed_stride(StrideB{}, kSwapped ? input_rows : weight_rows), groups);
    StrideD* d = this->repeated(
        cutlass::make_cute_packed_stride(StrideD{}, kSwapped ? Shape3{rows, 1, 1} : Shape3{1, rows, 1}), groups);
    const void** first = kSwapped ? buf.b : buf.a;  // GEMM operand A
    const void** second = kSwapped ? buf.a : buf.b;
    typename T::Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        this->problems(buf, groups),
        {reinterpret_cast<const ElementIn**>(first), a, reinterpret_cast<const ElementIn**>(second), b},
        {{}, nullptr, nullptr, reinterpret_cast<ElementD**>(buf.d), d},
        this->hardware(num_sms)};
    // Arguments of Sm90EVT<Mul, AScale, Sm90EVT<Mul, BScale, Acc>>: children first, then the node.
    const typename T::Scaled::Arguments scaled = {{buf.a_scale, 1.0f, {}}, {{buf.b_scale, 1.0f, {}}, {}, {}}, {}};
    if constexpr (kTerms) args.epilogue.thread = {{buf.row_weight, 1.0f, {}}, scaled, {}};
    else args.epilogue.thread = scaled;
    this->initialize(args, /*weights_are_a=*/kSwapped);
  }
};

// The instances of one operand type, one per GroupedTile (config/gemm_plan.h): 64-row tiles with
// the pingpong schedule (two consumer warpgroups alternating tiles, one's epilogue under the other's
// mainloop) for few rows per expert; 128-row tiles with the cooperative schedule (both warpgroups on
// one tile, 64 rows each) otherwise. Pairs of CTAs along n share the input tile (n >= 256 in every
// model shape). 128 x 256 holds 64 x 256 32-bit accumulators per warpgroup: it fits without a second
// accumulator set (FP8 with the MMA's own accumulation, INT8, bf16); all three use it from 64 rows
// per expert, but bf16 GEMMs of a short reduction, which use 128 x 192 as a pingpong tile (a
// warpgroup's 128 x 192 accumulators fit its 232 registers without spills; with k = 256 the
// epilogue under the other warpgroup's mainloop is what makes it faster, gemm_tuning.h).
template <class ElementIn, class ElementAcc, class TileK, class KernelCoop, class KernelPingpong, bool kTerms = false>
std::unique_ptr<GroupedTcGemm> make_grouped(GroupedTile tile, const GroupedTcBuffers& buf, int groups, int64_t n,
                                            int64_t k, int num_sms) {
  using Cluster = Shape<_1, _2, _1>;
  using EpiCoop = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  using EpiPingpong = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
  using Coop128x128 = GroupedConfig<ElementIn, ElementAcc, Shape<_128, _128, TileK>, Cluster, KernelCoop, EpiCoop>;
  using Coop128x256 = GroupedConfig<ElementIn, ElementAcc, Shape<_128, _256, TileK>, Cluster, KernelCoop, EpiCoop>;
  using Pingpong64x128 =
      GroupedConfig<ElementIn, ElementAcc, Shape<_64, _128, TileK>, Cluster, KernelPingpong, EpiPingpong>;
  using Pingpong128x192 =
      GroupedConfig<ElementIn, ElementAcc, Shape<_128, _192, TileK>, Cluster, KernelPingpong, EpiPingpong>;
  // Swapped: 128 weight rows x 192 input rows, pairs along the weight rows sharing the input tile.
  using Swapped128x192 =
      GroupedConfig<ElementIn, ElementAcc, Shape<_128, _192, TileK>, Shape<_2, _1, _1>, KernelCoop, EpiCoop>;
  switch (tile) {
    case GroupedTile::kMedium: return std::make_unique<GroupedGemm<Coop128x128, kTerms>>(buf, groups, n, k, num_sms);
    case GroupedTile::kLarge:
      return std::make_unique<GroupedGemm<Pingpong128x192, kTerms>>(buf, groups, n, k, num_sms);
    case GroupedTile::kHuge: return std::make_unique<GroupedGemm<Coop128x256, kTerms>>(buf, groups, n, k, num_sms);
    case GroupedTile::kSmall:
      return std::make_unique<GroupedGemm<Pingpong64x128, kTerms>>(buf, groups, n, k, num_sms);
    case GroupedTile::kTiny:
    case GroupedTile::kTiny48: return nullptr;  // not built (grouped_tile_built)
    case GroupedTile::kWide:
      return std::make_unique<GroupedGemm<Swapped128x192, kTerms, true>>(buf, groups, n, k, num_sms);
  }
  throw std::invalid_argument("grouped GEMM: unknown tile configuration");
}

}  // namespace qmoe::cuda::sm90
