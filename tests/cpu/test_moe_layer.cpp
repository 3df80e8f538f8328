// Loading and running MoE layers beyond the plain fixture runs: tensor and expert parallelism,
// and every kind of malformed checkpoint ending in a clear error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "qmoe/checkpoint.h"
#include "qmoe/compare.h"
#include "qmoe/error.h"
#include "qmoe/moe.h"
#include "quant/formats.h"
#include "test_util.h"

namespace qmoe {
namespace {

using ::testing::HasSubstr;

struct Loaded {
  ModelConfig config;
  std::map<std::string, Tensor> io;
};

Loaded open_fixture(const std::string& dir) {
  return {load_model_config(dir + "/config.json"), read_safetensors(dir + "/io.safetensors")};
}

Tensor run_layer(const std::string& dir, const LoadOptions& options, const Loaded& f) {
  const Checkpoint ckpt(dir);
  const MoeLayer layer = load_moe_layer(ckpt, f.config, f.config.moe.moe_layers.front(), options);
  ForwardOptions fp32;
  fp32.round_intermediate = false;
  return make_backend("cpu", 2)->forward(layer, f.io.at("hidden_states"), f.io.at("router_logits"), fp32);
}

// The message of the qmoe::Error that loading and running the layer raises ("" if none).
std::string run_error(const std::string& dir, const LoadOptions& options, const Loaded& f) {
  try {
    run_layer(dir, options, f);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void add_into(Tensor& acc, const Tensor& part) {
  for (int64_t i = 0; i < acc.numel(); ++i) acc.data<float>()[i] += part.data<float>()[i];
}

// ---- tensor parallelism: the ranks' partial outputs sum to the full layer ----------------------

struct TpCase {
  std::string fixture;
  std::vector<int> tp_sizes;
};

class TensorParallel : public ::testing::TestWithParam<TpCase> {};

TEST_P(TensorParallel, RanksSumToTheFullLayer) {
  const std::string dir = test::fixture_dir(GetParam().fixture);
  const Loaded f = open_fixture(dir);
  const Tensor full = run_layer(dir, {}, f);
  for (int tp : GetParam().tp_sizes) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    Tensor sum(DType::kF32, full.shape());
    for (int rank = 0; rank < tp; ++rank) {
      LoadOptions options;
      options.tp_rank = rank;
      options.tp_size = tp;
      const Tensor part = run_layer(dir, options, f);
      EXPECT_GT(compare_outputs(part, full).rel_l2, 1e-2) << "a rank alone must not already be the full output";
      add_into(sum, part);
    }
    EXPECT_LE(compare_outputs(sum, full).rel_l2, 1e-5);
  }
}

// Weight-only schemes whose slices stay aligned to their scale groups (inter 128). Channel-wise
// int4 stops at tp 2: inter 32 is not Marlin-compatible and vLLM's Triton method needs groups.
INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallel,
                         ::testing::Values(TpCase{"w4a16_g32", {2, 4}}, TpCase{"w4a16_channel", {2}},
                                           TpCase{"nvfp4a16", {2, 4}}, TpCase{"mxfp4a16", {2, 4}},
                                           TpCase{"gptoss_mxfp4a16", {2, 4}}, TpCase{"unquantized", {2, 4}},
                                           TpCase{"mixtral_w4a16_channel", {2}}),
                         [](const ::testing::TestParamInfo<TpCase>& info) { return info.param.fixture; });

TEST(TensorParallelErrors, ChannelWiseBelowTheMarlinTileFallsToTritonAndIsRejected) {
  const std::string dir = test::fixture_dir("w4a16_channel");
  const Loaded f = open_fixture(dir);
  LoadOptions options;
  options.tp_size = 4;
  const std::string msg = run_error(dir, options, f);
  ASSERT_FALSE(msg.empty()) << "expected an error";
  EXPECT_THAT(msg, HasSubstr("CompressedTensorsWNA16MoEMethod"));
  EXPECT_THAT(msg, HasSubstr("channel"));
}

TEST(TensorParallelErrors, GroupsStraddlingRanksAreRejected) {
  const std::string dir = test::fixture_dir("w4a16_g128");
  const Loaded f = open_fixture(dir);
  LoadOptions options;
  options.tp_size = 2;
  // inter 64 per rank is not Marlin-compatible (64 % 128), so vLLM picks the Triton method; its
  // down projection slice [0, 64) would cut a 128-column scale group.
  const std::string msg = run_error(dir, options, f);
  ASSERT_FALSE(msg.empty()) << "expected an error";
  EXPECT_THAT(msg, HasSubstr("down_proj"));
  EXPECT_THAT(msg, HasSubstr("group size 128"));
  options.tp_size = 3;
  EXPECT_THROW(run_layer(dir, options, f), Error);  // 128 % 3
  options.tp_size = 2;
  options.tp_rank = 2;
  EXPECT_THROW(run_layer(dir, options, f), Error);
}

TEST(TensorParallelErrors, ActOrderGroupOnTritonIsRejectedLikeVllm) {
  const std::string dir = test::fixture_dir("w4a16_actorder_group");
  const Loaded f = open_fixture(dir);
  LoadOptions options;
  options.tp_size = 2;
  const std::string msg = run_error(dir, options, f);
  ASSERT_FALSE(msg.empty()) << "expected an error";
  EXPECT_EQ(msg, "WNA16MoE is not supported with actorder=group/dynamic.");
}

// ---- expert parallelism ------------------------------------------------------------------------

class ExpertParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertParallel, RanksSumToTheFullLayer) {
  const std::string dir = test::fixture_dir(GetParam());
  const Loaded f = open_fixture(dir);
  const Tensor full = run_layer(dir, {}, f);
  const int experts = f.config.moe.num_experts;
  for (int ep : {2, 3}) {
    SCOPED_TRACE("ep " + std::to_string(ep));
    Tensor sum(DType::kF32, full.shape());
    for (int rank = 0; rank < ep; ++rank) {
      LoadOptions options;
      options.expert_map = linear_expert_map(experts, ep, rank);
      add_into(sum, run_layer(dir, options, f));
    }
    EXPECT_LE(compare_outputs(sum, full).rel_l2, 1e-6);
  }
}

// Schemes whose activation quantization is per token (or none), so it does not depend on which
// slots a rank holds.
INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertParallel,
                         ::testing::Values("w4a16_g128", "deepseek_fp8_block", "deepseek_nvfp4", "fp8_dynamic",
                                           "int8_w8a8", "gptoss_mxfp4a16"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(ExpertParallelMap, LinearPlacementGivesTheRemainderToTheFirstRanks) {
  // 8 experts on 3 ranks: 3, 3, 2 experts starting at 0, 3, 6 (vLLM's determine_expert_map).
  EXPECT_EQ(linear_expert_map(8, 3, 0), (std::vector<int>{0, 1, 2, -1, -1, -1, -1, -1}));
  EXPECT_EQ(linear_expert_map(8, 3, 1), (std::vector<int>{-1, -1, -1, 0, 1, 2, -1, -1}));
  EXPECT_EQ(linear_expert_map(8, 3, 2), (std::vector<int>{-1, -1, -1, -1, -1, -1, 0, 1}));
  EXPECT_THROW(linear_expert_map(8, 3, 3), Error);
}

TEST(ExpertParallelMap, TokensOnlyOnForeignExpertsGetZeros) {
  const std::string dir = test::fixture_dir("w4a16_g128");
  const Loaded f = open_fixture(dir);
  LoadOptions options;
  options.expert_map = {0, -1, -1, -1};  // only expert 0 is local
  const Tensor out = run_layer(dir, options, f);
  const Tensor& ids = f.io.at("topk_ids");
  const int k = f.config.moe.top_k;
  const int64_t H = f.config.moe.hidden;
  int zero_rows = 0, nonzero_rows = 0;
  for (int64_t t = 0; t < out.dim(0); ++t) {
    bool uses0 = false;
    for (int j = 0; j < k; ++j) uses0 |= ids.data<int32_t>()[t * k + j] == 0;
    double norm = 0;
    for (int64_t h = 0; h < H; ++h) norm += std::fabs(out.data<float>()[t * H + h]);
    if (uses0) {
      EXPECT_GT(norm, 0.0) << "token " << t;
      ++nonzero_rows;
    } else {
      EXPECT_EQ(norm, 0.0) << "token " << t;
      ++zero_rows;
    }
  }
  EXPECT_GT(zero_rows, 0);
  EXPECT_GT(nonzero_rows, 0);
}

TEST(ExpertParallelMap, InvalidMapsAreRejected) {
  const std::string dir = test::fixture_dir("w4a16_g128");
  const Loaded f = open_fixture(dir);
  LoadOptions options;
  options.expert_map = {0, 0, -1, -1};  // two experts on one slot
  EXPECT_THROW(run_layer(dir, options, f), Error);
  options.expert_map = {0, 1, 2};  // wrong length
  EXPECT_THROW(run_layer(dir, options, f), Error);
  options.expert_map = {0, 7, -1, -1};  // out of range
  EXPECT_THROW(run_layer(dir, options, f), Error);
}

// ---- malformed checkpoints ----------------------------------------------------------------------

// Copies a fixture, lets `mutate` edit its tensors (and optionally config.json), and returns the
// message of the qmoe::Error raised by loading layer 0 ("" if none).
using TensorEdit = std::function<void(std::map<std::string, Tensor>&)>;

// Copies a fixture into `dir` and lets `mutate` edit its tensors.
void copy_fixture_edited(const std::string& fixture, const test::TempDir& dir, const TensorEdit& mutate) {
  test::copy_fixture(fixture, dir);
  const std::string model = dir.file("model.safetensors");
  std::map<std::string, Tensor> tensors = read_safetensors(model);
  if (mutate) mutate(tensors);
  std::vector<std::pair<std::string, const Tensor*>> list;
  for (const auto& [name, t] : tensors) list.emplace_back(name, &t);
  write_safetensors(model, list);
}

std::string load_error(const std::string& fixture, const TensorEdit& mutate,
                       const std::function<void(nlohmann::json&)>& mutate_config = nullptr,
                       Target target = Target::kSm90) {
  test::TempDir dir("bad_" + fixture);
  copy_fixture_edited(fixture, dir, mutate);
  if (mutate_config) {
    nlohmann::json cfg = nlohmann::json::parse(test::read_text(dir.file("config.json")));
    mutate_config(cfg);
    test::write_text(dir.file("config.json"), cfg.dump(2));
  }
  try {
    const Checkpoint ckpt(dir.path());
    const ModelConfig config = load_model_config(ckpt.config_path());
    LoadOptions options;
    options.target = target;
    load_moe_layer(ckpt, config, 0, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const std::string kExpert1Gate = "model.layers.0.mlp.experts.1.gate_proj";
const std::string kExpert2Down = "model.layers.0.mlp.experts.2.down_proj";

TEST(BadCheckpoint, MissingExpertTensor) {
  const std::string msg = load_error("w4a16_g128", [](std::map<std::string, Tensor>& t) { t.erase(kExpert2Down + ".weight_scale"); });
  EXPECT_THAT(msg, HasSubstr(kExpert2Down + ".weight_scale"));
  EXPECT_THAT(msg, HasSubstr("not found"));
  const std::string msg2 = load_error("w4a16_g128", [](std::map<std::string, Tensor>& t) { t.erase(kExpert1Gate + ".weight_packed"); });
  EXPECT_THAT(msg2, HasSubstr(kExpert1Gate + ".weight_packed"));
}

TEST(BadCheckpoint, WrongPackedSize) {
  const std::string msg = load_error("w4a16_g128", [](std::map<std::string, Tensor>& t) {
    t[kExpert1Gate + ".weight_packed"] = Tensor(DType::kI32, {128, 31});
  });
  EXPECT_THAT(msg, HasSubstr(kExpert1Gate + ".weight_packed"));
  EXPECT_THAT(msg, HasSubstr("[128, 31]"));
  EXPECT_THAT(msg, HasSubstr("[128, 32]"));
}

TEST(BadCheckpoint, WrongDtype) {
  const std::string msg = load_error("w4a16_g128", [](std::map<std::string, Tensor>& t) {
    t[kExpert1Gate + ".weight_scale"] = Tensor(DType::kI32, {128, 2});
  });
  EXPECT_THAT(msg, HasSubstr(kExpert1Gate + ".weight_scale"));
  EXPECT_THAT(msg, HasSubstr("dtype I32"));
}

TEST(BadCheckpoint, WeightShapeDisagrees) {
  const std::string msg = load_error("w4a16_g128", [](std::map<std::string, Tensor>& t) {
    Tensor& shape = t.at(kExpert1Gate + ".weight_shape");
    shape.data<int64_t>()[1] = 512;
  });
  EXPECT_THAT(msg, HasSubstr(kExpert1Gate + ".weight_shape"));
}

void set_bf16(Tensor& t, int64_t i, float v) { t.data<uint16_t>()[i] = quant::float_to_bf16(v); }

TEST(BadCheckpoint, NanInfAndZeroScales) {
  for (float bad : {NAN, INFINITY, 0.0f}) {
    const std::string msg =
        load_error("w4a16_g128", [&](std::map<std::string, Tensor>& t) { set_bf16(t.at(kExpert2Down + ".weight_scale"), 37, bad); });
    EXPECT_THAT(msg, HasSubstr(kExpert2Down + ".weight_scale"));
    EXPECT_THAT(msg, HasSubstr("flat index 37"));
  }
  const std::string fp8 = load_error("fp8_dynamic", [](std::map<std::string, Tensor>& t) {
    set_bf16(t.at("model.layers.0.mlp.experts.3.up_proj.weight_scale"), 5, NAN);
  });
  EXPECT_THAT(fp8, HasSubstr("experts.3.up_proj.weight_scale"));
  const std::string nv = load_error("nvfp4", [](std::map<std::string, Tensor>& t) {
    t.at(kExpert1Gate + ".weight_global_scale").data<float>()[0] = 0.0f;
  });
  EXPECT_THAT(nv, HasSubstr(kExpert1Gate + ".weight_global_scale"));
  const std::string nv_block = load_error("nvfp4a16", [](std::map<std::string, Tensor>& t) {
    t.at(kExpert1Gate + ".weight_scale").data<uint8_t>()[3] = 0x7F;  // fp8 NaN
  });
  EXPECT_THAT(nv_block, HasSubstr(kExpert1Gate + ".weight_scale"));
  const std::string mx = load_error("mxfp4a16", [](std::map<std::string, Tensor>& t) {
    t.at(kExpert1Gate + ".weight_scale").data<uint8_t>()[0] = 255;  // E8M0 infinity
  });
  EXPECT_THAT(mx, HasSubstr("exponent 255"));
  const std::string static_in = load_error("fp8_static", [](std::map<std::string, Tensor>& t) {
    set_bf16(t.at(kExpert2Down + ".input_scale"), 0, NAN);
  });
  EXPECT_THAT(static_in, HasSubstr(kExpert2Down + ".input_scale"));
}

TEST(BadCheckpoint, OutOfRangeValues) {
  const std::string gidx = load_error("w4a16_actorder_group", [](std::map<std::string, Tensor>& t) {
    t.at(kExpert1Gate + ".weight_g_idx").data<int32_t>()[10] = 9;
  });
  EXPECT_THAT(gidx, HasSubstr(kExpert1Gate + ".weight_g_idx"));
  EXPECT_THAT(gidx, HasSubstr("column 10"));
  const std::string int4 = load_error("w4a8_int_intq", [](std::map<std::string, Tensor>& t) {
    t.at(kExpert1Gate + ".weight").data<int8_t>()[100] = 100;
  }, nullptr, Target::kCpu);
  EXPECT_THAT(int4, HasSubstr(kExpert1Gate + ".weight"));
  EXPECT_THAT(int4, HasSubstr("4-bit range"));
}

TEST(BadCheckpoint, StaticInputScalesOfGateAndUpMustAgree) {
  const std::string msg = load_error("fp8_static", [](std::map<std::string, Tensor>& t) {
    set_bf16(t.at("model.layers.0.mlp.experts.0.up_proj.input_scale"), 0, 0.5f);
  });
  EXPECT_THAT(msg, HasSubstr("input_scales of w1 and w3 of a layer must be equal. But got"));
}

TEST(BadCheckpoint, SchemesDifferingAcrossProjections) {
  const std::string msg = load_error("w4a16_g128", nullptr, [](nlohmann::json& cfg) {
    auto& groups = cfg["quantization_config"]["config_groups"];
    nlohmann::json down = groups["group_0"];
    down["targets"] = {"re:.*down_proj"};
    down["weights"]["group_size"] = 32;
    groups["a_down"] = down;  // sorted before group_0: config order is key order on disk
  });
  EXPECT_EQ(msg, "All MoE projections need to have same quantization scheme but found multiple");
}

TEST(BadCheckpoint, TopKAboveExpertsAndUnknownArchitecture) {
  const std::string topk = load_error("w4a16_g128", nullptr, [](nlohmann::json& cfg) { cfg["num_experts_per_tok"] = 9; });
  EXPECT_THAT(topk, HasSubstr("num_experts_per_tok"));
  const std::string arch = load_error("w4a16_g128", nullptr, [](nlohmann::json& cfg) {
    cfg["architectures"] = {"FancyMoeForCausalLM"};
  });
  EXPECT_THAT(arch, HasSubstr("FancyMoeForCausalLM"));
}

TEST(BadCheckpoint, NotAnMoeLayer) {
  const std::string dir = test::fixture_dir("w4a16_g128");
  const Checkpoint ckpt(dir);
  const ModelConfig config = load_model_config(ckpt.config_path());
  try {
    load_moe_layer(ckpt, config, 5, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("layer 5"));
    EXPECT_THAT(e.what(), HasSubstr("not an MoE layer"));
  }
}

TEST(BadCheckpoint, TruncatedFileNamesTheFile) {
  test::TempDir dir("truncated");
  test::copy_fixture("w4a16_g128", dir);
  const std::string model = dir.file("model.safetensors");
  std::filesystem::resize_file(model, std::filesystem::file_size(model) - 100);
  try {
    const Checkpoint ckpt(dir.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.safetensors"));
  }
}

// ---- bad forward inputs -------------------------------------------------------------------------

TEST(BadForwardInput, ShapesDtypesAndNonFiniteValues) {
  const std::string dir = test::fixture_dir("w4a16_g128");
  const Loaded f = open_fixture(dir);
  const Checkpoint ckpt(dir);
  const MoeLayer layer = load_moe_layer(ckpt, f.config, 0, {});
  auto backend = make_backend("cpu");
  const Tensor& x = f.io.at("hidden_states");
  const Tensor& logits = f.io.at("router_logits");
  for (Backend* b : {backend.get()}) {
    EXPECT_THROW(b->forward(layer, Tensor(DType::kBF16, {16, 255}), logits, {}), Error);
    EXPECT_THROW(b->forward(layer, x, Tensor(DType::kF32, {16, 5}), {}), Error);
    EXPECT_THROW(b->forward(layer, x, Tensor(DType::kF32, {15, 4}), {}), Error);
    EXPECT_THROW(b->forward(layer, Tensor(DType::kI32, {16, 256}), logits, {}), Error);
    Tensor nan_logits = logits;
    nan_logits.data<float>()[7] = NAN;
    EXPECT_THROW(b->forward(layer, x, nan_logits, {}), Error);
    Tensor inf_x = x;
    inf_x.data<uint16_t>()[3] = 0x7F80;  // bf16 +inf
    EXPECT_THROW(b->forward(layer, inf_x, logits, {}), Error);
  }
  EXPECT_THROW(make_backend("cuda"), NotSupported);
  EXPECT_THROW(make_backend("tpu"), Error);
}

TEST(Forward, EmptyBatchAndOneToken) {
  const std::string dir = test::fixture_dir("w4a16_g128");
  const Loaded f = open_fixture(dir);
  const Checkpoint ckpt(dir);
  const MoeLayer layer = load_moe_layer(ckpt, f.config, 0, {});
  auto backend = make_backend("cpu");
  const Tensor empty = backend->forward(layer, Tensor(DType::kBF16, {0, 256}), Tensor(DType::kF32, {0, 4}), {});
  EXPECT_EQ(empty.shape(), (std::vector<int64_t>{0, 256}));
  // One token equals the first row of the batched result (rows are independent).
  Tensor x1(DType::kBF16, {1, 256}), l1(DType::kF32, {1, 4});
  std::memcpy(x1.raw(), f.io.at("hidden_states").raw(), x1.size_bytes());
  std::memcpy(l1.raw(), f.io.at("router_logits").raw(), l1.size_bytes());
  const Tensor one = backend->forward(layer, x1, l1, {});
  const Tensor all = backend->forward(layer, f.io.at("hidden_states"), f.io.at("router_logits"), {});
  for (int64_t h = 0; h < 256; ++h) EXPECT_EQ(one.data<float>()[h], all.data<float>()[h]);
}

}  // namespace
}  // namespace qmoe

namespace qmoe {
namespace {

TEST(BadCheckpoint, GroupSizeMustDivideTheInputSize) {
  // NVFP4 (tensor_group 16) with a hidden size of 40: rejected before any scale is read.
  const std::string msg = load_error("nvfp4a16", nullptr, [](nlohmann::json& cfg) { cfg["hidden_size"] = 40; });
  EXPECT_THAT(msg, HasSubstr("not a multiple of group_size 16"));
}

// An independent e4m3 rounding for the values these tests meet (normal range, at most 448): the
// nearest multiple of the binade's step, ties to even.
double round_e4m3(double x) {
  const double a = std::fabs(x);
  if (a == 0.0) return 0.0;
  const double step = a < 1.0 / 64 ? 1.0 / 512 : std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - 3);
  return std::copysign(std::nearbyint(a / step) * step, x);
}

TEST(W4A8Fp8Weights, FollowVllmsScaleConversionAndProductRounding) {
  // vLLM converts each row's group scales with its dynamic per-token fp8 quantization: chan =
  // max(max|s| / 448, 1 / (448 * 512)), scale code = fp8(s / chan), s8 = fp8(scale code / 8); its
  // kernel's lookup table feeds the MMA fp8(q * s8) (q the int4 weight) and applies chan * 8 after
  // the sum. The layer holds those FP8 products with chan * 8 as a per-row scale.
  test::TempDir dir("w4a8_scales");
  const uint16_t tiny = quant::float_to_bf16(3e-4f), big = quant::float_to_bf16(0.05f);
  const uint16_t small = quant::float_to_bf16(9.25e-6f);
  const std::string gate = "model.layers.0.mlp.experts.0.gate_proj";
  copy_fixture_edited("w4a8_fp8", dir, [&](std::map<std::string, Tensor>& tensors) {
    Tensor& s = tensors.at(gate + ".weight_scale");  // BF16 [256, 2]
    ASSERT_EQ(s.dtype(), DType::kBF16);
    s.data<uint16_t>()[0] = s.data<uint16_t>()[1] = tiny;  // row 0: both groups below 1/512
    s.data<uint16_t>()[2] = big;                            // row 1: one large, one tiny group
    s.data<uint16_t>()[3] = small;
  });
  const Checkpoint ckpt(dir.path());
  const MoeLayer layer = load_moe_layer(ckpt, load_model_config(ckpt.config_path()), 0, {});
  const QuantWeight& w = layer.experts[0].w13;  // gate rows first
  ASSERT_EQ(w.format, WeightFormat::kFp8);
  ASSERT_EQ(w.strategy, Strategy::kChannel);
  ASSERT_EQ(w.scale.dtype(), DType::kF32);
  const Tensor packed = ckpt.read(gate + ".weight_packed");  // I32 [256, 256 / 8]
  auto q_at = [&](int64_t row, int64_t col) { return quant::unpack_int(packed.data<int32_t>() + row * packed.dim(1), col, 4); };
  auto value = [&](int64_t row, int64_t col) { return quant::fp8e4m3_to_float(w.data.data<uint8_t>()[row * w.cols + col]); };

  // Row 0 by hand: bf16(3e-4) = 0x399D = 2.9945e-4; the floor gives chan = 1 / 229376, s / chan =
  // 68.69, which fp8 rounds to 72 (step 8 in [64, 128)); s8 = fp8(72 / 8) = 9; row scale 8 / 229376.
  // Without the floor chan would be s / 448.
  EXPECT_EQ(tiny, 0x399D);
  EXPECT_FLOAT_EQ(w.scale.data<float>()[0], 8.0f / 229376.0f);
  // Its products q * 9 in e4m3: 27 -> 28 (a tie, to even), 45 -> 44, 63 -> 64; 9, 18, 36, 72 exact.
  int rounded = 0;
  for (int64_t c = 0; c < w.cols; ++c) {
    const int q = q_at(0, c);
    EXPECT_EQ(value(0, c), round_e4m3(9.0 * q)) << "column " << c << ", q " << q;
    rounded += value(0, c) != 9.0 * q;
  }
  EXPECT_GT(rounded, 0) << "the row should exercise the product rounding";
  EXPECT_EQ(round_e4m3(27.0), 28.0);
  EXPECT_EQ(round_e4m3(-45.0), -44.0);

  // Row 1: the large group is exactly 448 * chan, so s8 = 56; the small one is quantized twice (fp8,
  // then fp8 of an eighth, in fp8's subnormal range), which can round differently from quantizing
  // s / chan / 8 once. Step by step with independent arithmetic (e4m3 steps: 2^-7 in [2^-4, 2^-3),
  // subnormals 2^-9):
  const double chan = static_cast<double>(quant::bf16_to_float(big)) / 448.0;
  EXPECT_NEAR(w.scale.data<float>()[1], chan * 8.0, 1e-6 * chan * 8.0);
  const double ratio = quant::bf16_to_float(small) / static_cast<float>(chan);
  ASSERT_GT(ratio, 1.0 / 16);
  ASSERT_LT(ratio, 1.0 / 8);
  const double scale_code = std::nearbyint(ratio * 128.0) / 128.0;     // fp8 in [2^-4, 2^-3)
  const double s8 = std::nearbyint(scale_code / 8.0 * 512.0) / 512.0;  // fp8 subnormal (ties to even)
  const double once = std::nearbyint(ratio / 8.0 * 512.0) / 512.0;
  EXPECT_NE(s8, once) << "the case should exercise the double rounding";
  for (int64_t c = 0; c < w.cols; ++c) {
    const int q = q_at(1, c);
    EXPECT_EQ(value(1, c), round_e4m3((c < 128 ? 56.0 : s8) * q)) << "column " << c << ", q " << q;
  }
}

TEST(DequantizeRow, Fp8RowsMatchTheElementFormulaForEveryCode) {
  // dequantize_row's FP8 path (a table of code values) against quant::dequant_fp8 element by
  // element: every code (NaN codes included), tensor / channel / 128 x 128 block scales, bf16 and f32
  // scales, with and without the rounding to the scale dtype.
  for (Strategy strategy : {Strategy::kTensor, Strategy::kChannel, Strategy::kBlock})
    for (DType scale_dtype : {DType::kBF16, DType::kF32}) {
      QuantWeight w;
      w.format = WeightFormat::kFp8;
      w.bits = 8;
      w.rows = 2;
      w.cols = 256;
      w.strategy = strategy;
      w.data = Tensor(DType::kF8E4M3, {2, 256});
      for (int64_t i = 0; i < 512; ++i) w.data.data<uint8_t>()[i] = static_cast<uint8_t>(i * 7 % 256);
      const float values[4] = {0.0173f, 3.1e-5f, 2.75f, 0.5f};
      const std::vector<int64_t> shape = strategy == Strategy::kTensor    ? std::vector<int64_t>{1}
                                         : strategy == Strategy::kChannel ? std::vector<int64_t>{2, 1}
                                                                          : std::vector<int64_t>{1, 2};
      if (strategy == Strategy::kBlock) w.block_rows = w.block_cols = 128;
      w.scale = Tensor(scale_dtype, shape);
      for (int64_t i = 0; i < w.scale.numel(); ++i) {
        if (scale_dtype == DType::kBF16) w.scale.data<uint16_t>()[i] = quant::float_to_bf16(values[i]);
        else w.scale.data<float>()[i] = values[i];
      }
      for (bool round : {true, false})
        for (int64_t r = 0; r < 2; ++r) {
          std::vector<float> out(256);
          dequantize_row(w, r, round, out.data());
          const quant::ScaleKind kind = round && scale_dtype == DType::kBF16 ? quant::ScaleKind::kBF16 : quant::ScaleKind::kF32;
          for (int64_t c = 0; c < 256; ++c) {
            const int64_t si = strategy == Strategy::kTensor ? 0 : strategy == Strategy::kChannel ? r : c / 128;
            const float s = scale_dtype == DType::kBF16 ? quant::bf16_to_float(w.scale.data<uint16_t>()[si]) : w.scale.data<float>()[si];
            const float want = quant::dequant_fp8(w.data.data<uint8_t>()[r * 256 + c], s, kind);
            if (std::isnan(want)) {
              EXPECT_TRUE(std::isnan(out[c])) << c;
            } else {
              EXPECT_EQ(out[c], want) << "strategy " << static_cast<int>(strategy) << " row " << r << " col " << c;
            }
          }
        }
    }
}

TEST(DequantizeRow, IntegerRowsMatchTheElementFormula) {
  // dequantize_row's integer paths (tables per group, scales hoisted per group) against
  // quant::dequant_int element by element: 4- and 8-bit codes packed and in int8 storage, tensor,
  // channel and group scales (groups of 64 and 128, with zero points), bf16 scales with and without
  // the rounding to the scale dtype.
  struct Case {
    WeightFormat format;
    int bits;
    Strategy strategy;
    int64_t group;
    bool zero_points;
  };
  const Case cases[] = {{WeightFormat::kIntPacked, 8, Strategy::kGroup, 128, false},
                        {WeightFormat::kIntPacked, 8, Strategy::kGroup, 64, true},
                        {WeightFormat::kIntPacked, 8, Strategy::kChannel, 0, false},
                        {WeightFormat::kIntPacked, 4, Strategy::kGroup, 128, true},
                        {WeightFormat::kIntUnpacked, 8, Strategy::kChannel, 0, false},
                        {WeightFormat::kIntUnpacked, 8, Strategy::kTensor, 0, false},
                        {WeightFormat::kIntUnpacked, 4, Strategy::kGroup, 128, false},
                        {WeightFormat::kIntUnpacked, 8, Strategy::kGroup, 64, true}};
  const int64_t rows = 3, cols = 256;
  for (const Case& k : cases) {
    QuantWeight w;
    w.format = k.format;
    w.bits = k.bits;
    w.rows = rows;
    w.cols = cols;
    w.strategy = k.strategy;
    w.group_size = k.group;
    const int lo = -(1 << (k.bits - 1)), span = 1 << k.bits;
    std::vector<int8_t> q(rows * cols);
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int8_t>(lo + static_cast<int>(i * 37 % span));
    if (k.format == WeightFormat::kIntPacked) {
      const int64_t words = quant::packed_words_per_row(cols, k.bits);
      w.data = Tensor(DType::kI32, {rows, words});
      for (int64_t r = 0; r < rows; ++r) quant::pack_int_row(q.data() + r * cols, cols, k.bits, w.data.data<int32_t>() + r * words);
    } else {
      w.data = Tensor(DType::kI8, {rows, cols});
      std::memcpy(w.data.raw(), q.data(), q.size());
    }
    const int64_t groups = k.strategy == Strategy::kGroup ? cols / k.group : 1;
    w.scale = Tensor(DType::kBF16, k.strategy == Strategy::kTensor ? std::vector<int64_t>{1} : std::vector<int64_t>{rows, groups});
    for (int64_t i = 0; i < w.scale.numel(); ++i) w.scale.data<uint16_t>()[i] = quant::float_to_bf16(0.0031f * static_cast<float>(i + 1));
    if (k.zero_points) {
      w.zero_point = Tensor(DType::kI8, {rows, groups});
      for (int64_t i = 0; i < w.zero_point.numel(); ++i) w.zero_point.data<int8_t>()[i] = static_cast<int8_t>(i % 5 - 2);
    }
    for (bool round : {true, false})
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> out(cols);
        dequantize_row(w, r, round, out.data());
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t g = k.strategy == Strategy::kGroup ? c / k.group : 0;
          const int64_t si = k.strategy == Strategy::kTensor ? 0 : r * groups + g;
          const float s = quant::bf16_to_float(w.scale.data<uint16_t>()[si]);
          const int z = k.zero_points ? w.zero_point.data<int8_t>()[r * groups + g] : 0;
          const float want = quant::dequant_int(q[r * cols + c], z, s, round ? quant::ScaleKind::kBF16 : quant::ScaleKind::kF32);
          EXPECT_EQ(out[c], want) << "case " << (&k - cases) << " row " << r << " col " << c;
        }
      }
  }
}

TEST(DequantizeRow, IntegerTablesMatchTheElementFormulaAtTheEdges) {
  // The per-group tables of 4- and 8-bit codes and the per-element path of shorter groups (both
  // without the per-entry dtype switch for bf16 scales) bit for bit against quant::dequant_int,
  // with scales whose products round, are subnormal, overflow to infinity, are negative, zero,
  // infinite or NaN, and with zero points.
  const float scales[] = {0.0031f, -0.75f, 0.0f, -0.0f, 1e-39f, 3.0e38f, -2.5e38f, 1.0f / 3.0f,
                          std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  const int64_t groups = sizeof scales / sizeof scales[0];
  // Groups at least as long as the table (the table path) and shorter (the formula per element).
  for (auto [bits, group] : {std::pair{4, int64_t{256}}, std::pair{8, int64_t{256}}, std::pair{8, int64_t{128}},
                             std::pair{4, int64_t{8}}}) {
    const int64_t cols = group * groups;
    QuantWeight w;
    w.format = WeightFormat::kIntPacked;
    w.bits = bits;
    w.rows = 1;
    w.cols = cols;
    w.strategy = Strategy::kGroup;
    w.group_size = group;
    const int lo = -(1 << (bits - 1)), span = 1 << bits;
    std::vector<int8_t> q(cols);
    for (int64_t c = 0; c < cols; ++c) q[c] = static_cast<int8_t>(lo + static_cast<int>(c * 37 % span));
    const int64_t words = quant::packed_words_per_row(cols, bits);
    w.data = Tensor(DType::kI32, {1, words});
    quant::pack_int_row(q.data(), cols, bits, w.data.data<int32_t>());
    w.scale = Tensor(DType::kBF16, {1, groups});
    for (int64_t g = 0; g < groups; ++g) w.scale.data<uint16_t>()[g] = quant::float_to_bf16(scales[g]);
    w.zero_point = Tensor(DType::kI8, {1, groups});
    for (int64_t g = 0; g < groups; ++g) w.zero_point.data<int8_t>()[g] = static_cast<int8_t>(g % 7 - 3);
    for (bool round : {true, false}) {
      std::vector<float> out(cols);
      dequantize_row(w, 0, round, out.data());
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t g = c / group;
        const float want = quant::dequant_int(q[c], w.zero_point.data<int8_t>()[g], quant::bf16_to_float(w.scale.data<uint16_t>()[g]),
                                              round ? quant::ScaleKind::kBF16 : quant::ScaleKind::kF32);
        uint32_t got_bits, want_bits;
        std::memcpy(&got_bits, &out[c], 4);
        std::memcpy(&want_bits, &want, 4);
        ASSERT_EQ(got_bits, want_bits) << bits << "-bit, group " << group << ", scale " << scales[g] << ", col " << c
                                       << ", round " << round;
      }
    }
  }
}

TEST(DequantizeRow, Fp4RowsMatchTheElementFormulasForEveryCode) {
  // dequantize_row's MXFP4 and NVFP4 paths (a table of e2m1 values, a factor per block) against the
  // element formulas: every nibble with every scale code (NaN and inf included), NVFP4 with and
  // without the rounding to bf16.
  for (WeightFormat format : {WeightFormat::kMxfp4, WeightFormat::kNvfp4}) {
    QuantWeight w;
    w.format = format;
    w.bits = 4;
    w.rows = 1;
    w.group_size = format == WeightFormat::kMxfp4 ? 32 : 16;
    w.cols = 256 * w.group_size;
    w.strategy = Strategy::kGroup;
    w.global_scale = 1.0f / 3.7f;
    w.data = Tensor(DType::kU8, {1, w.cols / 2});
    for (int64_t i = 0; i < w.cols / 2; ++i) w.data.data<uint8_t>()[i] = static_cast<uint8_t>((2 * i % 16) | ((2 * i + 1) % 16) << 4);
    w.scale = Tensor(format == WeightFormat::kMxfp4 ? DType::kU8 : DType::kF8E4M3, {1, 256});
    for (int g = 0; g < 256; ++g) w.scale.data<uint8_t>()[g] = static_cast<uint8_t>(g);
    for (bool round : {true, false}) {
      std::vector<float> out(w.cols);
      dequantize_row(w, 0, round, out.data());
      for (int64_t c = 0; c < w.cols; ++c) {
        const uint8_t nibble = static_cast<uint8_t>(c % 16);
        const uint8_t s = static_cast<uint8_t>(c / w.group_size);
        const float want = format == WeightFormat::kMxfp4 ? quant::dequant_mxfp4(nibble, s)
                           : round ? quant::dequant_nvfp4(nibble, s, w.global_scale)
                                   : quant::e2m1_to_float(nibble) * (quant::fp8e4m3_to_float(s) / w.global_scale);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(out[c])) << c;
        } else {
          EXPECT_EQ(out[c], want) << "format " << static_cast<int>(format) << " col " << c;
        }
      }
    }
  }
}

TEST(W4A8Fp8Weights, Int4OptionKeepsTheCodesWithExactProducts) {
  // LoadOptions::w4a8_fp8_int4: the checkpoint's int4 codes with one F32 scale per group, s8 * chan *
  // 8 of vLLM's conversion (the same s8 and chan as the FP8 products), so each weight is q * s8 * chan
  // * 8 unrounded, and both backends run it as int4 with FP8 activations.
  test::TempDir dir("w4a8_int4");
  const uint16_t tiny = quant::float_to_bf16(3e-4f);
  const std::string gate = "model.layers.0.mlp.experts.0.gate_proj";
  copy_fixture_edited("w4a8_fp8", dir, [&](std::map<std::string, Tensor>& tensors) {
    Tensor& s = tensors.at(gate + ".weight_scale");
    s.data<uint16_t>()[0] = s.data<uint16_t>()[1] = tiny;  // row 0 as in the test above: s8 = 9
  });
  const Checkpoint ckpt(dir.path());
  LoadOptions int4;
  int4.w4a8_fp8_int4 = true;
  const MoeLayer layer = load_moe_layer(ckpt, load_model_config(ckpt.config_path()), 0, int4);
  const QuantWeight& w = layer.experts[0].w13;
  ASSERT_EQ(w.format, WeightFormat::kIntPacked);
  ASSERT_EQ(w.scale.dtype(), DType::kF32);
  ASSERT_EQ(w.scale.dim(1), 2);
  EXPECT_FLOAT_EQ(w.scale.data<float>()[0], 72.0f / 229376.0f);  // 9 * 8 / 229376
  EXPECT_FLOAT_EQ(w.scale.data<float>()[1], 72.0f / 229376.0f);
  // Row 0's weights: q * 72 / 229376, where the default load rounds q * 9 in e4m3 first.
  const MoeLayer fp8 = load_moe_layer(ckpt, load_model_config(ckpt.config_path()), 0, {});
  std::vector<float> exact(w.cols), rounded(w.cols);
  dequantize_row(w, 0, false, exact.data());
  dequantize_row(fp8.experts[0].w13, 0, false, rounded.data());
  const Tensor packed = ckpt.read(gate + ".weight_packed");
  int differ = 0;
  for (int64_t c = 0; c < w.cols; ++c) {
    const int q = quant::unpack_int(packed.data<int32_t>(), c, 4);
    EXPECT_FLOAT_EQ(exact[c], q * (72.0f / 229376.0f)) << c;
    EXPECT_FLOAT_EQ(rounded[c], static_cast<float>(round_e4m3(9.0 * q)) * (8.0f / 229376.0f)) << c;
    differ += exact[c] != rounded[c];
  }
  EXPECT_GT(differ, 0);
  // Both backends agree on such a layer (CPU backend against the reference).
  const std::map<std::string, Tensor> io = read_safetensors(test::fixture_dir("w4a8_fp8") + "/io.safetensors");
  const OutputDiff d = compare_outputs(make_backend("cpu", 2)->forward(layer, io.at("hidden_states"), io.at("router_logits"), {}),
                                       reference_forward(layer, io.at("hidden_states"), io.at("router_logits"), {}));
  EXPECT_TRUE(d.finite);
  EXPECT_LE(d.rel_l2, tolerance_rel_l2(layer, {}, Comparison::kBackendVsReference));
}

TEST(W4A8Fp8Weights, PackedAndInt8StorageAndChannelScales) {
  // The same int4 values packed (pack-quantized) and in int8 storage (int-quantized, which vLLM's
  // sm90 rule also routes here) give the same FP8 bytes; channel scales act as one group per row.
  const int64_t rows = 2, cols = 256;
  std::vector<int8_t> q(rows * cols);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int8_t>(static_cast<int>(i * 5 % 16) - 8);
  QuantWeight packed;
  packed.format = WeightFormat::kIntPacked;
  packed.bits = 4;
  packed.rows = rows;
  packed.cols = cols;
  packed.strategy = Strategy::kGroup;
  packed.group_size = 128;
  const int64_t words = quant::packed_words_per_row(cols, 4);
  packed.data = Tensor(DType::kI32, {rows, words});
  for (int64_t r = 0; r < rows; ++r) quant::pack_int_row(q.data() + r * cols, cols, 4, packed.data.data<int32_t>() + r * words);
  packed.scale = Tensor(DType::kBF16, {rows, 2});
  const float group_scales[4] = {0.01f, 0.003f, 0.02f, 0.02f};
  for (int i = 0; i < 4; ++i) packed.scale.data<uint16_t>()[i] = quant::float_to_bf16(group_scales[i]);
  QuantWeight stored = packed;
  stored.format = WeightFormat::kIntUnpacked;
  stored.data = Tensor(DType::kI8, {rows, cols});
  std::memcpy(stored.data.raw(), q.data(), q.size());
  const QuantWeight a = w4a8_fp8_as_fp8_channel(packed), b = w4a8_fp8_as_fp8_channel(stored);
  ASSERT_EQ(a.data.size_bytes(), b.data.size_bytes());
  EXPECT_EQ(std::memcmp(a.data.raw(), b.data.raw(), a.data.size_bytes()), 0);
  EXPECT_EQ(std::memcmp(a.scale.raw(), b.scale.raw(), a.scale.size_bytes()), 0);
  // Row 1: both groups at the row's maximum, so s / chan = 448 and s8 = 56; q = 3 gives 168, a tie
  // between 160 and 176 in e4m3, to even: 160. Its row scale: chan * 8 = s * 8 / 448.
  const double s1 = quant::bf16_to_float(quant::float_to_bf16(0.02f));
  EXPECT_NEAR(a.scale.data<float>()[1], s1 * 8.0 / 448.0, 1e-7 * s1);
  int checked = 0;
  for (int64_t c = 0; c < cols; ++c) {
    const int qv = q[cols + c];
    EXPECT_EQ(quant::fp8e4m3_to_float(a.data.data<uint8_t>()[cols + c]), round_e4m3(56.0 * qv)) << c;
    if (qv == 3) {
      EXPECT_EQ(quant::fp8e4m3_to_float(a.data.data<uint8_t>()[cols + c]), 160.0f);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  // Channel scales: row 1 again, as one scale.
  QuantWeight channel = packed;
  channel.strategy = Strategy::kChannel;
  channel.group_size = 0;
  channel.scale = Tensor(DType::kBF16, {rows, 1});
  channel.scale.data<uint16_t>()[0] = quant::float_to_bf16(0.01f);
  channel.scale.data<uint16_t>()[1] = quant::float_to_bf16(0.02f);
  const QuantWeight ch = w4a8_fp8_as_fp8_channel(channel);
  EXPECT_EQ(std::memcmp(ch.data.data<uint8_t>() + cols, a.data.data<uint8_t>() + cols, cols), 0);
  EXPECT_EQ(ch.scale.data<float>()[1], a.scale.data<float>()[1]);
  // Not W4A8-FP8 weights: zero points, 8-bit codes.
  QuantWeight asym = packed;
  asym.zero_point = Tensor(DType::kI8, {rows, 2});
  EXPECT_THROW(w4a8_fp8_as_fp8_channel(asym), Error);
  QuantWeight eight = stored;
  eight.bits = 8;
  EXPECT_THROW(w4a8_fp8_as_fp8_channel(eight), Error);
}

const std::string kExpert0Gate = "model.layers.0.mlp.experts.0.gate_proj";

// Expert 0's gate and up per-tensor scales (BF16 [1]) of an FP8 fixture, both set to `bits`.
void set_expert0_w13_scales(std::map<std::string, Tensor>& tensors, uint16_t bits) {
  tensors.at(kExpert0Gate + ".weight_scale").data<uint16_t>()[0] = bits;
  tensors.at("model.layers.0.mlp.experts.0.up_proj.weight_scale").data<uint16_t>()[0] = bits;
}

TEST(Fp8PerTensorW13, IsRequantizedThroughFp16EvenWhenGateAndUpScalesAreEqual) {
  // vLLM dequantizes each half to fp16 and requantizes with max(s_gate, s_up) whatever the scales;
  // with equal tiny scales the fp16 round trip flushes tiny weights to zero.
  test::TempDir dir("fp8_equal_scales");
  const uint16_t s = quant::float_to_bf16(1e-6f);
  copy_fixture_edited("fp8_static", dir, [&](std::map<std::string, Tensor>& tensors) {
    set_expert0_w13_scales(tensors, s);
    uint8_t* q = tensors.at(kExpert0Gate + ".weight").data<uint8_t>();
    q[0] = 0x01;  // 2^-9 * 1e-6 = 1.9e-9: below fp16's smallest subnormal (6e-8), flushed to 0
    q[1] = 0x7E;  // 448 * 1e-6: a normal fp16, back to 448 exactly
    q[2] = 0x81;  // -2^-9: flushed to -0
  });
  const Checkpoint ckpt(dir.path());
  const MoeLayer layer = load_moe_layer(ckpt, load_model_config(ckpt.config_path()), 0, {});
  const QuantWeight& w13 = layer.experts[0].w13;
  EXPECT_EQ(w13.scale.data<float>()[0], quant::bf16_to_float(s));
  EXPECT_EQ(w13.data.data<uint8_t>()[0], 0x00);
  EXPECT_EQ(w13.data.data<uint8_t>()[1], 0x7E);
  EXPECT_EQ(w13.data.data<uint8_t>()[2] & 0x7F, 0x00);
}

TEST(Fp8PerTensorW13, DequantizesWithTheScaleRoundedToFp16LikeVllmsKernel) {
  // fp16 weights times an fp32 0-dim CUDA tensor: the kernel casts the scale to fp16 first. For a
  // scale in fp16's subnormal range that moves codes. bf16(2e-7) = 2.0023e-7 becomes 1.7881e-7 in
  // fp16; 448 * 1.7881e-7 = 8.011e-5 (a normal fp16), divided by 2.0023e-7 gives 400.07, which fp8
  // rounds to 416 (code 0x7D; steps of 32 in [256, 448]). With the fp32 scale it would stay 448.
  test::TempDir dir("fp8_f16_scale");
  copy_fixture_edited("fp8_static", dir, [](std::map<std::string, Tensor>& tensors) {
    set_expert0_w13_scales(tensors, quant::float_to_bf16(2e-7f));
    tensors.at(kExpert0Gate + ".weight").data<uint8_t>()[0] = 0x7E;  // 448
  });
  const Checkpoint ckpt(dir.path());
  const MoeLayer layer = load_moe_layer(ckpt, load_model_config(ckpt.config_path()), 0, {});
  EXPECT_EQ(layer.experts[0].w13.data.data<uint8_t>()[0], 0x7D);
}

TEST(FloatTypedWna16, IsReadAsPackedIntegersLikeVllm) {
  // vLLM's WNA16 predicate ignores the weights' type: a pack-quantized scheme that says
  // type "float" still goes to the WNA16 method, which reads the tensors as packed integers.
  test::TempDir dir("float_wna16");
  test::copy_fixture("w4a16_channel", dir);
  nlohmann::json cfg = nlohmann::json::parse(test::read_text(dir.file("config.json")));
  for (auto& [name, group] : cfg["quantization_config"]["config_groups"].items()) group["weights"]["type"] = "float";
  test::write_text(dir.file("config.json"), cfg.dump(2));
  const Checkpoint ckpt(dir.path());
  const MoeLayer layer = load_moe_layer(ckpt, load_model_config(ckpt.config_path()), 0, {});
  EXPECT_EQ(layer.decision.vllm_class, "CompressedTensorsWNA16MarlinMoEMethod");
  const Loaded f = open_fixture(test::fixture_dir("w4a16_channel"));
  const Tensor as_float = run_layer(dir.path(), {}, f);
  const Tensor as_int = run_layer(test::fixture_dir("w4a16_channel"), {}, f);
  EXPECT_EQ(0, std::memcmp(as_float.raw(), as_int.raw(), as_int.size_bytes()));
}

}  // namespace
}  // namespace qmoe
