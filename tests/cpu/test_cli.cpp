// The qmoe command-line tool end to end: inspect and run on every fixture, exit codes and
// messages on bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <functional>
#include <fstream>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <sys/wait.h>

#include "config/gemm_plan.h"
#include "config/gemm_tuning.h"
#include "qmoe/checkpoint.h"
#if defined(QMOE_WITH_CUDA)
#include "qmoe/cuda.h"
#endif
#include "qmoe/synthetic.h"
#include "test_util.h"

namespace qmoe {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

Result run_cli(const std::string& args) {
  const std::string cmd = std::string(QMOE_CLI_PATH) + " " + args + " 2>&1";
  Result r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  for (const auto& f : nlohmann::json::parse(test::read_text(test::data_dir() + "/fixtures/manifest.json")))
    names.push_back(f.at("name"));
  return names;
}

class CliFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(CliFixture, InspectAndRunWork) {
  const std::string dir = test::fixture_dir(GetParam());
  const Result inspect = run_cli("inspect " + dir + " --json");
  ASSERT_EQ(inspect.exit_code, 0) << inspect.out;
  const auto j = nlohmann::json::parse(inspect.out);
  ASSERT_FALSE(j.at("layers").empty());
  for (const auto& layer : j.at("layers")) {
    EXPECT_GT(layer.at("expert_weight_bytes").get<uint64_t>(), 0u);
    EXPECT_EQ(layer.at("experts_found"), j.at("num_experts"));
  }
  // The W4A8 int-activation fixtures are rejected on sm90 (as in vLLM); the CPU target runs them.
  const bool w4a8_int = GetParam().rfind("w4a8_int", 0) == 0;
  const std::string target = w4a8_int ? " --target cpu" : "";
  // --verify loads every layer whole: each fixture's layers pass.
  const Result verify = run_cli("inspect " + dir + " --json --verify" + target);
  ASSERT_EQ(verify.exit_code, 0) << verify.out;
  for (const auto& layer : nlohmann::json::parse(verify.out).at("layers"))
    EXPECT_TRUE(layer.at("verify").at("ok").get<bool>()) << layer.dump();
  for (const auto& layer : j.at("layers")) {
    if (w4a8_int) {
      EXPECT_THAT(layer.at("error").get<std::string>(), HasSubstr("divisible by 256"));
    } else {
      EXPECT_FALSE(layer.contains("error")) << layer.dump();
    }
    const Result run = run_cli("run " + dir + " --json --repeat 1 --layer " + std::to_string(layer.at("layer").get<int>()) +
                               " --inputs " + dir + "/io.safetensors" + target);
    ASSERT_EQ(run.exit_code, 0) << run.out;
    const auto r = nlohmann::json::parse(run.out);
    EXPECT_TRUE(r.at("pass").get<bool>());
    ASSERT_EQ(r.at("checks").size(), 2u) << run.out;  // the reference and the fixture's torch output
    for (const auto& c : r.at("checks")) EXPECT_TRUE(c.at("pass").get<bool>()) << c.dump();
    // Group act order (g_idx) keeps the CUDA backend off the tensor cores: its groups are not
    // contiguous in k.
    if (GetParam().find("actorder_group") != std::string::npos)
      EXPECT_EQ(r.at("cuda_gemms").at("w13").get<std::string>(), "CUDA-core GEMV/generic") << run.out;
    else
      EXPECT_FALSE(r.at("cuda_gemms").at("w13").get<std::string>().empty());
  }
}

INSTANTIATE_TEST_SUITE_P(All, CliFixture, ::testing::ValuesIn(fixture_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(Cli, RunNamesTheCudaPrefillKernelAndItsCrossover) {
  const Result r = run_cli("run " + test::fixture_dir("fp8_dynamic") + " --tokens 3 --seed 1 --repeat 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("cuda gemm w13 from " + std::to_string(grouped_min_tokens(GroupedKernel::kFp8, 1, 1, 128)) +
                               " tokens: grouped wgmma (FP8) (not this batch)"));
  const Result g128 = run_cli("run " + test::fixture_dir("w4a16_g128") + " --tokens 3 --seed 1 --repeat 1 --json");
  ASSERT_EQ(g128.exit_code, 0) << g128.out;
  const auto g128_json = nlohmann::json::parse(g128.out);
  const auto int4 = g128_json.at("cuda_prefill_gemms");
  EXPECT_EQ(int4.at("w13").get<std::string>(), to_string(GroupedKernel::kInt4RegsBf16));
  // The W4A16 crossover is in rows per expert: tokens * top_k / experts.
  EXPECT_EQ(int4.at("w13_from_tokens").get<int64_t>(),
            grouped_min_tokens(GroupedKernel::kInt4RegsBf16, g128_json.at("experts").get<int>(),
                               g128_json.at("top_k").get<int>(), g128_json.at("inter").get<int>()));
  // DeepSeek-V3's 128 x 128 FP8 blocks.
  const Result block = run_cli("run " + test::fixture_dir("deepseek_fp8_block") + " --tokens 3 --seed 1 --repeat 1 --json");
  ASSERT_EQ(block.exit_code, 0) << block.out;
  const auto block_json = nlohmann::json::parse(block.out).at("cuda_prefill_gemms");
  EXPECT_EQ(block_json.at("w13").get<std::string>(), to_string(GroupedKernel::kFp8Block));
  EXPECT_EQ(block_json.at("w2").get<std::string>(), to_string(GroupedKernel::kFp8Block));
  // Groups of 32: the 4-bit register kernel, from its own crossover.
  const Result j = run_cli("run " + test::fixture_dir("w4a16_g32") + " --tokens 3 --seed 1 --repeat 1 --json");
  ASSERT_EQ(j.exit_code, 0) << j.out;
  const auto g32_json = nlohmann::json::parse(j.out);
  const auto prefill = g32_json.at("cuda_prefill_gemms");
  EXPECT_EQ(prefill.at("w13").get<std::string>(), to_string(GroupedKernel::kInt4RegsBf16));
  EXPECT_EQ(prefill.at("w13_from_tokens").get<int64_t>(),
            grouped_min_tokens(GroupedKernel::kInt4RegsBf16, g32_json.at("experts").get<int>(), g32_json.at("top_k").get<int>(),
                               g32_json.at("inter").get<int>()));
}

#if defined(QMOE_WITH_CUDA)
TEST(Cli, BenchRejectsUnknownGemmPathsBeforeAnyWork) {
  // Checked before the device is looked for, so this runs on machines without a GPU too.
  Result r = run_cli("bench --gemm-paths decode,prefill:7");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("prefill tiles are 0..6"));
  for (const char* path : {"prefill:1/7", "prefill:1/", "prefill:x/1", "prefill:1/2/3"}) {
    r = run_cli(std::string("bench --gemm-paths ") + path);
    EXPECT_EQ(r.exit_code, 2) << path << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("prefill tiles are 0..6")) << path;
  }
  r = run_cli("bench --gemm-paths fast");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("unknown path 'fast'"));
}

TEST(Cli, BenchRejectsBadTokenCountsModelsAndSchemesBeforeAnyWork) {
  // Also checked before the device is looked for: each names the argument and the bad item.
  for (const char* tokens : {"0", "-3", "abc", "1,2x", "1.5", "1048577", ","}) {
    const Result r = run_cli(std::string("bench --models qwen3-30b-a3b --tokens ") + tokens);
    EXPECT_EQ(r.exit_code, 2) << tokens << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("--tokens")) << tokens;
  }
  Result r = run_cli("bench --models qwen3-30b-a3b,nope --tokens 1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("unknown model shape 'nope'"));
  r = run_cli("bench --models qwen3-30b-a3b --schemes mxfp4,w4a16_g7 --tokens 1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--schemes: unknown synthetic scheme 'w4a16_g7'"));
  EXPECT_THAT(r.out, HasSubstr("w4a16_g128"));  // (the known ones listed)
  r = run_cli("bench --models qwen3-30b-a3b --tokens 1,64 --max-tokens 32");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--max-tokens 32 is below the largest --tokens count (64)"));
  r = run_cli("bench --models qwen3-30b-a3b --tokens 1 --max-tokens 0");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--max-tokens"));
  r = run_cli("bench --models qwen3-30b-a3b --tokens 1 --routing zipf");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--routing: unknown routing 'zipf' (uniform, skewed, mild, balanced)"));
  // The largest count allowed passes the checks and meets the missing device (CPU tests run
  // where there is none, as BenchWithoutAGpuSaysNotSupported below).
  if (cuda_device_count() == 0) {
    r = run_cli("bench --models qwen3-30b-a3b --tokens 1,1048576");
    EXPECT_EQ(r.exit_code, 3) << r.out;
    EXPECT_THAT(r.out, Not(HasSubstr("--tokens")));
  }
}
#endif

TEST(Cli, InspectHumanReadableNamesTheMethodAndClass) {
  const Result r = run_cli("inspect " + test::fixture_dir("deepseek_fp8_block"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("CompressedTensorsW8A8Fp8MoEMethod"));
  EXPECT_THAT(r.out, HasSubstr("float8 block128x128"));
  EXPECT_THAT(r.out, HasSubstr("sigmoid"));
}

TEST(Cli, RunRandomInputsWritesTheOutput) {
  test::TempDir dir("cli_out");
  const std::string out = dir.file("out.safetensors");
  const Result r = run_cli("run " + test::fixture_dir("w4a16_g128") + " --tokens 5 --seed 3 --repeat 1 --output " + out);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("CompressedTensorsWNA16MarlinMoEMethod"));
  EXPECT_THAT(r.out, HasSubstr("PASS"));
  EXPECT_THAT(r.out, HasSubstr("ms per forward"));
  EXPECT_THAT(r.out, HasSubstr("cuda gemm w13: tensor-core (16-bit inputs); w2: tensor-core (16-bit inputs)"));
  const auto tensors = read_safetensors(out);
  ASSERT_TRUE(tensors.count("output"));
  EXPECT_EQ(tensors.at("output").shape(), (std::vector<int64_t>{5, 256}));
  // Same seed, same output; another seed, another output.
  const std::string out2 = dir.file("out2.safetensors"), out3 = dir.file("out3.safetensors");
  ASSERT_EQ(run_cli("run " + test::fixture_dir("w4a16_g128") + " --tokens 5 --seed 3 --repeat 1 --no-check --output " + out2).exit_code, 0);
  ASSERT_EQ(run_cli("run " + test::fixture_dir("w4a16_g128") + " --tokens 5 --seed 4 --repeat 1 --no-check --output " + out3).exit_code, 0);
  EXPECT_EQ(test::read_text(out), test::read_text(out2));
  EXPECT_NE(test::read_text(out), test::read_text(out3));
}

TEST(Cli, ParallelOptions) {
  const std::string dir = test::fixture_dir("deepseek_fp8_block");
  const Result ep = run_cli("run " + dir + " --tokens 4 --repeat 1 --ep-size 3 --ep-rank 2 --json");
  ASSERT_EQ(ep.exit_code, 0) << ep.out;
  EXPECT_EQ(nlohmann::json::parse(ep.out).at("local_experts"), 2);
  const Result tp = run_cli("run " + test::fixture_dir("w4a16_g32") + " --tokens 4 --repeat 1 --tp-size 2 --tp-rank 1 --json");
  ASSERT_EQ(tp.exit_code, 0) << tp.out;
  EXPECT_EQ(nlohmann::json::parse(tp.out).at("inter"), 64);
}

TEST(Cli, BadInputExitsWithAClearMessage) {
  const Result missing = run_cli("inspect /nonexistent/checkpoint");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.out, HasSubstr("/nonexistent/checkpoint"));

  test::TempDir dir("cli_bad");
  test::copy_fixture("w4a16_g128", dir);
  std::filesystem::resize_file(dir.file("model.safetensors"), 50);
  const Result truncated = run_cli("run " + dir.path());
  EXPECT_EQ(truncated.exit_code, 2);
  EXPECT_THAT(truncated.out, HasSubstr("model.safetensors"));

  const Result cuda = run_cli("run " + test::fixture_dir("w4a16_g128") + " --backend cuda");
  EXPECT_EQ(cuda.exit_code, 3);
  EXPECT_THAT(cuda.out, HasSubstr("not supported"));

  const Result layer = run_cli("run " + test::fixture_dir("w4a16_g128") + " --layer 3");
  EXPECT_EQ(layer.exit_code, 2);
  EXPECT_THAT(layer.out, HasSubstr("not an MoE layer"));

  const Result inputs = run_cli("run " + test::fixture_dir("w4a16_g128") + " --inputs " + test::fixture_dir("w4a16_g128") + "/config.json");
  EXPECT_EQ(inputs.exit_code, 2);
  EXPECT_THAT(inputs.out, HasSubstr("config.json"));

  const Result usage = run_cli("run");
  EXPECT_NE(usage.exit_code, 0);
}

// --cuda-plan: the planner's kernels per GEMM, from which batch the prefill kernels run, and their
// tiles (the layouts of one expert); without the flag inspect stays header-only.
TEST(Cli, InspectCudaPlan) {
  auto plan_of = [](const std::string& fixture) {
    const Result r = run_cli("inspect " + test::fixture_dir(fixture) + " --json --cuda-plan");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return nlohmann::json::parse(r.out).at("layers").at(0).at("cuda_plan");
  };
  const auto fp8 = plan_of("mixtral_fp8_dynamic");
  for (const char* gemm : {"w13", "w2"}) {
    EXPECT_EQ(fp8.at(gemm).at("decode").get<std::string>(), "tensor-core (activation codes)");
    EXPECT_EQ(fp8.at(gemm).at("prefill").get<std::string>(), "grouped wgmma (FP8)");
    EXPECT_EQ(fp8.at(gemm).at("prefill_from_tokens").get<int64_t>(), kGroupedMinTokensFp8);
    EXPECT_EQ(fp8.at(gemm).at("prefill_tiles").at(0).at("from_tokens").get<int64_t>(), kGroupedMinTokensFp8);
  }
  EXPECT_EQ(fp8.at("w13").at("prefill_tiles").back().at("tile").get<std::string>(), "coop 128x256 cluster 1x2");
  // GEMM2 writing the combine's terms: FP8's and bf16's CUTLASS kernels and the 4-bit register
  // kernel (gpt-oss's biases too) do; GEMM1 never.
  EXPECT_TRUE(fp8.at("w2").at("writes_combine_terms").get<bool>());
  EXPECT_FALSE(fp8.at("w13").at("writes_combine_terms").get<bool>());
  const auto dense = plan_of("unquantized");
  EXPECT_TRUE(dense.at("w2").at("writes_combine_terms").get<bool>());
  EXPECT_FALSE(dense.at("w13").at("writes_combine_terms").get<bool>());
  EXPECT_TRUE(plan_of("gptoss_mxfp4a16").at("w2").at("writes_combine_terms").get<bool>());
  // gpt-oss's MXFP4 (with biases): its own prefill kernel on a repacked copy; act-order groups: the
  // bf16 kernel on dequantized weights, and act order decodes on the generic kernel.
  const auto mxfp4 = plan_of("gptoss_mxfp4a16");
  EXPECT_EQ(mxfp4.at("w13").at("prefill").get<std::string>(), to_string(GroupedKernel::kMxfp4Bf16));
  EXPECT_GT(mxfp4.at("w13").at("prefill_from_tokens").get<int64_t>(), 1);
  EXPECT_FALSE(mxfp4.at("w13").at("prefill_tiles").empty());
  EXPECT_EQ(mxfp4.at("dequant_workspace_bytes").get<int64_t>(), 0);
  EXPECT_GT(mxfp4.at("repacked_weight_bytes").get<int64_t>(), 0);
  EXPECT_EQ(fp8.at("dequant_workspace_bytes").get<int64_t>(), 0);
  EXPECT_EQ(fp8.at("repacked_weight_bytes").get<int64_t>(), 0);
  const auto act_order = plan_of("w4a16_actorder_group");
  EXPECT_GT(act_order.at("dequant_workspace_bytes").get<int64_t>(), 0);
  EXPECT_EQ(act_order.at("w2").at("decode").get<std::string>(), "CUDA-core GEMV/generic");
  EXPECT_EQ(act_order.at("w2").at("prefill").get<std::string>(), to_string(GroupedKernel::kDequantBf16));
  // The experts' bytes on the device: an FP8 checkpoint's as stored; W4A8-FP8 holds its FP8
  // products (1 byte per weight, twice its int4) with one fp32 scale per row.
  const Result fj = run_cli("inspect " + test::fixture_dir("mixtral_fp8_dynamic") + " --json --cuda-plan");
  const auto fl = nlohmann::json::parse(fj.out).at("layers").at(0);
  EXPECT_EQ(fp8.at("weight_bytes").get<int64_t>(), fl.at("expert_weight_bytes").get<int64_t>());
  const Result wj = run_cli("inspect " + test::fixture_dir("w4a8_fp8") + " --json --cuda-plan");
  ASSERT_EQ(wj.exit_code, 0) << wj.out;
  const auto w4 = nlohmann::json::parse(wj.out);
  const int64_t E = w4.at("num_experts").get<int64_t>(), H = w4.at("hidden").get<int64_t>();
  const int64_t I = w4.at("inter").get<int64_t>();
  EXPECT_EQ(w4.at("layers").at(0).at("cuda_plan").at("weight_bytes").get<int64_t>(), E * (3 * H * I + 4 * (2 * I + H)));
  const Result text = run_cli("inspect " + test::fixture_dir("deepseek_fp8_block") + " --cuda-plan");
  EXPECT_THAT(text.out, HasSubstr("prefill kernel from 1 token\n"));
  EXPECT_THAT(text.out, HasSubstr("expert weights on the device"));
  // --tp-size: one partition's decisions (vLLM checks the per-partition size: W4A8-FP8 wants
  // multiples of 256) and parameter shapes, and its CUDA plan.
  const Result tp = run_cli("inspect " + test::fixture_dir("w4a8_fp8") + " --json --cuda-plan --tp-size 2");
  ASSERT_EQ(tp.exit_code, 0) << tp.out;
  const auto tpj = nlohmann::json::parse(tp.out);
  EXPECT_EQ(tpj.at("tp_size").get<int>(), 2);
  const int64_t inter = tpj.at("inter").get<int64_t>();
  ASSERT_EQ(inter, 256);
  EXPECT_THAT(tpj.at("layers").at(0).at("error").get<std::string>(),
              HasSubstr("intermediate_size_per_partition=128 must be divisible by 256"));
  const Result tp2 = run_cli("inspect " + test::fixture_dir("mixtral_fp8_dynamic") + " --json --cuda-plan --tp-size 2");
  ASSERT_EQ(tp2.exit_code, 0) << tp2.out;
  const auto l2 = nlohmann::json::parse(tp2.out).at("layers").at(0);
  const int64_t full = nlohmann::json::parse(tp2.out).at("inter").get<int64_t>();
  bool found = false;
  for (const auto& p : l2.at("vllm_params"))
    if (p.at("name") == "w2_weight") {  // [E, H, I] of one partition
      EXPECT_EQ(p.at("shape").back().get<int64_t>(), full / 2);
      found = true;
    }
  EXPECT_TRUE(found);
  EXPECT_TRUE(l2.at("cuda_plan").contains("w13"));
  const Result odd = run_cli("inspect " + test::fixture_dir("w4a16_g128") + " --tp-size 3");
  EXPECT_NE(odd.exit_code, 0);
  EXPECT_THAT(odd.out, HasSubstr("not divisible by --tp-size 3"));
  const Result plain = run_cli("inspect " + test::fixture_dir("mixtral_fp8_dynamic") + " --json");
  EXPECT_FALSE(nlohmann::json::parse(plain.out).at("layers").at(0).contains("cuda_plan"));
}

// --no-repacked-copy: the plan of a layer that keeps one copy of its weights (CudaMoeLayer's
// repacked_copy false), in JSON and text; without --cuda-plan it is an error.
TEST(Cli, InspectCudaPlanWithoutARepackedCopy) {
  const Result with_copy = run_cli("inspect " + test::fixture_dir("w4a16_g128") + " --json --cuda-plan");
  const Result one_copy = run_cli("inspect " + test::fixture_dir("w4a16_g128") + " --json --cuda-plan --no-repacked-copy");
  ASSERT_EQ(with_copy.exit_code, 0) << with_copy.out;
  ASSERT_EQ(one_copy.exit_code, 0) << one_copy.out;
  const auto a = nlohmann::json::parse(with_copy.out).at("layers").at(0).at("cuda_plan");
  const auto b = nlohmann::json::parse(one_copy.out).at("layers").at(0).at("cuda_plan");
  EXPECT_TRUE(a.at("repacked_copy").get<bool>());
  EXPECT_FALSE(b.at("repacked_copy").get<bool>());
  EXPECT_EQ(a.at("w13").at("prefill").get<std::string>(), to_string(GroupedKernel::kInt4RegsBf16));
  EXPECT_EQ(b.at("w13").at("prefill").get<std::string>(), to_string(GroupedKernel::kInt4Bf16));
  EXPECT_GT(a.at("repacked_weight_bytes").get<int64_t>(), 0);
  EXPECT_EQ(b.at("repacked_weight_bytes").get<int64_t>(), 0);
  EXPECT_EQ(a.at("weight_bytes"), b.at("weight_bytes"));
  // MXFP4 without a copy: the dequantized path and its workspace.
  const Result mx = run_cli("inspect " + test::fixture_dir("gptoss_mxfp4a16") + " --json --cuda-plan --no-repacked-copy");
  ASSERT_EQ(mx.exit_code, 0) << mx.out;
  const auto m = nlohmann::json::parse(mx.out).at("layers").at(0).at("cuda_plan");
  EXPECT_EQ(m.at("w13").at("prefill").get<std::string>(), to_string(GroupedKernel::kDequantBf16));
  EXPECT_GT(m.at("dequant_workspace_bytes").get<int64_t>(), 0);
  const Result text = run_cli("inspect " + test::fixture_dir("w4a16_g128") + " --cuda-plan --no-repacked-copy");
  EXPECT_THAT(text.out, HasSubstr("no repacked copy"));
  EXPECT_THAT(text.out, Not(HasSubstr("repacked 4-bit weights")));
  const Result alone = run_cli("inspect " + test::fixture_dir("w4a16_g128") + " --no-repacked-copy");
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_THAT(alone.out, HasSubstr("add --cuda-plan"));
}

TEST(Cli, RunWithoutARepackedCopyNeedsTheCudaBackend) {
  const Result r = run_cli("run " + test::fixture_dir("w4a16_g128") + " --tokens 3 --repeat 1 --no-repacked-copy");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--no-repacked-copy applies to --backend cuda only"));
  // The CPU backend's report names what the CUDA backend would run: with the copy allowed.
  const Result j = run_cli("run " + test::fixture_dir("w4a16_g128") + " --tokens 3 --repeat 1 --json");
  ASSERT_EQ(j.exit_code, 0) << j.out;
  EXPECT_TRUE(nlohmann::json::parse(j.out).at("repacked_copy").get<bool>());
}

// An f16 checkpoint (the w4a16_g128 fixture with its bf16 weight scales stored as f16): the plan is
// for f16 hidden states, with the f16 prefill kernels.
TEST(Cli, InspectCudaPlanOfAnF16Checkpoint) {
  test::TempDir dir("cli_f16");
  test::copy_fixture("w4a16_g128", dir);
  std::map<std::string, Tensor> tensors = read_safetensors(dir.file("model.safetensors"));
  int converted = 0;
  for (auto& [name, t] : tensors)
    if (t.dtype() == DType::kBF16 && name.find("experts") != std::string::npos && name.find("weight_scale") != std::string::npos) {
      t = bf16_to_f16(t);
      ++converted;
    }
  ASSERT_GT(converted, 0);
  std::vector<std::pair<std::string, const Tensor*>> list;
  for (const auto& [name, t] : tensors) list.emplace_back(name, &t);
  write_safetensors(dir.file("model.safetensors"), list);
  const Result r = run_cli("inspect " + dir.path() + " --json --cuda-plan");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto plan = nlohmann::json::parse(r.out).at("layers").at(0).at("cuda_plan");
  EXPECT_EQ(plan.at("hidden_dtype").get<std::string>(), "f16");
  EXPECT_EQ(plan.at("w13").at("prefill").get<std::string>(), to_string(GroupedKernel::kInt4F16));
  EXPECT_EQ(plan.at("w2").at("prefill").get<std::string>(), to_string(GroupedKernel::kInt4F16));
  const Result text = run_cli("inspect " + dir.path() + " --cuda-plan");
  EXPECT_THAT(text.out, HasSubstr("cuda plan  f16 hidden states"));
  const Result bf16 = run_cli("inspect " + test::fixture_dir("w4a16_g128") + " --json --cuda-plan");
  EXPECT_EQ(nlohmann::json::parse(bf16.out).at("layers").at(0).at("cuda_plan").at("hidden_dtype").get<std::string>(), "bf16");
}

// Inputs that had crashed, hung or printed NaN (a fuzzing pass, 2026-12-01): each now fails with a
// message naming its file, tensor or key.
TEST(Cli, MalformedCheckpointsFailClearly) {
  namespace fs = std::filesystem;
  // Rewrites one tensor of a fixture copy's model.safetensors.
  auto with_tensor = [](const std::string& fixture, const std::string& tag, const std::string& name,
                        const std::function<void(Tensor&)>& edit) {
    auto dir = std::make_unique<test::TempDir>("cli_malformed_" + tag);
    test::copy_fixture(fixture, *dir);
    std::map<std::string, Tensor> tensors = read_safetensors(dir->file("model.safetensors"));
    edit(tensors.at(name));
    std::vector<std::pair<std::string, const Tensor*>> list;
    for (const auto& [n, t] : tensors) list.emplace_back(n, &t);
    write_safetensors(dir->file("model.safetensors"), list);
    return dir;
  };
  const std::string experts = "model.layers.0.mlp.experts.0.";
  // FP8 weight codes 0x7F and 0xFF (E4M3FN's NaNs), bf16 Inf and NaN weights: rejected at load,
  // named with their file and index; the largest finite FP8 codes (+-448) load.
  struct Poison {
    const char* fixture;
    std::string tensor;
    int64_t index;
    uint16_t bits;  // the element's new bits (one byte for FP8)
    const char* shown;
  };
  const std::vector<Poison> poisons{{"fp8_dynamic", experts + "up_proj.weight", 5, 0x7F, "NaN"},
                                    {"fp8_dynamic", experts + "down_proj.weight", 4097, 0xFF, "NaN"},
                                    {"unquantized", experts + "down_proj.weight", 7, 0x7F80, "+Inf"},
                                    {"unquantized", experts + "gate_proj.weight", 9000, 0xFFC1, "NaN"}};
  std::vector<std::unique_ptr<test::TempDir>> poisoned;
  Result r;
  for (size_t i = 0; i < poisons.size(); ++i) {
    const Poison& p = poisons[i];
    poisoned.push_back(with_tensor(p.fixture, "poison" + std::to_string(i), p.tensor, [&](Tensor& t) {
      if (t.dtype() == DType::kF8E4M3) reinterpret_cast<uint8_t*>(t.raw())[p.index] = static_cast<uint8_t>(p.bits);
      else reinterpret_cast<uint16_t*>(t.raw())[p.index] = p.bits;
    }));
    r = run_cli("run " + poisoned.back()->path() + " --tokens 2 --repeat 1");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_THAT(r.out, HasSubstr("tensor '" + p.tensor + "' in " + poisoned.back()->file("model.safetensors") +
                                 " holds a non-finite weight (" + p.shown + ") at flat index " +
                                 std::to_string(p.index)));
  }
  const auto& fp8 = poisoned[0];
  const auto& dense = poisoned[2];
  const auto fp8_max = with_tensor("fp8_dynamic", "fp8_max", experts + "up_proj.weight", [](Tensor& t) {
    reinterpret_cast<uint8_t*>(t.raw())[5] = 0x7E;  // 448
    reinterpret_cast<uint8_t*>(t.raw())[6] = 0xFE;  // -448
  });
  r = run_cli("run " + fp8_max->path() + " --tokens 2 --repeat 1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  // ... and in inspect --cuda-plan, which loads expert 0: the report, then exit code 2.
  r = run_cli("inspect " + fp8->path() + " --cuda-plan");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("cuda plan  unavailable: tensor '" + experts + "up_proj.weight' in "));
  // inspect reads headers only, unless --verify loads the layers: then the same error, exit code 2.
  r = run_cli("inspect " + dense->path());
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = run_cli("inspect " + dense->path() + " --verify");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("verify     FAILED: tensor '" + experts + "down_proj.weight' in "));
  r = run_cli("inspect " + dense->path() + " --verify --json");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_FALSE(nlohmann::json::parse(r.out).at("layers").at(0).at("verify").at("ok").get<bool>());
  // Finite scales whose products overflow: the output is not finite, which fails the run even
  // without the reference check.
  const auto huge = with_tensor("w4a16_g128", "huge_scale", experts + "gate_proj.weight_scale", [](Tensor& t) {
    for (int64_t i = 0; i < t.numel(); ++i) reinterpret_cast<uint16_t*>(t.raw())[i] = 0x7F00;  // bf16 1.7e38
  });
  r = run_cli("run " + huge->path() + " --tokens 4 --repeat 1 --no-check");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("of 1024 values are not finite, the first at token "));
  // Sizes past any model's fail on the key before anything is sized by them.
  test::TempDir big("cli_malformed_experts");
  test::copy_fixture("w4a16_g128", big);
  {
    nlohmann::json config = nlohmann::json::parse(test::read_text(big.file("config.json")));
    for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts"})
      if (config.contains(key)) config[key] = 100000000;
    std::ofstream(big.file("config.json")) << config.dump();
  }
  r = run_cli("run " + big.path() + " --tokens 2 --repeat 1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("is 100000000, above the 65536 qmoe takes"));
  // Fewer experts in config.json than the checkpoint holds: inspect says so.
  test::TempDir fewer("cli_malformed_fewer");
  test::copy_fixture("w4a16_g128", fewer);
  {
    nlohmann::json config = nlohmann::json::parse(test::read_text(fewer.file("config.json")));
    ASSERT_EQ(config.at("num_experts").get<int>(), 4);
    config["num_experts"] = 3;
    std::ofstream(fewer.file("config.json")) << config.dump();
  }
  r = run_cli("inspect " + fewer.path());
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("tensors of experts up to 3 lie under model.layers.0.mlp.experts, past the config's 3 experts"));
  // A rejected layer fails --verify too, as it fails run (W4A8-INT8 on sm90, as vLLM).
  r = run_cli("inspect " + test::fixture_dir("w4a8_int_packed") + " --verify --json");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_FALSE(nlohmann::json::parse(r.out).at("layers").at(0).at("verify").at("ok").get<bool>());
  // A FIFO in config.json's place, a config.json past the size cap, dangling index and
  // model.safetensors links: an error, not a hang, a huge read or a silent fallback to the folder's
  // other safetensors files.
  test::TempDir fifo("cli_malformed_fifo");
  test::copy_fixture("w4a16_g128", fifo);
  fs::remove(fifo.file("config.json"));
  ASSERT_EQ(mkfifo(fifo.file("config.json").c_str(), 0600), 0);
  r = run_cli("inspect " + fifo.path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr(fifo.file("config.json") + " is not a regular file"));
  test::TempDir huge_json("cli_malformed_huge_json");
  test::copy_fixture("w4a16_g128", huge_json);
  fs::resize_file(huge_json.file("config.json"), kMaxJsonFileBytes + 1);  // (sparse)
  r = run_cli("inspect " + huge_json.path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr(huge_json.file("config.json") + " is " + std::to_string(kMaxJsonFileBytes + 1) + " bytes"));
  test::TempDir index_link("cli_malformed_index_link");
  test::copy_fixture("w4a16_g128", index_link);
  fs::create_symlink(index_link.file("missing.json"), index_link.file("model.safetensors.index.json"));
  r = run_cli("inspect " + index_link.path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("cannot open " + index_link.file("model.safetensors.index.json")));
  test::TempDir link("cli_malformed_link");
  test::copy_fixture("w4a16_g128", link);
  fs::remove(link.file("model.safetensors"));
  fs::create_symlink(link.file("missing.safetensors"), link.file("model.safetensors"));
  r = run_cli("inspect " + link.path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("cannot open " + link.file("model.safetensors")));
  // An inputs file whose expected output has another shape: named with its file.
  test::TempDir io("cli_malformed_io");
  {
    std::map<std::string, Tensor> in = read_safetensors(test::fixture_dir("w4a16_g128") + "/io.safetensors");
    Tensor& e = in.at("expected");
    Tensor half(e.dtype(), {e.dim(0) / 2, e.dim(1)});
    std::vector<std::pair<std::string, const Tensor*>> list;
    for (const auto& [n, t] : in) list.emplace_back(n, n == "expected" ? &half : &t);
    write_safetensors(io.file("io.safetensors"), list);
  }
  r = run_cli("run " + test::fixture_dir("w4a16_g128") + " --repeat 1 --inputs " + io.file("io.safetensors"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("tensor 'expected' in " + io.file("io.safetensors") + " has shape"));
  // Thread counts past the backend's limit.
  r = run_cli("run " + test::fixture_dir("w4a16_g128") + " --tokens 2 --repeat 1 --threads 2147483647");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("backend threads must be 0 (all cores) to 4096, got 2147483647"));
}

TEST(Cli, W4A8IntOnSm90ReportsVllmRejection) {
  const Result r = run_cli("inspect " + test::fixture_dir("w4a8_int_packed"));
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("REJECTED"));
  const Result cpu = run_cli("inspect " + test::fixture_dir("w4a8_int_packed") + " --target cpu");
  EXPECT_THAT(cpu.out, HasSubstr("CompressedTensorsW4A8Int8MoEMethod"));
}

}  // namespace
}  // namespace qmoe

namespace qmoe {
namespace {

// vLLM's parameter layouts, hand-derived from vllm-moe-system.md §3 for the fixture shapes
// (E 4, hidden 256, inter 128).
TEST(Cli, InspectListsVllmParameterLayouts) {
  auto params_of = [](const std::string& fixture) {
    const Result r = run_cli("inspect " + test::fixture_dir(fixture) + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    std::map<std::string, std::vector<int64_t>> m;
    const auto j = nlohmann::json::parse(r.out);
    for (const auto& p : j.at("layers").at(0).at("vllm_params"))
      m[p.at("name").get<std::string>()] = p.at("shape").get<std::vector<int64_t>>();
    return m;
  };
  auto marlin = params_of("w4a16_g128");
  EXPECT_EQ(marlin.at("w13_weight_packed"), (std::vector<int64_t>{4, 32, 256}));
  EXPECT_EQ(marlin.at("w2_weight_packed"), (std::vector<int64_t>{4, 16, 256}));
  EXPECT_EQ(marlin.at("w13_weight_scale"), (std::vector<int64_t>{4, 2, 256}));
  EXPECT_EQ(marlin.at("w2_weight_scale"), (std::vector<int64_t>{4, 1, 256}));
  auto block = params_of("deepseek_fp8_block");  // E 8, block 128x128
  EXPECT_EQ(block.at("w13_weight_scale"), (std::vector<int64_t>{8, 2, 2}));
  EXPECT_EQ(block.at("w2_weight_scale"), (std::vector<int64_t>{8, 2, 1}));
  auto nvfp4 = params_of("nvfp4");
  EXPECT_EQ(nvfp4.at("w13_weight_scale"), (std::vector<int64_t>{4, 256, 16}));
  EXPECT_EQ(nvfp4.at("w13_input_global_scale"), (std::vector<int64_t>{4, 2}));
  auto fp8_static = params_of("fp8_static");
  EXPECT_EQ(fp8_static.at("w13_weight_scale"), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(fp8_static.at("w2_input_scale"), (std::vector<int64_t>{4}));
}

}  // namespace
}  // namespace qmoe

namespace qmoe {
namespace {

TEST(Cli, BenchWithoutAGpuSaysNotSupported) {
  const Result r = run_cli("bench --models qwen3-30b-a3b --tokens 1");
  EXPECT_EQ(r.exit_code, 3) << r.out;  // no CUDA device here (CI) or no CUDA build
  EXPECT_THAT(r.out, HasSubstr("not supported"));
  EXPECT_NE(run_cli("bench --models qwen3-30b-a3b --rotations 0").exit_code, 0);
  // A well-formed pair of tiles (and the split timing) passes the checks and meets the same missing device.
  const Result pair =
      run_cli("bench --models qwen3-30b-a3b --tokens 1 --gemm-paths auto,prefill:3/1 --split-gemms --no-repacked-copy");
  EXPECT_EQ(pair.exit_code, 3) << pair.out;
  EXPECT_THAT(pair.out, Not(HasSubstr("prefill tiles are")));
}

}  // namespace
}  // namespace qmoe

namespace qmoe {
namespace {

TEST(Cli, OneRankIsNotComparedWithTheWholeLayer) {
  const std::string dir = test::fixture_dir("w4a16_g32");
  const Result r = run_cli("run " + dir + " --inputs " + dir + "/io.safetensors --tp-size 2 --tp-rank 1 --repeat 1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("skipped"));
  EXPECT_THAT(r.out, HasSubstr("vs reference"));
  const Result bad = run_cli("run " + dir + " --ep-rank 3");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.out, HasSubstr("--ep-rank"));
}

}  // namespace
}  // namespace qmoe
