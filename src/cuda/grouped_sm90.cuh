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
template <class Config, bool kTerms = false>
struct GroupedTypes {
  using ElementIn = typename Config::ElementIn;
  using ElementAcc = typename Config::ElementAcc;
  using ElementD = std::conditional_t<kTerms, cutlass::bfloat16_t, float>;
  using TileShape = typename Config::TileShape;
  using ClusterShape = typename Config::ClusterShape;
  static constexpr int kAlignIn = 128 / cutlass::sizeof_bits<ElementIn>::value;  // 16-byte rows
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;

  // D = (acc * b_scale[n]) * a_scale[m]: a row vector (over n) and a column vector (over m), one
  // pointer per group.
  using Acc = cutlass::epilogue::fusion::Sm90AccFetch;
  using BScale = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float*, float>;
  using AScale = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float*, float>;
  using Mul = cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float,
                                                     cutlass::FloatRoundStyle::round_to_nearest>;
  using Scaled = cutlass::epilogue::fusion::Sm90EVT<Mul, AScale, cutlass::epilogue::fusion::Sm90EVT<Mul, BScale, Acc>>;
  // Terms: w[m] * D in fp32, then rounded to bf16 to nearest even (the combine's rounding of a term).
  using RowWeight = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float*, float>;
  using MulToBf16 = cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, cutlass::bfloat16_t, float,
                                                           cutlass::FloatRoundStyle::round_to_nearest>;
  using Epilogue = std::conditional_t<kTerms, cutlass::epilogue::fusion::Sm90EVT<MulToBf16, RowWeight, Scaled>, Scaled>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, float, void, cutlass::layout::RowMajor*, kAlignD,
      ElementD, cutlass::layout::RowMajor*, kAlignD, typename Config::EpilogueSchedule, Epilogue>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementIn, cutlass::layout::RowMajor*, kAlignIn, ElementIn,
      cutlass::layout::ColumnMajor*, kAlignIn, ElementAcc, TileShape, ClusterShape,
      StagesAfter<CollectiveEpilogue>, typename Config::KernelSchedule>::CollectiveOp;
  using Gemm = GroupedGemmOf<CollectiveMainloop, CollectiveEpilogue>;
  using Kernel = typename Gemm::GemmKernel;
};

template <class Config, bool kTerms>
class GroupedGemm final : public CutlassGrouped<typename GroupedTypes<Config, kTerms>::Gemm> {
  using T = GroupedTypes<Config, kTerms>;
  using ElementIn = typename T::ElementIn;
  using ElementD = typename T::ElementD;
  using StrideA = typename T::Kernel::InternalStrideA;
  using StrideB = typename T::Kernel::InternalStrideB;
  using StrideD = typename T::Kernel::InternalStrideD;

 public:
  GroupedGemm(const GroupedTcBuffers& buf, int groups, int64_t n, int64_t k, int num_sms)
      : CutlassGrouped<typename T::Gemm>("grouped GEMM") {
    if (n % T::kAlignD != 0 || k % T::kAlignIn != 0)
      throw std::invalid_argument("grouped GEMM: n and k must be multiples of " + std::to_string(T::kAlignD) +
                                  " and " + std::to_string(T::kAlignIn));
    StrideA* a = this->repeated(cutlass::make_cute_packed_stride(StrideA{}, {1, static_cast<int>(k), 1}), groups);
    StrideB* b = this->repeated(
        cutlass::make_cute_packed_stride(StrideB{}, {static_cast<int>(n), static_cast<int>(k), 1}), groups);
    StrideD* d = this->repeated(cutlass::make_cute_packed_stride(StrideD{}, {1, static_cast<int>(n), 1}), groups);
    typename T::Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        this->problems(buf, groups),
        {reinterpret_cast<const ElementIn**>(buf.a), a, reinterpret_cast<const ElementIn**>(buf.b), b},
        {{}, nullptr, nullptr, reinterpret_cast<ElementD**>(buf.d), d},
        this->hardware(num_sms)};
    // Arguments of Sm90EVT<Mul, AScale, Sm90EVT<Mul, BScale, Acc>>: children first, then the node.
    const typename T::Scaled::Arguments scaled = {{buf.a_scale, 1.0f, {}}, {{buf.b_scale, 1.0f, {}}, {}, {}}, {}};
    if constexpr (kTerms) args.epilogue.thread = {{buf.row_weight, 1.0f, {}}, scaled, {}};
    else args.epilogue.thread = scaled;
    this->initialize(args);
  }
};

// The same product computed transposed ("swapped": the weights as A, the input rows as B), so that
// the tile's n counts input rows and need not be 64 or 128: an expert of 130-192 rows fits one
// 128 x 192 tile instead of two 128-row ones, the second mostly padding (gemm_tuning.h). (Swapped
// 128 x 32 and 128 x 48 tiles for a few rows per expert were measured too, FP8 channel at 4-64 rows:
// within -3..+3% of the 64 x 128 pingpong tile, up to 1.6x slower on Qwen3-30B-A3B's GEMM2, so not
// built; bench/NOTES.md, thirty-second session.)
//
//   per group e:  D_e^T[n, m] = sum_k B_e[n, k] * A_e[m, k] * b_scale_e[n] * a_scale_e[m]
//
// B_e: [n, k] row-major weights (GEMM A), A_e: [m_e, k] input rows (GEMM B, k contiguous), D_e^T
// column-major = D_e: [m_e, n] row-major as above; problem_mnk holds (n, m_e, k).
template <class Config, bool kTerms = false>
struct SwappedTypes {
  using ElementIn = typename Config::ElementIn;
  using ElementAcc = typename Config::ElementAcc;
  using ElementD = std::conditional_t<kTerms, cutlass::bfloat16_t, float>;
  using TileShape = typename Config::TileShape;
  using ClusterShape = typename Config::ClusterShape;
  static constexpr int kAlignIn = 128 / cutlass::sizeof_bits<ElementIn>::value;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;

  // D^T = (acc * b_scale[n]) * a_scale[m] as GroupedTypes rounds it: the weight scales a column
  // vector (the GEMM's m), the input scales a row vector (its n) read element by element (a group's
  // rows start anywhere in the sorted rows).
  using Acc = cutlass::epilogue::fusion::Sm90AccFetch;
  using WScale = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float*, float>;
  using XScale = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float*, float, Stride<_0, _1, _0>, 1>;
  using Mul = cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float,
                                                     cutlass::FloatRoundStyle::round_to_nearest>;
  using Scaled = cutlass::epilogue::fusion::Sm90EVT<Mul, XScale, cutlass::epilogue::fusion::Sm90EVT<Mul, WScale, Acc>>;
  using RowWeight = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float*, float, Stride<_0, _1, _0>, 1>;
  using MulToBf16 = cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, cutlass::bfloat16_t, float,
                                                           cutlass::FloatRoundStyle::round_to_nearest>;
  using Epilogue = std::conditional_t<kTerms, cutlass::epilogue::fusion::Sm90EVT<MulToBf16, RowWeight, Scaled>, Scaled>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, float, void, cutlass::layout::ColumnMajor*, kAlignD,
      ElementD, cutlass::layout::ColumnMajor*, kAlignD, typename Config::EpilogueSchedule, Epilogue>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementIn, cutlass::layout::RowMajor*, kAlignIn, ElementIn,
      cutlass::layout::ColumnMajor*, kAlignIn, ElementAcc, TileShape, ClusterShape,
      StagesAfter<CollectiveEpilogue>, typename Config::KernelSchedule>::CollectiveOp;
  using Gemm = GroupedGemmOf<CollectiveMainloop, CollectiveEpilogue>;  // problems (n, m, k)
  using Kernel = typename Gemm::GemmKernel;
};

template <class Config, bool kTerms>
class SwappedGroupedGemm final : public CutlassGrouped<typename SwappedTypes<Config, kTerms>::Gemm> {
  using T = SwappedTypes<Config, kTerms>;
  using ElementIn = typename T::ElementIn;
  using ElementD = typename T::ElementD;
  using StrideW = typename T::Kernel::InternalStrideA;
  using StrideX = typename T::Kernel::InternalStrideB;
  using StrideD = typename T::Kernel::InternalStrideD;

 public:
  SwappedGroupedGemm(const GroupedTcBuffers& buf, int groups, int64_t n, int64_t k, int num_sms)
      : CutlassGrouped<typename T::Gemm>("swapped grouped GEMM") {
    if (n % T::kAlignD != 0 || k % T::kAlignIn != 0)
      throw std::invalid_argument("swapped grouped GEMM: n and k must be multiples of " + std::to_string(T::kAlignD) +
                                  " and " + std::to_string(T::kAlignIn));
    const int rows = static_cast<int>(n), cols = static_cast<int>(k);
    StrideW* w = this->repeated(cutlass::make_cute_packed_stride(StrideW{}, {rows, cols, 1}), groups);
    StrideX* x = this->repeated(cutlass::make_cute_packed_stride(StrideX{}, {1, cols, 1}), groups);
    StrideD* d = this->repeated(cutlass::make_cute_packed_stride(StrideD{}, {rows, 1, 1}), groups);
    typename T::Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        this->problems(buf, groups),
        {reinterpret_cast<const ElementIn**>(buf.b), w, reinterpret_cast<const ElementIn**>(buf.a), x},
        {{}, nullptr, nullptr, reinterpret_cast<ElementD**>(buf.d), d},
        this->hardware(num_sms)};
    // Arguments of Sm90EVT<Mul, XScale, Sm90EVT<Mul, WScale, Acc>>: children first, then the node.
    const typename T::Scaled::Arguments scaled = {{buf.a_scale, 1.0f, {}}, {{buf.b_scale, 1.0f, {}}, {}, {}}, {}};
    if constexpr (kTerms) args.epilogue.thread = {{buf.row_weight, 1.0f, {}}, scaled, {}};
    else args.epilogue.thread = scaled;
    this->initialize(args, /*weights_are_a=*/true);
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
      return std::make_unique<SwappedGroupedGemm<Swapped128x192, kTerms>>(buf, groups, n, k, num_sms);
  }
  throw std::invalid_argument("grouped GEMM: unknown tile configuration");
}

}  // namespace qmoe::cuda::sm90
