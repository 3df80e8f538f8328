// Prefill grouped GEMM instances (one per GroupedTile) for FP8 W8A8 with 128 x 128 weight blocks and
// inputs quantized in groups of 128 columns (DeepSeek-V3's scheme): CUTLASS's pointer-array
// blockwise-scaled FP8 kernel. Each 128-deep k-tile's partial sums come from the MMA (its
// reduced-precision accumulator over 4 MMAs), are multiplied by the tile's input scale (per row)
// and weight scale (per 128 weight rows) and added in fp32: the CPU reference's dequantized dot
// product, summed in another order.
//
// Per group (local expert) e with m_e rows:
//   A_e: [m_e, k] fp8 rows of the sorted input (row-major), SFA_e: [m_e, ceil(k / 128)] fp32
//   B_e: [n, k] fp8 weights (the checkpoint's [out, in]), SFB_e: [ceil(n / 128), ceil(k / 128)] fp32
//   D_e: [m_e, n] fp32 row-major
// Both scale arrays are k-contiguous, so a sorted row's scales are one contiguous run and the weight
// scales keep the checkpoint's layout.
#include "cuda/grouped_sm90.cuh"
#include "cutlass/detail/blockwise_scale_layout.hpp"

namespace qmoe::cuda {
namespace sm90 {

template <class Config>
struct BlockwiseTypes {
  using ElementIn = cutlass::float_e4m3_t;
  using ElementD = float;
  using TileShape = typename Config::TileShape;
  using ClusterShape = typename Config::ClusterShape;
  // One input scale per (row, 128 columns), one weight scale per (128 rows, 128 columns), k-major.
  using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::K, cute::GMMA::Major::K>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
  static constexpr int kAlignIn = 16;  // 16-byte rows of fp8
  static constexpr int kAlignD = 4;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor*, kAlignD,
      ElementD, cutlass::layout::RowMajor*, kAlignD, typename Config::EpilogueSchedule>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementIn, cute::tuple<cutlass::layout::RowMajor*, LayoutSFA*>,
      kAlignIn, ElementIn, cute::tuple<cutlass::layout::ColumnMajor*, LayoutSFB*>, kAlignIn, float, TileShape,
      ClusterShape, StagesAfter<CollectiveEpilogue>, typename Config::KernelSchedule>::CollectiveOp;
  using Gemm = GroupedGemmOf<CollectiveMainloop, CollectiveEpilogue>;
  using Kernel = typename Gemm::GemmKernel;
};

template <class Config>
class BlockwiseGroupedGemm final : public CutlassGrouped<typename BlockwiseTypes<Config>::Gemm> {
  using T = BlockwiseTypes<Config>;
  using StrideA = typename T::Kernel::InternalStrideA;
  using StrideB = typename T::Kernel::InternalStrideB;
  using StrideD = typename T::Kernel::InternalStrideD;

 public:
  BlockwiseGroupedGemm(const GroupedTcBuffers& buf, int groups, int64_t n, int64_t k, int num_sms)
      : CutlassGrouped<typename T::Gemm>("FP8 block-scaled grouped GEMM") {
    if (n % T::kAlignD != 0 || k % T::kAlignIn != 0)
      throw std::invalid_argument("FP8 block-scaled grouped GEMM: n and k must be multiples of " +
                                  std::to_string(T::kAlignD) + " and " + std::to_string(T::kAlignIn));
    if (buf.a_scale == nullptr || buf.b_scale == nullptr)
      throw std::invalid_argument("FP8 block-scaled grouped GEMM: no input or weight scales");
    const int rows = static_cast<int>(n), cols = static_cast<int>(k);
    StrideA* a = this->repeated(cutlass::make_cute_packed_stride(StrideA{}, {1, cols, 1}), groups);
    StrideB* b = this->repeated(cutlass::make_cute_packed_stride(StrideB{}, {rows, cols, 1}), groups);
    StrideD* d = this->repeated(cutlass::make_cute_packed_stride(StrideD{}, {1, rows, 1}), groups);
    // The grouped kernel derives each group's scale layouts from its problem shape; these per-group
    // layouts (for one row) are only carried along.
    auto* sfa = this->repeated(T::ScaleConfig::tile_atom_to_shape_SFA(make_shape(1, rows, cols, 1)), groups);
    auto* sfb = this->repeated(T::ScaleConfig::tile_atom_to_shape_SFB(make_shape(1, rows, cols, 1)), groups);
    typename T::Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        this->problems(buf, groups),
        {reinterpret_cast<const typename T::ElementIn**>(buf.a), a, reinterpret_cast<const typename T::ElementIn**>(buf.b),
         b, const_cast<const float**>(buf.a_scale), sfa, const_cast<const float**>(buf.b_scale), sfb},
        {{}, nullptr, nullptr, reinterpret_cast<float**>(buf.d), d},
        this->hardware(num_sms)};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    this->initialize(args);
  }
};

}  // namespace sm90

// 64 x 128 pingpong for few rows per expert, 128 x 128 cooperative otherwise (a warpgroup's 64 x 128
// tile keeps its promoted second accumulator in registers; 128-column weight blocks must divide the
// tile's n), in pairs of CTAs that share the input tile (cluster 1 x 2); the large tile is the same
// without clusters, for sweeps (pairs along m, sharing the weight tile, lost everywhere). k-tiles of
// 128: one scale per k-tile.
std::unique_ptr<GroupedTcGemm> make_grouped_fp8_block(GroupedTile tile, const GroupedTcBuffers& buf, int groups,
                                                      int64_t n, int64_t k, int num_sms) {
  using namespace cute;
  using Coop = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise;
  using Pingpong = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise;
  using EpiCoop = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  using EpiPingpong = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
  using E4m3 = cutlass::float_e4m3_t;
  using Small = sm90::GroupedConfig<E4m3, float, Shape<_64, _128, _128>, Shape<_1, _2, _1>, Pingpong, EpiPingpong>;
  using Medium = sm90::GroupedConfig<E4m3, float, Shape<_128, _128, _128>, Shape<_1, _2, _1>, Coop, EpiCoop>;
  using Large = sm90::GroupedConfig<E4m3, float, Shape<_128, _128, _128>, Shape<_1, _1, _1>, Coop, EpiCoop>;
  switch (tile) {
    case GroupedTile::kSmall: return std::make_unique<sm90::BlockwiseGroupedGemm<Small>>(buf, groups, n, k, num_sms);
    case GroupedTile::kMedium: return std::make_unique<sm90::BlockwiseGroupedGemm<Medium>>(buf, groups, n, k, num_sms);
    case GroupedTile::kLarge: return std::make_unique<sm90::BlockwiseGroupedGemm<Large>>(buf, groups, n, k, num_sms);
    case GroupedTile::kHuge:
    case GroupedTile::kTiny:
    case GroupedTile::kTiny48:
    case GroupedTile::kWide: return nullptr;  // not built (grouped_tile_built)
  }
  throw std::invalid_argument("FP8 block-scaled grouped GEMM: unknown tile configuration");
}

}  // namespace qmoe::cuda
