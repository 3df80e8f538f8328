// qmoe: inspect compressed-tensors MoE checkpoints and run their MoE layers.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <exception>
#include <new>

#include "cli/common.h"
#include "qmoe/error.h"
#include "qmoe/moe.h"

int main(int argc, char** argv) {
  using namespace qmoe;
  CLI::App app{"qmoe: run the MoE layers of compressed-tensors quantized checkpoints"};
  app.require_subcommand(1);

  std::string target_name = "sm90";
  auto target_check = CLI::IsMember({"sm90", "sm100", "cpu"});

  std::string inspect_dir;
  bool inspect_json = false, inspect_cuda_plan = false, inspect_verify = false, inspect_repacked_copy = true;
  int inspect_tp_size = 1;
  auto* inspect = app.add_subcommand("inspect", "Per MoE layer: scheme, method, kernels, weight bytes (reads headers only, "
                                                  "unless --cuda-plan)");
  inspect->add_option("CKPT_DIR", inspect_dir, "checkpoint folder")->required();
  inspect->add_option("--target", target_name, "GPU whose dispatch decision is reported")->check(target_check);
  inspect->add_flag("--json", inspect_json, "machine-readable output");
  inspect->add_option("--tp-size", inspect_tp_size,
                      "tensor-parallel size: decisions and CUDA plans of one partition (rank 0)")
      ->check(CLI::PositiveNumber);
  inspect->add_flag("--cuda-plan", inspect_cuda_plan,
                    "also the CUDA kernels and prefill tiles by batch size (reads one expert's weights per distinct "
                    "layer scheme)");
  inspect->add_flag("--no-repacked-copy", [&](int64_t) { inspect_repacked_copy = false; },
                    "with --cuda-plan: the plan without a repacked copy of 4-bit weights (one copy of the weights, "
                    "slower prefill)");
  inspect->add_flag("--verify", inspect_verify,
                    "also load every MoE layer whole, one at a time (reads all expert weights), and report what "
                    "fails its checks");

  cli::RunArgs run_args;
  auto* run = app.add_subcommand("run", "Load one MoE layer, run it, check it against the reference, time it");
  run->add_option("CKPT_DIR", run_args.dir, "checkpoint folder")->required();
  run->add_option("--layer", run_args.layer, "layer index (default: the first MoE layer)");
  run->add_option("--tokens", run_args.tokens, "tokens of random input")->check(CLI::Range(1, 1 << 20));
  run->add_option("--seed", run_args.seed, "seed of the random inputs");
  run->add_option("--backend", run_args.backend, "cpu or cuda (needs a CUDA build and a GPU)")->check(CLI::IsMember({"cpu", "cuda"}));
  run->add_option("--target", target_name, "GPU whose dispatch decision is taken")->check(target_check);
  run->add_option("--inputs", run_args.inputs, "safetensors with hidden_states [T, hidden] and router_logits [T, experts]");
  run->add_option("--output", run_args.output, "write the output [T, hidden] (F32) to this safetensors file");
  run->add_option("--threads", run_args.threads, "CPU threads (0: all cores; at most " + std::to_string(kMaxCpuThreads) + ")");
  run->add_option("--repeat", run_args.repeat, "timed repetitions (the median is printed)")->check(CLI::Range(1, 1000));
  run->add_option("--tp-rank", run_args.tp_rank, "tensor-parallel rank");
  run->add_option("--tp-size", run_args.tp_size, "tensor-parallel size")->check(CLI::PositiveNumber);
  run->add_option("--ep-rank", run_args.ep_rank, "expert-parallel rank (linear placement)");
  run->add_option("--ep-size", run_args.ep_size, "expert-parallel size")->check(CLI::PositiveNumber);
  run->add_flag("--nvfp4-exact-w4a4", run_args.nvfp4_exact_w4a4,
                "quantize NVFP4 W4A4 activations (vLLM on Hopper runs W4A4 weight-only)");
  run->add_flag("--w4a8-int4", run_args.w4a8_fp8_int4,
                "W4A8-FP8: keep the int4 codes with exact products (half the weight memory; vLLM rounds "
                "each product to FP8)");
  run->add_flag("--fp32-intermediate", run_args.fp32_intermediate,
                "keep intermediates in fp32 (default: round them to the input dtype, as vLLM)");
  run->add_flag("--no-check", [&](int64_t) { run_args.check = false; }, "skip the reference check");
  run->add_flag("--no-repacked-copy", [&](int64_t) { run_args.repacked_copy = false; },
                "with --backend cuda: no repacked copy of 4-bit weights for the prefill kernel (one copy of the "
                "weights; those layers' prefill runs CUTLASS's mixed-input kernel or dequantized weights)");
  run->add_flag("--json", run_args.json, "machine-readable output");

  cli::BenchArgs bench_args;
  auto* bench = app.add_subcommand("bench", "Time synthetic model-shaped layers on the CUDA backend");
  bench->add_option("--models", bench_args.models, "comma list of shapes or 'all' (mixtral-8x7b, qwen3-30b-a3b, "
                                                    "deepseek-v3, deepseek-v3-tp8, kimi-k2-tp8, gpt-oss-120b)");
  bench->add_option("--schemes", bench_args.schemes, "comma list of synthetic schemes");
  bench->add_option("--tokens", bench_args.tokens, "comma list of token counts");
  bench->add_option("--rotations", bench_args.rotations, "input sets per graph (different experts per forward)")
      ->check(CLI::Range(1, 64));
  bench->add_option("--replays", bench_args.replays, "timed graph replays (median)")->check(CLI::Range(1, 10000));
  bench->add_option("--seed", bench_args.seed, "seed of weights and inputs");
  bench->add_option("--routing", bench_args.routing,
                    "synthetic routing: uniform (default), skewed (Zipf-like), mild (skewed at a quarter of the bias) "
                    "or balanced (every expert the same rows: the kernels' best case)");
  bench->add_flag("--skew", [&](int64_t) { bench_args.routing = "skewed"; }, "the same as --routing skewed");
  bench->add_flag("--split-gemms", bench_args.split_gemms,
                  "also time GEMM1 and GEMM2 apart (columns gemm1 us, gemm2 us; GEMM2 is what leaving it out saves)");
  bench->add_flag("--f16", bench_args.f16,
                  "f16 models: the schemes' bf16 scales and dense weights as f16, f16 hidden states (rows "
                  "labelled f16:<scheme>)");
  bench->add_option("--gemm-paths", bench_args.gemm_paths,
                    "comma list of GEMM kernel paths to time: auto (by token count), decode, prefill, prefill:<tile> (0 medium, 1 large, 2 small, 3 huge, 4 tiny, 5 tiny48, 6 wide: GroupedTile in src/config/grouped_tile.h says what each is per kernel), prefill:<tile1>/<tile2> (GEMM1's and GEMM2's)");
  bench->add_flag("--no-repacked-copy", [&](int64_t) { bench_args.repacked_copy = false; },
                  "load the layers without a repacked copy of 4-bit weights (one copy of the weights)");
  bench->add_option("--max-tokens", bench_args.max_tokens,
                    "load the layers for batches of up to this many tokens (at least the largest --tokens; default: "
                    "that), as an engine sized for its largest batch does: what the layer holds and plans depends on it")
      ->check(CLI::Range(1, 1 << 20));
  bench->add_option("--json", bench_args.json, "write all rows (with per-expert token counts) to this file");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    const Target target = *parse_target(target_name);
    if (*inspect)
      return cli::run_inspect(inspect_dir, target, inspect_json, inspect_cuda_plan, inspect_tp_size, inspect_verify,
                              inspect_repacked_copy);
    if (*bench) return cli::run_bench(bench_args);
    run_args.target = target;
    return cli::run_run(run_args);
  } catch (const NotSupported& e) {
    fmt::print(stderr, "qmoe: not supported: {}\n", e.what());
    return 3;
  } catch (const Error& e) {
    fmt::print(stderr, "qmoe: error: {}\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "qmoe: error: out of host memory\n");
    return 2;
  } catch (const std::exception& e) {  // (a bug: every input error is a qmoe::Error)
    fmt::print(stderr, "qmoe: internal error: {}\n", e.what());
    return 4;
  }
}
