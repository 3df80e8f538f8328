// Tuning constants of the tensor-core kernel's launch heuristic (plan_mma_launch). Kept out of
// gemm_plan.h, which every CUDA file includes, so that retuning them rebuilds only the planner.
#pragma once

namespace qmoe {

// Reduction split: as many warps per row tile as keep at least kMmaLongSlice steps each (a longer
// slice per warp keeps more loads in flight and amortizes its prologue and reduction: up to 1.3x
// faster than kMmaShortSlice at 8-128 tokens on the H200), unless the grid would then have fewer
// than kMmaMinWaves waves (a wave: the launched instance's blocks per SM, mma_blocks_per_sm, on
// every SM): short grids (1 token on DeepSeek-V3 and Qwen3-30B-A3B) ran up to 1.13x faster with the
// short slices' smaller, more numerous blocks. Short reductions (w2 of small experts) give rows to
// more warps instead.
inline constexpr int kMmaLongSlice = 8;
inline constexpr int kMmaShortSlice = 4;
inline constexpr int kMmaMinWaves = 3;
// Below this fraction of a wave the reduction is split further, down to single-step slices while
// that adds blocks: the 1-3-token grids of Qwen3-30B-A3B (its w2 at 1 token had 64 blocks of 256
// rows, one warp per row tile) and gpt-oss-120b's w2 at 1 token.
// Same-binary A/B on the H200 (2026-11-30, bench/runs/2026-11-30_session19/slice_rule_ab/, decode
// GEMM µs, old -> new): Qwen3-30B-A3B at 1 token W4A16 18.1 -> 13.5, MXFP4 19.8 -> 14.5, NVFP4 19.8
// -> 14.9, W4A8-FP8 27.5 -> 21.5, FP8 21.1 -> 19.1, INT8 21.4 -> 19.6; at 2-3 tokens 0.90-0.95x for
// the 4-bit formats; gpt-oss-120b MXFP4 32.1 -> 29.9; DeepSeek-V3 at TP8, Kimi-K2 at TP8 and the
// other rows within 2%, except Qwen3 W4A8-FP8 at 3 tokens, 4% slower (47.9 -> 49.9: its per-step-scaled
// kernel runs 2 blocks per SM, the rule counts 3). Splitting every grid under 3 waves this far was
// up to 1.19x slower (slice_lengths/).
// Both rules counted 3 blocks per SM for every instance until the twentieth session; counting each
// instance's own (2 for per-step scales and for 2-4 n-tiles, 4 for dense weights) changed 32
// (model, scheme, tokens, projection) plans of the bench shapes at 1-128 tokens. Same-binary A/B on
// the H200 (bench/runs/2026-11-30_session20/wave_ab/summary.txt, decode GEMM µs, 3 -> own, means of
// two rounds): DeepSeek-V3 W4A8-FP8 at 2 tokens 204.1 -> 177.2; DeepSeek-V3 and Kimi-K2 at TP8 bf16 at 6
// tokens 150.8 -> 133.8 and 149.7 -> 133.4; DeepSeek-V3 TP8 W4A8-FP8 at 16 / 24 tokens 198.3 ->
// 185.8 / 255.2 -> 231.9; Mixtral W4A8-FP8 at 1 token 109.8 -> 103.0; Qwen3-30B-A3B W4A8-FP8 at
// 3 / 12 / 16 tokens 50.1 -> 48.5 / 104.0 -> 95.8 / 119.6 -> 110.8, bf16 at 1 token 25.1 -> 24.3;
// the other 39 rows within 1.6%. (The W4A8-FP8 rows of these A/Bs ran int4 codes with per-step
// scales; since `8b5b0fb` W4A8-FP8 layers hold FP8 weights and run the FP8 channel instances, so the
// per-step-scaled instances serve FP8 blocks and W4A8 with INT8 activations.)
inline constexpr double kMmaMinGridWaves = 0.5;
// Slots per pass over an expert's weights (8, 16 or 32: one, two or four n-tiles): the first that
// holds the mean slots per expert plus kMmaSlotSigmas standard deviations of a uniform routing, plus
// one. An expert with more slots loops over its weights again, but more n-tiles cost registers and
// occupancy (2 blocks per SM instead of 3, spills at four). H200, 2026-11-30, GEMM µs with 3 / 1
// sigmas (bench/runs/2026-11-30_f943072_slots_per_pass.log): Mixtral FP8 channel 535 / 416 at 16
// tokens, 786 / 606 at 32, W4A16 315 / 272 and 423 / 364; Qwen3-30B-A3B FP8 261 / 203 at 64 tokens,
// 373 / 295 at 128, W4A16 195 / 176 at 128; DeepSeek-V3 FP8 4150 / 3152 at 128 tokens (decode
// path; the automatic one runs FP8 on its prefill kernel from 4 tokens); no row slower beyond the
// runs' spread. 0 sigmas gave the same plans as 1 on every measured row; -1 was up to 1.24x slower
// (Mixtral bf16 at 64 tokens) and 7% faster only for Mixtral FP8 at 32-64 tokens.
inline constexpr double kMmaSlotSigmas = 1.0;

// When a chained decode GEMM lets the next kernel launch (launch.cuh): right after its wait, or only
// after its passes (release_late), up to this many tokens. Same-binary A/B on the H200 (2026-11-30,
// bench/runs/2026-11-30_pdl_late_release.log, GEMM µs, early -> late release): at 1 token Mixtral
// MXFP4 101.6 -> 96.5, W4A16 83.9 -> 79.3, Qwen3-30B-A3B even; 8 tokens within 0.5%; 16 tokens
// 0.6-1.1% faster late; at 32-64 tokens Qwen3 W4A16 115 -> 119 and 137 -> 142, MXFP4 133 -> 136 at
// 32, while Mixtral MXFP4 gains 0.4-1.6% at 32-128 and DeepSeek-V3 is even. Why early release hurts
// the 1-token Mixtral grids is not pinned down.
inline constexpr int kReleaseLateMaxTokens = 16;

// The automatic path switches a projection to its prefill grouped GEMM (use_grouped_kernel) from
// these token counts, measured on the H200 against the decode kernels (bench/RESULTS.md table D,
// Qwen3-30B-A3B, Mixtral, DeepSeek-V3): below them the decode kernels were faster or within 2% on
// every shape; above, the prefill kernels. The rule still costs up to 9% (INT8, DeepSeek-V3 at 1
// token) and 4% (bf16, DeepSeek-V3 at 4-8 tokens, Qwen3 at 16).
// FP8 (tensor/channel), re-measured with the MMA's own accumulation (37cfa27, table D-FP8, GEMM us
// decode vs prefill): Mixtral 118.2 vs 130.7 at 1 token, 195.5 vs 190.2 at 2, 281.5 vs 269.8 at 4,
// 339.8 vs 310.8 at 6; DeepSeek-V3 119.2 vs 113.5 at 1, 209.5 vs 190.5 at 2, 380.6 vs 346.0 at 4;
// Qwen3-30B-A3B 22.7 vs 30.0 at 1, 34.9 vs 43.5 at 2, 61.8 vs 62.0 at 4, 77.1 vs 78.6 at 6, 93.7
// vs 92.7 at 8. So from 4 tokens: below, DeepSeek-V3 loses 5-10% (its prefill kernel wins from 1
// token) and Mixtral 1-3% at 2-3 tokens; from 4, Qwen3-30B-A3B loses up to 2% at 4-7 tokens.
inline constexpr int kGroupedMinTokensFp8 = 4;
inline constexpr int kGroupedMinTokensInt8 = 4;
inline constexpr int kGroupedMinTokensBf16 = 16;
// FP8 128 x 128 block: the blockwise prefill kernel (64 x 128 pingpong tiles) beat the decode kernel
// (whose per-step rescale costs it ~30%) at every batch measured, 1-64 tokens, on all three shapes
// (H200, 9576d04, table D-FP8-block of bench/RESULTS.md: GEMM 114.7 vs 159.3 us for DeepSeek-V3 at
// 1 token, 132.4 vs 153.1 for Mixtral; Qwen3-30B-A3B 31.0 vs 30.7, but its layer 58.2 vs 63.5 us
// with the prefill path's fused input rows): it runs from one token.
inline constexpr int kGroupedMinTokensFp8Block = 1;
// W4A16 (where it runs CUTLASS's kernel: no repacked copy, k not a multiple of 64), W8A16 and W4A8
// (the mixed-input kernel): by mean rows per expert (tokens * top_k /
// experts). The mixed-input kernel's time barely grows with the rows up to its tile's input rows (it
// converts every weight tile whatever its rows), the decode kernels' grows linearly. With the 128 x
// 32 tile (H200, 2026-11-30, GEMM us decode vs 128 x 32, same run, bench/runs/
// 2026-11-30_tiny_tile_sweep.log):
// - W4A16: Qwen3-30B-A3B 174 vs 240 at 8 rows, 256 vs 242 at 16 (crossing ~14.5); DeepSeek-V3 2780
//   vs 3472 at 8, 4288 vs 3496 at 16 (~11.7); Mixtral 364 vs 452 at 8, 559 vs 452 at 16 (~12).
// - W8A16: Qwen3-30B-A3B 222 vs 258 at 4 rows, 278 vs 252 at 8 (~6); DeepSeek-V3 3280 vs 3304 at 2,
//   3849 vs 3720 at 4 (~2.5); Mixtral 426 vs 439 at 2, 475 vs 463 at 4 (~3).
// - W4A8-FP8: Qwen3-30B-A3B 246 vs 253 at 8 rows, 470 vs 254 at 16 (~8.3); DeepSeek-V3 2992 vs 3445
//   at 4, 4039 vs 3511 at 8 (~6); Mixtral 387 vs 453 at 4, 528 vs 457 at 8 (~6.5).
// ("few": at most kInt4FewExperts experts in the layer, i.e. Mixtral's shape.) With only 128-row tiles the
// switches were 24 / 28 (W4A16), 16 / 22 (W8A16) and 12 / 14 (W4A8) rows. (The W4A8 sweep ran int4
// weights with FP8 activations, which only W4A8 with INT8 activations takes since `8b5b0fb`: the
// same kernel on int8 codes.) W4A16 few experts re-measured, thirty-first session (layer µs decode vs
// mixed-input, two calls, bench/runs/2026-12-01_session31/large_pp/ and mid/): Mixtral 460.6 vs
// 483.0 and 464.0 vs 480.4 at 12 rows, 583.6 vs 482.7 at 16 (~12.7): 13.
inline constexpr int kGroupedMinRowsPerExpertInt4 = 14;
inline constexpr int kGroupedMinRowsPerExpertInt4FewExperts = 13;
inline constexpr int kInt4FewExperts = 16;
inline constexpr int kGroupedMinRowsPerExpertInt8 = 6;
inline constexpr int kGroupedMinRowsPerExpertInt8FewExperts = 4;
inline constexpr int kGroupedMinRowsPerExpertW4A8 = 8;
inline constexpr int kGroupedMinRowsPerExpertW4A8FewExperts = 8;
// W4A8 with INT8 activations on the register kernel's int8 MMAs (kInt4Int8Regs), by mean rows per
// expert, GEMM us decode vs prefill (H200, 2026-12-01, bench/runs/2026-12-01_session27/crossover.txt,
// then switch.txt, each one run): Mixtral 376.6 vs 410.6 at 4 rows, 528.4 vs 385.4 at 8; 386.8 vs
// 403.1 at 5, 480.7 vs 387.9 at 6; Qwen3-30B-A3B 106.0 vs 111.6 at 1 row, 153.0 vs 149.0 at 2; 140.0
// vs 139.5 at 1.5; DeepSeek-V3 1202 vs 1150 at 0.5 rows (1202 vs 1231 in the second run), 1907 vs
// 1617 at 1; DeepSeek-V3 TP8 185 vs 204 at 0.5, 285.0 vs 283.6 at 1, 396 vs 360 at 2. With many
// experts by GEMM2's reduction, as the register kernel's other switches (kRegsMinInter*):
// DeepSeek-V3's (2048) from one row, Qwen3-30B-A3B's (768) and the TP8 shapes' (256) from two.
inline constexpr int kGroupedMinRowsPerExpertInt4Int8FewExperts = 6;
inline constexpr int kGroupedMinRowsPerExpertInt4Int8LongReduction = 1;
inline constexpr int kGroupedMinRowsPerExpertInt4Int8MediumReduction = 2;
inline constexpr int kGroupedMinRowsPerExpertInt4Int8ShortReduction = 2;
// The same with one scale per weight row (w4a8_int8_channel, vLLM's W4A8-INT8 layout with group -1):
// its decode kernel streams these layers faster, and the switches come later. GEMM us decode vs
// prefill (H200, 2026-12-01, bench/runs/2026-12-01_session28/crossover_r1.txt; r2 within 1%):
// Mixtral 400 vs 415 at 8 rows, 445 vs 419 at 10 (crossing ~9, interpolated); DeepSeek-V3 1894 vs
// 1977 at 4, 2049 vs 1971 at 5; Qwen3-30B-A3B 127 vs 148 at 4, 177 vs 148 at 6; DeepSeek-V3 TP8 327
// vs 359 at 4, 438 vs 368 at 6 (5 rows not measured on these two): with many experts 5 rows whatever
// the reduction. (Measured with bf16 scales; vLLM's fp32 ones add a scale word per thread quad and
// k-tile.)
inline constexpr int kGroupedMinRowsPerExpertInt4Int8RowScalesFewExperts = 9;
inline constexpr int kGroupedMinRowsPerExpertInt4Int8RowScales = 5;
// Weight-only layouts without a mixed-input kernel (kDequantBf16: groups of 32, zero points, act
// order, MXFP4, NVFP4 A16): dequantized to bf16 a batch of experts at a time, then the bf16 kernel,
// by mean rows per expert. Dequantizing costs a fixed pass over every expert's weights (their bf16
// copy written and read back), so the switch comes late. GEMM us decode vs prefill, same run, H200,
// 2026-11-30 (f8f3161, bench/runs/2026-11-30_f8f3161_dequant_flat/bench_*.log), crossings
// interpolated:
// - Mixtral MXFP4: 1766 vs 2179 at 256 tokens (64 rows), 2584 vs 2126 at 384 (96): ~79 rows;
// - Mixtral NVFP4 A16: 2039 vs 2317 at 64 rows, 2986 vs 2289 at 96: ~73;
// - gpt-oss-120b MXFP4: 4359 vs 4908 at 2048 (64 rows), 6333 vs 4915 at 3072 (96): ~73;
// - Kimi-K2 TP8 W4A16 g32: 3940 vs 3754 at 4096 (85 rows), 5788 vs 4383 at 6144 (128): ~79
//   (extrapolated below 85 rows);
// - Qwen3-30B-A3B W4A16 g32: 1207 vs 1009 at 1536 (96 rows); 831 at 64 rows for decode (another
//   run) with the prefill slope from 96 to 128 rows: ~74 (extrapolated).
// At 76 the slower kernel costs at most ~4% on either side (interpolated).
inline constexpr int kGroupedMinRowsPerExpertDequant = 76;
// kDequantF16 (f16 models' integer weight-only layouts dequantized to f16): later, as the decode
// kernels of f16 models are faster than the dequantized path for longer. GEMM us decode vs prefill,
// same run, H200, 2026-11-30 (bench/runs/2026-11-30_session18/f16/extra/sweep_*.log), crossings
// interpolated linearly in rows per expert:
// - W4A16 g128 (dequantized; since on kInt4F16, the layouts left are act order, groups of 32, zero
//   points): Mixtral 3282 vs 3671 at 128 rows, 6454 vs 3922 at 256: ~145; DeepSeek-V3 7225 vs
//   25525 at 32, 25246 vs 28232 at 128: ~147 (extrapolated); Qwen3-30B-A3B 805 vs 1437 at 64,
//   3117 vs 1805 at 256: ~126;
// - W8A16: Mixtral 2252 vs 3305 at 64 rows, 4276 vs 3701 at 128: ~105; Qwen3-30B-A3B 1018 vs 1452
//   at 64, 4148 vs 1825 at 256: ~94.
// One switch for both code widths: at 128 the slower kernel costs up to ~12% (W4A16 at 128-145
// rows, prefill) and ~15% (W8A16 at 105-127 rows, decode).
inline constexpr int kGroupedMinRowsPerExpertDequantF16 = 128;
// MXFP4 weight-only (kMxfp4Bf16, its codes dequantized in registers), rows per expert from which it
// beats the decode kernels (GEMM us, same run, 6fdd5c2): Mixtral-8x7B 700 vs 715 at 24 rows, 926 vs
// 677 at 32 (~25 interpolated); gpt-oss-120b 1392 vs 1482 at 16, 1793 vs 1500 at 24 (~18; in layer
// µs ~20, below). Few experts (at most kInt4FewExperts) take the first.
// Thirty-ninth session: with the 32-row tile (RegisterTileSwitches below) the register kernel
// beats the decode kernels from fewer rows. GEMM µs decode vs the 32-row tile at 8 and 16 rows per
// expert, same call (bench/runs/2026-12-02_session39/narrow/), crossings interpolated: Mixtral-8x7B
// 403 vs 529, 587 vs 522 (~13.3); DeepSeek-V3 3046 vs 4042, 4428 vs 4096 (~14.0); gpt-oss-120b 950
// vs 1191, 1395 vs 1186 (~12.3); Qwen3-30B-A3B 191 vs 247, 270 vs 249 (~13.5). Hence 14 for the
// few-expert, long and medium reductions (25, 17 and 19 before); the short one (the TP8 shapes) was
// not measured and keeps 17.
// Forty-first session: MXFP4's conversion tests a k-tile's scales once (fp4_gemm.cu,
// convert_mxfp4_tile), and its 32-row tile got ~18% faster. GEMM µs decode vs the 32-row tile at 8
// and 12 rows per expert, same call (bench/runs/2026-12-02_session41/ab/paths.txt), crossings
// interpolated: Mixtral-8x7B 402 vs 418, 483 vs 416 (~8.8); DeepSeek-V3 3042 vs 3171, 3708 vs 3214
// (~8.8); Qwen3-30B-A3B 189 vs 199, 240 vs 200 (~8.8); gpt-oss-120b 731 vs 935 at 4, 950 vs 934 at 8
// (~7.7). Hence 9 for the few-expert, long and medium reductions (14 before; at 8 rows gpt-oss-120b
// loses 1.7% on decode). Forty-second session, the short reduction (the TP8 shapes, 17 before),
// GEMM µs decode vs the 32-row tile, same call (bench/runs/2026-12-02_session42/short/): DeepSeek-V3
// TP8 444 vs 476 at 8 rows, 486 vs 476 at 10 (~9.5); Kimi-K2 TP8 663 vs 716 at 8, 719 vs 716 at 10
// (~10); at exactly 10 rows the automatic paths of both switches, same call (short_ab/), were even
// on DeepSeek-V3 TP8 (557.1 vs 556.6 layer µs) and decode 1% faster on Kimi-K2 TP8 (816.5 vs 826.3).
// Hence 11 (at 12-16 rows the 32-row tile took 0.73-0.90 of decode's GEMM µs).
// Forty-third session: the narrow tiles stage two k-tiles a stage (fp4_gemm.cu), MXFP4's 32-row tile
// ~5% faster. Layer µs decode vs the 32-row tile, same call, one round (bench/runs/2026-12-02_session43/
// paths/crossings.txt): Mixtral-8x7B 415.2 vs 410.8 at 7 rows, 418.6 vs 409.1 at 8; DeepSeek-V3
// 2958.7 vs 3065.6 at 7, 3104.0 vs 3076.0 at 8; gpt-oss-120b 908.4 vs 913.2 at 6, 945.1 vs 911.4 at 7,
// 985.6 vs 912.6 at 8; Qwen3-30B-A3B 202.6 vs 210.2 at 7, 213.9 vs 210.5 at 8; DeepSeek-V3 TP8 528.3
// vs 533.5 at 9, 553.5 vs 539.2 at 10. Hence 8 for the few-expert, long and medium reductions (at 7
// Mixtral-8x7B's tile was only 1% ahead and DeepSeek-V3's 3.5% behind) and 10 for the short one.
// Forty-fourth session: the narrow tiles stage four k-tiles a stage (fp4_gemm.cu; their layers
// 0.82-0.99x), and every 4-bit switch to the 32-row tile moved down. Layer µs decode vs the 32-row
// tile, two calls of one round each (bench/runs/2026-12-02_session44/paths/crossings.txt and
// low/crossings.txt): Mixtral-8x7B 383.7 vs 391.6 at 6 rows, 417.4 vs 389.5 at 7; DeepSeek-V3 at 6
// 2871.7 vs 2855.0 and 2881.0 vs 2887.3 (a tie), 2972.3 vs 2866.6 at 7; gpt-oss-120b 792.9 vs 864.7
// at 5, 910.3 vs 867.1 at 6; Qwen3-30B-A3B 195.3 vs 200.4 at 6, 203.7 vs 202.4 at 7; DeepSeek-V3 TP8
// 464.0 vs 474.3 at 6, 484.4 vs 476.7 at 7. Hence 7 (few experts), 6 (long), 7 (medium), 7 (short).
inline constexpr int kGroupedMinRowsPerExpertMxfp4FewExperts = 7;
inline constexpr int kGroupedMinRowsPerExpertMxfp4LongReduction = 6;
// The same kernel on NVFP4 weight-only (kNvfp4Bf16; its decode kernels are slower than MXFP4's) and
// on INT4 with bf16 scales (kInt4RegsBf16: then groups of 32, zero points), GEMM us decode vs prefill,
// same call each, 02bce2d and a24922d (the same kernels; bench/runs/2026-11-30_w4_regs/), crossings
// interpolated:
// - NVFP4: Mixtral-8x7B 648 vs 740 at 16 rows, 797 vs 699 at 24 (02bce2d, ~20; a24922d: 736 vs 719
//   at 20); gpt-oss-120b 1221 vs 1415 at 12, 1547 vs 1403 at 16 (02bce2d, ~14.3), a tie at 13 (1427
//   vs 1421) and 1463 vs 1417 at 14 (a24922d): from 13 (in layer µs from 15, below).
// - INT4: Mixtral g32 706 vs 732 at 24, 924 vs 699 at 32 (~24.8), asym g128 711 vs 755 at 24, 940 vs
//   719 at 32 (~25.3); Qwen3-30B-A3B g32 265 vs 322 at 16, 338 vs 319 at 24 (~22), asym g128 262 vs
//   329 at 16, 336 vs 327 at 24 (~23.0); DeepSeek-V3 TP8 g32 649 vs 861 at 16, 1111 vs 886 at 32
//   (~23.8); Kimi-K2 TP8 g32 1165 vs 1310 at 21.3, 1682 vs 1325 at 32 (~24.4).
// Thirty-ninth session, the 32-row tile: Mixtral-8x7B decode vs it 426 vs 496 at 8 rows, 664 vs 483
// at 16 (~10.2; GEMM µs, same call, bench/runs/2026-12-02_session39/narrow/), so 11 (20 before). The
// many-expert values (12-13) stay: at 8 and 16 rows the decode kernels and the 32-row tile cross at
// ~12-14 on DeepSeek-V3, gpt-oss-120b and Qwen3-30B-A3B, where the automatic path at 16 rows already
// ran the 128-row tile.
// Fortieth session, the narrow tiles without serialized wgmmas (fp4_gemm.cu): GEMM µs decode vs the
// 32-row tile, same call, two rounds (bench/runs/2026-12-02_session40/narrow_ab/), crossings
// interpolated: NVFP4 Mixtral-8x7B 385 vs 407 at 6 rows, 424 vs 402 at 8 (~7.0); DeepSeek-V3 2478
// vs 3147 at 4, 3220 vs 3087 at 8 (~7.3); Qwen3-30B-A3B 150 vs 201 at 4, 203 vs 198 at 8 (~7.6).
// INT4 (kInt4RegsBf16): g32 Mixtral-8x7B 386 vs 447 at 8, 469 vs 446 at 12 (~10.9); DeepSeek-V3
// 2934 vs 3366 at 8, 3609 vs 3390 at 12 (~10.7); Qwen3-30B-A3B 183 vs 210 at 8, 231 vs 211 at 12
// (~10.2); g128 (faster decode kernels) Mixtral-8x7B 363 vs 449 at 8, 444 vs 446 at 12 (~12.1).
// Hence NVFP4 7 (few experts), 8 (long and medium reductions); INT4 12 (one switch for g32 and
// g128: g32 gives up ~2-4% at 11-12 rows). The short reduction (the TP8 shapes; s40.sh `short`):
// NVFP4 DeepSeek-V3 TP8 474 vs 481 at 8 rows, 567 vs 480 at 12 (~8.3); INT4 g32 DeepSeek-V3 TP8 423
// vs 500 at 8, 511 vs 501 at 12 (~11.6), Kimi-K2 TP8 635 vs 755 at 8, 782 vs 757 at 12 (~11.4):
// NVFP4 9, INT4 12.
// Forty-second session, after NVFP4's and INT4's scale halves moved into the multiply's operand
// selectors (their 32-row tile 3-10% faster): layer µs decode vs the 32-row tile, same calls
// (bench/runs/2026-12-02_session42/paths/crossings.txt), crossings interpolated:
// - NVFP4: Mixtral-8x7B 405 vs 410 at 6 rows, 445 vs 406 at 8 (~6.2); DeepSeek-V3 2661 vs 3177 at 5,
//   at 6 a tie in two calls (3013 vs 3004, 3018 vs 3027), 3288 vs 3018 at 8; gpt-oss-120b 840 vs 912
//   at 5, 962 vs 898 at 6 (~5.5); Qwen3-30B-A3B 209 vs 214 at 6, 230 vs 216 at 8 (~6.5); DeepSeek-V3
//   TP8 512 vs 531 at 7, 537 vs 532 at 8 (~7.8). Hence 7 (few experts, unchanged), 6 (long), 7
//   (medium), 8 (short).
// - INT4 g32 / asymmetric g128 (kInt4RegsBf16 without the mixed-input kernel below it): Mixtral-8x7B
//   g32 414 vs 419 at 9, 444 vs 423 at 10 (~9.2), asym 411 vs 432 at 9, 435 vs 429 at 10 (~9.8);
//   DeepSeek-V3 g32 3172 vs 3237 at 9, 3350 vs 3233 at 10 (~9.4); gpt-oss-120b g32 923 vs 929 at 7,
//   970 vs 927 at 8 (~7.1); Qwen3-30B-A3B g32 208 vs 214 at 8, 220 vs 218 at 9 (~8.8), asym 224 vs 226
//   at 10, 263 vs 226 at 12 (~10.1); DeepSeek-V3 TP8 g32 535 vs 548 at 10, 564 vs 558 at 11 (~10.7).
//   Hence 10 (few experts), 9 (long: DeepSeek-V3 gives up 2% at 9 rows, gpt-oss-120b 4.6% at 8), 10
//   (medium). The short reduction keeps 12: there W4A16 g128, whose decode kernels are faster, takes
//   the same switch (the mixed-input kernel had no range there) and was not measured.
// Forty-third session, after the narrow tiles' two-deep stages (INT4's 32-row tile ~4% faster):
// layer µs decode vs the 32-row tile, same call, one round (bench/runs/2026-12-02_session43/paths/
// crossings.txt): Mixtral-8x7B g32 404.0 vs 404.5 at 8 rows, 417.0 vs 405.7 at 9, asym g128 410.3 vs
// 403.1 at 9; Qwen3-30B-A3B g32 207.5 vs 207.5 at 8, 219.3 vs 212.5 at 9, asym 217.0 vs 212.8 at 9;
// DeepSeek-V3 g32 3001.7 vs 3052.0 at 8, 3195.1 vs 3038.5 at 9; DeepSeek-V3 TP8 g32 534.7 vs 531.7
// at 10, 561.2 vs 536.2 at 11. Hence 9 for few experts and the medium reduction (10 before); the long
// reduction keeps 9 (gpt-oss-120b's tile led from 7, DeepSeek-V3's only from 9) and the short one 12
// (W4A16 g128, above).
// Forty-fourth session, the four-deep stages (NVFP4's narrow tiles 0.82-0.84x): layer µs decode vs
// the 32-row tile, one round (bench/runs/2026-12-02_session44/low/crossings.txt): Mixtral-8x7B 343.6
// vs 358.2 at 5 rows, 403.9 vs 345.1 at 6; DeepSeek-V3 2354.9 vs 2441.2 at 4, 2572.3 vs 2464.6 at 5;
// gpt-oss-120b 782.7 vs 739.2 at 4; Qwen3-30B-A3B 169.7 vs 182.0 at 4, 196.5 vs 182.7 at 5;
// DeepSeek-V3 TP8 431.5 vs 433.3 at 5 (a tie), 489.4 vs 439.2 at 6. Hence 6 (few experts), 5 (long:
// at 4 DeepSeek-V3's decode led by 3.5%, gpt-oss-120b's tile by 5.6%), 5 (medium), 6 (short).
inline constexpr int kGroupedMinRowsPerExpertNvfp4FewExperts = 6;
inline constexpr int kGroupedMinRowsPerExpertNvfp4LongReduction = 5;
// INT4 few experts, thirtieth session (the prefill kernel a little faster since; W4A16 g128 on the
// register kernel from then): Mixtral-8x7B layer µs decode vs prefill, same call
// (bench/runs/2026-12-01_session30/grid/switch.txt): g128 642.8 vs 670.9 at 20 rows, 682.1 vs 652.5
// at 22 (~21); g32 672.7 vs 674.8 at 20, 715.3 vs 662.7 at 22 (~20); with the switch at 21, g128
// 661.6 vs 677.7 at 21, 679.5 vs 660.5 at 22 (bench/runs/2026-12-01_session30/verify/switch.txt).
// Forty-fourth session, the four-deep stages: layer µs decode vs the 32-row tile, two calls of one
// round each (bench/runs/2026-12-02_session44/paths/ and low/crossings.txt): Mixtral-8x7B g32 366.6
// vs 371.5 at 6 rows, 401.1 vs 369.0 at 7, asymmetric g128 363.4 vs 381.7 at 6, 395.4 vs 381.0 at 7;
// DeepSeek-V3 g32 at 6 2721.2 vs 2710.2 and 2728.2 vs 2863.9, at 7 2840.9 vs 2814.2 and 2855.1 vs
// 2860.4, 3003.7 vs 2716.5 at 8, asym g128 2749.5 vs 2791.9 at 6, 2866.8 vs 2844.9 at 7; gpt-oss-120b
// g32 764.2 vs 808.0 at 5, 879.5 vs 815.5 at 6; Qwen3-30B-A3B g32 188.4 vs 193.0 at 6, 196.6 vs 192.4
// at 7, asym g128 195.4 vs 199.0 at 7, 208.7 vs 200.2 at 8; DeepSeek-V3 TP8 g32 464.0 vs 458.5 at 7,
// asym g128 468.6 vs 470.4 at 7 (a tie), 490.8 vs 477.7 at 8, W4A16 g128 (this switch's too) 451.4
// vs 461.0 at 7, 470.9 vs 464.0 at 8. Hence 7 (few experts), 7 (long), 8 (medium), 8 (short).
inline constexpr int kGroupedMinRowsPerExpertInt4RegsFewExperts = 7;
// With many experts the MXFP4 and NVFP4 switches move with GEMM2's reduction, the layer's
// intermediate size per partition: the register kernel runs k in 64-column tiles, so with a short k
// its pipeline's fill and drain weigh more (w2 of the TP8 shapes: 4 k-tiles), while the decode
// kernels' time per row does not change. Layer µs decode vs prefill, same call, H200, twentieth
// session (bench/runs/2026-11-30_session20/crossover_4bit/; the values above came from GEMM µs,
// which leave out the prefill path's fused activation), crossings interpolated:
// - MXFP4: gpt-oss-120b (intermediate 2880) 1458 vs 1614 at 16 rows, 1637 vs 1624 at 20 (~20);
//   Qwen3-30B-A3B (768) 351 vs 392 at 20, 395 vs 397 at 24 (~24); DeepSeek-V3 TP8 (256) 999 vs 1095
//   at 24, 1151 vs 1124 at 28 (~27); Kimi-K2 TP8 (256) 1513 vs 1635 at 24, 1749 vs 1680 at 28 (~26.5).
// - NVFP4: gpt-oss-120b 1516 vs 1552 at 14, 1626 vs 1562 at 16 (~15); Qwen3-30B-A3B 397 vs 399 at
//   20, 452 vs 406 at 24 (~20); DeepSeek-V3 TP8 1137 vs 1219 at 24, 1313 vs 1254 at 28 (~26); Kimi-K2
//   TP8 1708 vs 1827 at 24, 1979 vs 1872 at 28 (~26).
// The INT4 switch (above) showed no such trend then (Qwen3-30B-A3B ~22-23, the TP8 shapes ~24).
// Twenty-first session: the register kernel's epilogue got cheaper (fp4_gemm.cu: DivideRn on
// 128-row tiles, one pointer per column, no work past the tile's last row: GEMM µs 0.72-0.89x on
// the TP8 shapes at 512-2048 tokens, 0.83-0.98x on Qwen3-30B-A3B, 0.88-0.99x on gpt-oss-120b), so
// every many-expert switch moved down, INT4's too, which now follows the reduction as well. Layer µs
// decode vs prefill, same call (bench/runs/2026-11-30_session21/final/, x_*.txt), the first
// measured row count where prefill wins (rows per expert: gpt-oss-120b and the TP8 shapes
// tokens / 32, Qwen3-30B-A3B tokens / 16):
// - NVFP4: gpt-oss-120b 1277 vs 1354 at 12, 1515 vs 1359 at 14; Qwen3-30B-A3B 297 vs 314 at 12,
//   331 vs 316 at 14; DeepSeek-V3 TP8 825 vs 841 at 14, 881 vs 858 at 16.
// - MXFP4: gpt-oss-120b 1451 vs 1509 at 16, 1544 vs 1512 at 18; Qwen3-30B-A3B 347 vs 353 at 20,
//   366 vs 357 at 22; DeepSeek-V3 TP8 945 vs 948 at 22, 1000 vs 959 at 24.
// - INT4 g32: gpt-oss-120b 1375 vs 1441 at 14, 1473 vs 1449 at 16; Qwen3-30B-A3B 332 vs 335 at 18,
//   350 vs 339 at 20; DeepSeek-V3 TP8 883 vs 888 at 20, 943 vs 903 at 22.
// Twenty-third session: the register kernel's tiles are published ahead of its consumers
// (fp4_gemm.cu, TileInfo), which took the tile search and loads out of every tile's start; the
// prefill path got 6-14% faster in layer µs on the TP8 shapes at 512-4096 tokens (GEMM2's 4 k-tiles
// per tile), 1-6% on Qwen3-30B-A3B and gpt-oss-120b (but Qwen3-30B-A3B NVFP4 at 4096: 1.2% slower;
// bench/runs/2026-12-01_session23/tileinfo/), and the switches moved down again, the short
// reduction's most: the reduction no longer orders them. Layer µs decode vs prefill, same
// call (bench/runs/2026-12-01_session23/tileinfo/switches_t.txt), the rows around each crossing:
// - NVFP4: gpt-oss-120b 1226 vs 1326 at 11, 1471 vs 1341 at 13 (~12); Qwen3-30B-A3B 291 vs 301 at
//   12, 327 vs 299 at 14 (~12.6); DeepSeek-V3 TP8 618 vs 708 at 11, 772 vs 713 at 13 (~12.2).
// - MXFP4: gpt-oss-120b 1384 vs 1460 at 15, 1486 vs 1464 at 17 (~16.5); Qwen3-30B-A3B 323 vs 329 at
//   18, 360 vs 331 at 22 (~18.7); DeepSeek-V3 TP8 767 vs 770 at 17, 812 vs 776 at 19 (~17.1).
// - INT4 g32: gpt-oss-120b 1410 vs 1432 at 15, 1514 vs 1434 at 17 (~15.4); Qwen3-30B-A3B 291 vs 309
//   at 14, 324 vs 314 at 18 (~16.6); DeepSeek-V3 TP8 719 vs 737 at 15, 763 vs 745 at 17 (~16).
// (INT4's Long value stays at 16: between 15.4 and 16 rows the two paths are within ~2%, interpolated.)
// Kimi-K2 TP8 (384 experts) was not re-measured; it takes the TP8 values.
// The Long values hold from kRegsMinInterLongReduction, the Medium ones from
// kRegsMinInterMediumReduction, the Short ones below it.
// The tier edges lie between measured intermediates (2880 and 768; 768 and 256); an intermediate of
// exactly 2048 (DeepSeek-V3 at TP 1) was measured in the thirtieth session on INT4 only (layer µs,
// bench/runs/2026-12-01_session30/grid/switch.txt): g128 4437 vs 4570 at 16 rows, 4718 vs 4566 at
// 18 (~17); g32 4321 vs 4608 at 14, 4616 vs 4478 at 16 (~15): the Long value lies between. Qwen3-
// 30B-A3B (768) then: g128 282.0 vs 295.6 at 14, 297.4 vs 294.0 at 16 (~15.6); g32 ~14.5 (the
// Medium value 17 takes decode there, 1% slower at 16).
inline constexpr int kRegsMinInterLongReduction = 2048;
inline constexpr int kRegsMinInterMediumReduction = 512;
// (The forty-fourth session's values: above, with the few-expert ones.)
inline constexpr int kGroupedMinRowsPerExpertMxfp4MediumReduction = 7;
inline constexpr int kGroupedMinRowsPerExpertMxfp4ShortReduction = 7;
inline constexpr int kGroupedMinRowsPerExpertNvfp4MediumReduction = 5;
inline constexpr int kGroupedMinRowsPerExpertNvfp4ShortReduction = 6;
inline constexpr int kGroupedMinRowsPerExpertInt4RegsLongReduction = 7;
inline constexpr int kGroupedMinRowsPerExpertInt4RegsMediumReduction = 8;
inline constexpr int kGroupedMinRowsPerExpertInt4RegsShortReduction = 8;
// W4A16 with groups of >= 64 or channel scales has two prefill kernels. Until the forty-fourth
// session (below) CUTLASS's mixed-input kernel on the checkpoint's codes beat the decode kernels
// from kGroupedMinRowsPerExpertInt4(FewExperts) rows per expert, the register kernel on the
// repacked copy only from more rows, and it beat CUTLASS's kernel from later still (its
// 128-input-row tile against the mixed-input kernel's 32- and 48-row ones). Layer µs decode / register / CUTLASS, H200, thirty-first session, two calls
// (bench/runs/2026-12-01_session31/large_pp/mid_*.txt, then mid/r/mid_*.txt), rows per expert:
// - Mixtral-8x7B: 16 rows 577 / 662 / 487, 24 694 / 650 / 490, 32 921 / 611 / 574, 40 1192 / 575 /
//   644; then 36 rows 1139 / 609 / 572, 40 1199 / 579 / 641 (crossing ~37.6);
// - DeepSeek-V3 (reduction 2048): 16 rows 4412 / 4418 / 3599, 24 5638 / 4648 / 3801, 32 7468 / 4628
//   / 4365, 48 10550 / 4581 / 5485 (CUTLASS's 128 x 48 tile ends at 44 rows); then 32 rows 7576 /
//   4326 / 4396, 36 8581 / 4633 / 4495, 40 9420 / 4609 / 4836 (crossing ~36-38; the register rows
//   spread ~5% between calls);
// - Qwen3-30B-A3B (768): 14 rows 279 / 285 / 278, 16 296 / 283 / 282, 20 331 / 283 / 286 (~17, the
//   register kernel's own switch);
// - DeepSeek-V3 TP8 (256): the mixed-input kernel never wins: 14 rows 679 / 675 / 718, 16 726 / 678
//   / 727, 24 929 / 706 / 805, 48 1749 / 790 / 1087. So no range of its own there (0).
// Fortieth session: the register kernel's 64-row tile (now planned from 26 rows for INT4) beats the
// mixed-input kernel's 128 x 48 tile at 32-48 rows, GEMM µs W4A16 g128 Mixtral-8x7B 535 (the
// automatic path, mixed-input) vs 475 at 32 rows; at 16-24 rows the 32-row tile and the mixed-input
// kernel are within ~1% (451 vs 446, 453 vs 447; bench/runs/2026-12-02_session40/narrow_ab/). Hence
// 26, the narrow tiles' own switch, for few experts; the long reduction (DeepSeek-V3, W4A16 g128 not
// re-measured: g32's 32-row tile 3368 / 3490 µs at 16 / 24 rows against the mixed-input kernel's
// 3599 / 3801 in the thirty-first session) takes the same.
// Forty-fourth session, the narrow tiles' four-deep stages: the 32-row tile beats both other
// kernels wherever the register kernel's own switch lets it run. Layer µs W4A16 g128 automatic path
// (decode, then the mixed-input kernel from kGroupedMinRowsPerExpertInt4*) / decode / the 32-row
// tile, one call (bench/runs/2026-12-02_session44/g128/crossings.txt): Mixtral-8x7B 8 rows 383.3 /
// 383.1 / 370.1, 16 483.3 / 571.1 / 365.1, 24 489.4 / 686.0 / 367.7; DeepSeek-V3 8 2864.3 / 2860.3 /
// 2945.3, 10 3239.3 / 3210.9 / 2776.6, 16 3690.5 / 4269.8 / 2779.8, 24 3821.6 / 5525.7 / 3219.1;
// Qwen3-30B-A3B 8 199.7 / 199.4 / 192.2, 12 198.4 / 252.1 / 197.7. So the mixed-input kernel no
// longer has a range of its own (the switches above, kInt4RegsOverMixedMinRows*, are gone): W4A16
// g128 takes the register kernel from kGroupedMinRowsPerExpertInt4Regs* (DeepSeek-V3 at 7-8 rows
// gives up ~3% to decode there) and the mixed-input kernel runs only without the copy
// (repacked_copy_from_tokens, gemm_plan.h).
// The register kernel's tiles (kMxfp4Bf16, kNvfp4Bf16, kInt4RegsBf16; RegisterTileSwitches below):
// 128 input rows up to a mean of max_rows_for_128 rows per expert, then 256 (192 in a range,
// below). From 129 to 256 rows both tiles fill the same fraction and 256's is the faster tile
// (qmoe_fp4_gemm_bench on gpt-oss-120b's w13 at 6fdd5c2: 645-666 against 444-469 TFLOP/s at 256
// rows, 441-442 against 463-466 at 128). The switch lies below a mean of 128, though: the routing
// spreads the rows (random routing: a spread of ~sqrt(mean)), so as the mean nears 128 more experts
// take a second, nearly empty 128-row tile. Until the thirtieth session the switch was at 128 and
// lost 11-14% of GEMM µs there. GEMM µs 128- vs 256-row tiles (forced, prefill:2 / prefill:1), same
// call, H200, bench/runs/2026-12-01_session30/grid (tokens: DeepSeek-V3 32 per row per expert,
// Qwen3-30B-A3B 16):
// - INT4 asym g128: DeepSeek-V3 6685 vs 7137 at 116, 7314 vs 7046 at 120 (~118.6); Qwen3-30B-A3B
//   368.5 vs 383.1 at 116, 402.0 vs 388.2 at 120 (~118.2).
// - MXFP4: DeepSeek-V3 6742 vs 6816 at 120, 7100 vs 6883 at 124 (~121); Qwen3-30B-A3B 374.0 vs 377.9
//   at 116, 407.2 vs 388.6 at 120 (~116.7).
// - NVFP4: DeepSeek-V3 6103 vs 6574 at 120, 7234 vs 6785 at 124 (~122); Qwen3-30B-A3B 381.7 vs
//   385.9 at 120, 411.5 vs 393.6 at 124 (~120.8).
// At a mean of 128 (DeepSeek-V3 4096 tokens): 256-row tiles 0.86x (INT4), 0.92x (MXFP4), 0.91x (NVFP4).
// The 128-row tiles ran first at each count there; run last (bench/runs/2026-12-01_session30/order,
// DeepSeek-V3 W4A16 g128 and MXFP4) the 256-row tiles won at 116 (0.94x, 0.98x), tied at 120 and won
// at 124: on these ~7 ms layers the row measured first at a count runs up to ~6% faster (the H200's
// power cap), so each crossing above is uncertain by a few rows either way.
// So max_rows_for_128: INT4 118, MXFP4 119, NVFP4 121.
// Then 192 input rows (GroupedTile::kWide) in the range `wide`, which starts right after the
// 128-row tiles for INT4 and NVFP4 and at 126 rows for MXFP4 (256 between), where the routing's
// spread leaves most experts within one 192-row tile. GEMM µs 192 / the plan's tile (128 up to the
// switch above, then 256), two rounds in both orders, H200, thirty-third session
// (bench/runs/2026-12-01_session33/reg192, bounds, check; the 192-row instances no longer spill
// since `f80ee9d`), DeepSeek-V3 / Mixtral-8x7B / Qwen3-30B-A3B:
// - INT4 (W4A16 g128): 112 rows 1.03 / 0.99 / 1.01, 120 0.98 / 0.92 / 0.97, 128-160 0.92-0.97,
//   164 0.89 / 0.95 / 0.96, 168 1.00 / 1.01 / 1.02, 176 1.01 / 1.01 / 1.04.
// - NVFP4: 112 1.08 / 1.02 / 1.03, 120 0.97 / 1.00 / 0.97, 124-164 0.89-0.99, 168 0.97 / 0.99 /
//   1.01, 176 1.03 / 1.01 / 1.02.
// - MXFP4: 120 1.07 / 1.00 / 1.02 (256 rows win there), 124 1.03 / 0.94 / 0.99, 128 0.96 / 0.91 /
//   0.96, 144-172 0.84-0.97, 176 0.93 / 0.96 / 0.97; against 256 alone (check/mx): 176 0.89 / 0.99
//   / 0.97, 184 1.02 / 1.16 / 1.04, 192 1.18 / 1.25 / 1.16.
// So `wide` ends at 168 rows (INT4, NVFP4) and 180 (MXFP4).
// Then 320 input rows (GroupedTile::kHuge: wgmma n 256 + 64) in the ranges `huge`, first from 244
// up to 312 rows for every 4-bit format: with uniform routing (mean +- sqrt(mean) rows per expert)
// about half the experts at a mean of 256 rows take a second 256-row tile, which converts the whole
// weight tile again for a few rows; 320 rows hold them in one. GEMM µs 320 / the plan (256 there),
// two rounds in both orders, H200, thirty-fourth session (bench/runs/2026-12-01_session34/huge),
// DeepSeek-V3 / Qwen3-30B-A3B:
// - 224 rows: INT4 1.04 / 1.04, MXFP4 1.04 / 1.05, NVFP4 1.05 / 1.07.
// - 240 rows: INT4 0.97 / 0.98, MXFP4 0.96 / 0.98, NVFP4 0.98 / 1.02.
// - 256-304 rows: INT4 0.73-0.85 / 0.79-0.91, MXFP4 0.70-0.83 / 0.75-0.85, NVFP4 0.76-0.87 /
//   0.84-0.99.
// - 384 rows (Qwen3-30B-A3B): 1.08 / 1.06 / 1.15 (two tiles either way; 320's fewer stages cost);
//   512: 0.96 / 0.95 / 1.00; Mixtral-8x7B at 2048 rows 0.98 / 0.99 / 1.01 (not planned there).
// And again from 504 up to 624 rows (NVFP4 its own, narrower range, 528-592): there many experts
// take a third 256-row tile, where two of 320 rows hold them. GEMM µs 320 / the plan (256 there),
// two rounds in both orders, H200, thirty-fifth session (bench/runs/2026-12-01_session35/wide),
// Qwen3-30B-A3B / DeepSeek-V3 (W4A16 and MXFP4 only):
// - 448 rows: INT4 1.07 / 1.09, MXFP4 1.06 / 1.05, NVFP4 1.14 / -.
// - 480 rows: INT4 1.05, MXFP4 1.04, NVFP4 1.11.
// - 512 rows: INT4 0.96 / 0.93, MXFP4 0.95 / 0.95, NVFP4 1.01.
// - 544-576 rows: INT4 0.91-0.92 / 0.86, MXFP4 0.88-0.89 / 0.84-0.86, NVFP4 0.96-0.99.
// - 608 rows: INT4 0.94, MXFP4 0.92, NVFP4 1.01; 640: 1.03 / 1.00 / 1.11; 704: 1.08 / 1.07 / 1.15.
// Mixtral-8x7B (check/, 256-row tiles forced against this plan with the range from 496): 496 rows
// INT4 1.06, MXFP4 1.05 (hence from 504); 512-608 INT4 0.85-0.93, MXFP4 0.85-0.92; NVFP4 544-576
// 0.90.
// And a third time from 768 up to 920 rows for INT4 and MXFP4 (three 320-row tiles where 256-row
// ones take four). GEMM µs 320 / the plan (256 there), two rounds in both orders, H200,
// thirty-sixth session (bench/runs/2026-12-02_session36/third), Qwen3-30B-A3B / Mixtral-8x7B:
// - 704-736 rows: INT4 1.07-1.09 / 1.09-1.12, MXFP4 1.06-1.08 / 1.11-1.14, NVFP4 1.14-1.16.
// - 768 rows: INT4 1.00 / 0.92, MXFP4 0.99 / 0.91, NVFP4 1.06 / 1.01.
// - 832-896 rows: INT4 0.95-0.96 / 0.90-0.91, MXFP4 0.93 / 0.90-0.92, NVFP4 1.02-1.03 / 0.91-0.97.
// - 960 rows: INT4 1.06 / 1.06, MXFP4 1.04 / 1.04, NVFP4 1.13 / 1.08.
// The INT4 and MXFP4 ratios cross 1 at ~921-933 rows (interpolated from 896 to 960), so the range
// ends at 920. NVFP4 (gaining less here too, as in the second range) gains on Mixtral and loses on
// Qwen3-30B-A3B: no third range.
//
// Below them, since the thirty-ninth session, narrow tiles of 32 and 64 input rows (GroupedTile::kTiny,
// kTiny48), whose rings hold 14 and 11 k-tiles of weights where the 128-row tile holds 6, and whose
// TMA copies of input rows are a quarter and a half of the 128-row tile's (an expert of 16 rows
// loaded 128). GEMM µs of the automatic path (then the decode kernels or a 128-row tile) / 32 / 64 /
// 128 rows forced, same call, H200, layers loaded for 8192 tokens
// (bench/runs/2026-12-02_session39/narrow/), at 8 / 16 / 32 / 48 / 64 rows per expert:
// - MXFP4 Mixtral-8x7B: 8 rows 403 / 529 / 571 / 780, 16 587 / 522 / 567 / 701, 32 646 / 707 / 571
//   / 649, 48 606 / 1036 / 576 / 603, 64 642 / 1254 / 830 / 641; DeepSeek-V3 16 4428 / 4096 / 4433
//   / 4681, 32 4593 / 5810 / 4437 / 4799, 48 4638 / 8101 / 4502 / 4673; gpt-oss-120b 16 1395 / 1186
//   / 1276 / 1336, 32 1335 / 1707 / 1282 / 1328, 48 1352 / 2323 / 1303 / 1346; Qwen3-30B-A3B 16
//   270 / 249 / 266 / 279, 32 285 / 350 / 273 / 286, 48 288 / 478 / 272 / 286.
// - NVFP4 Mixtral-8x7B: 8 rows 426 / 496 / 570 / 825, 16 664 / 483 / 556 / 699, 32 594 / 653 / 560
//   / 593, 48 564 / 953 / 566 / 551; DeepSeek-V3 16 4003 / 3841 / 4373 / 4428, 32 4009 / 5331 /
//   4280 / 4388; gpt-oss-120b 16 1210 / 1101 / 1258 / 1207, 32 1191 / 1581 / 1269 / 1190;
//   Qwen3-30B-A3B 16 259 / 240 / 268 / 261, 32 263 / 332 / 277 / 262.
// - INT4 (W4A16 g128, whose automatic path ran CUTLASS's mixed-input kernel there then): 16 rows
//   Mixtral 570 / 624 / 706 (32 / 64 / 128), DeepSeek-V3 4316 / 4744 / 4529, Qwen3-30B-A3B 266 /
//   287 / 260.
// So 32 rows up to a mean of 26 for every format (an expert past 32 rows takes a second tile: with
// ~sqrt(mean) of spread, about a fifth of them at a mean of 28), then 64 rows up to 56 for MXFP4
// (NVFP4 and INT4 ran their 128-row tiles as well or better from 32 rows then: their narrow
// instances' wgmmas were serialized, ptxas C7513).
// Fortieth session: without the serialized wgmmas (fp4_gemm.cu's narrow k-loop) NVFP4's and INT4's
// narrow tiles run 0.75-0.85 of their earlier time, and their 64-row tile wins at 32-48 rows too.
// GEMM µs 32 / 64 / 128 rows forced, same call, two rounds (bench/runs/2026-12-02_session40/
// narrow_ab/), at 24 / 32 / 48 / 64 rows per expert:
// - NVFP4 Mixtral-8x7B: 24 rows 397 / 439 / 606, 32 532 / 440 / 565, 48 778 / 448 / 524, 64 945 /
//   643 / 570; DeepSeek-V3 32 4365 / 3631 / 4185, 48 6123 / 3858 / 3998; Qwen3-30B-A3B 32 277 / 227
//   / 246, 48 378 / 230 / 248, 64 447 / 308 / 273.
// - INT4 g32 Mixtral-8x7B: 32 rows 598 / 477 / 597, 48 870 / 479 / 554, 64 1056 / 691 / 602;
//   DeepSeek-V3 32 4796 / 3850 / 4437, 48 6673 / 4040 / 4449; Qwen3-30B-A3B 32 293 / 231 / 253, 48
//   399 / 229 / 253, 64 479 / 317 / 281.
// Hence 64 rows up to 56 for every format (MXFP4's measured crossing), 32 below 26 as before.
// Forty-third session, the narrow tiles' two-deep stages: layer µs 32 / 64 / 128 rows forced, same
// call, one round (bench/runs/2026-12-02_session43/tiles/fastest.txt), at a mean of 26 rows per
// expert, where 26 took the 64-row tile: Mixtral-8x7B MXFP4 407.5 / 459.6 / 613.1, NVFP4 397.2 /
// 434.0 / 586.2, INT4 g32 405.1 / 439.8 / 601.1; DeepSeek-V3 MXFP4 3569.1 / 3588.1 / 4211.0, NVFP4
// 3552.5 / 3872.7 / 4086.4, INT4 g32 3556.8 / 3872.3 / 4335.4; at 28 the 64-row tile led but for
// DeepSeek-V3's INT4 g32. Hence MXFP4 and NVFP4 32 rows below 27. INT4 keeps 26, where W4A16 g128
// leaves CUTLASS's mixed-input kernel for the register kernel's 64-row tile
// (then a switch of its own; g128's 32-row tile there was not measured). At 56 rows the
// 128-row tile led on Mixtral-8x7B (563.2 vs 585.5 MXFP4) and the 64-row one on DeepSeek-V3 (4442.1
// vs 4558.1 MXFP4, 4162.1 vs 4532.6 NVFP4): 56 stays.
// Forty-fourth session, the four-deep stages on the 32- and 64-row tiles: layer µs 32 / 64 / 128,
// one round (bench/runs/2026-12-02_session44/tiles/fastest.txt): at 26 rows per expert INT4 g32
// Mixtral-8x7B 362.5 / 414.9 / 594.0, DeepSeek-V3 3245.3 / 3303.0 / 4202.5, so INT4 takes 27 too
// (W4A16 g128 takes the same tiles); at 28 the
// 64-row tile led every row. At 56 rows the 64-row tile led (64 / 128): Mixtral-8x7B NVFP4 488.1 /
// 515.7, INT4 g32 528.4 / 538.4, DeepSeek-V3 MXFP4 4096.7 / 4269.4, NVFP4 3719.6 / 3979.8, g32
// 3955.2 / 4321.9 (Mixtral-8x7B MXFP4 553.7 / 549.8, a tie); at 60 the 128-row one (Mixtral-8x7B
// all three, DeepSeek-V3 MXFP4 4655.0 / 4552.1, NVFP4 4409.8 / 4255.0) but DeepSeek-V3 g32 (4550.9 /
// 4695.0). Interpolated crossings ~56-59: 58.
// Mean rows per expert from `from` up to `until` (excluded); {} (empty): none.
struct RowRange {
  int from = 0, until = 0;
};
// The register kernel's tiles of one 4-bit format by mean rows per expert: 32 input rows below
// until_32, 64 below until_64 (none where it is not above until_32), 128 up to max_rows_for_128
// (included), 256 below wide.from, 192 in `wide`, then 256 but 320 in each `huge`.
struct RegisterTileSwitches {
  int max_rows_for_128;
  RowRange wide;
  RowRange huge[3];
  int until_32, until_64;
};
inline constexpr RegisterTileSwitches kInt4RegsTiles{118, {0, 168}, {{244, 312}, {504, 624}, {768, 920}}, 27, 58};
inline constexpr RegisterTileSwitches kMxfp4Tiles{119, {126, 180}, {{244, 312}, {504, 624}, {768, 920}}, 27, 58};
inline constexpr RegisterTileSwitches kNvfp4Tiles{121, {0, 168}, {{244, 312}, {528, 592}, {}}, 27, 58};
// Tiles of the mixed-input kernels by mean rows per expert: 128 x 32 below kInt4MinRowsForTiny48,
// 128 x 48 below kInt4MinRowsForSmall, then 128 x 128 below 128 rows (DeepSeek-V3 at 64 rows: 4880
// us against 5945 and 8639 for the larger ones, 93addc3), 128 x 192 in clusters of 2 up to 256, then
// 128 x 256 (Mixtral at 1024 and 2048 rows: 659 and 679 TFLOP/s against 620 and 643 for 128 x 192
// and 519 for 128 x 128). An expert above the tile's rows takes a second tile, which converts its
// weights again: at a mean of 32 rows half the experts did with 128 x 32. Sweep 128 x 32 / 128 x 48
// / 128 x 128, GEMM us, H200, 2026-11-30 (bench/runs/2026-11-30_tiny48_sweep.log), W4A16:
//   rows    Mixtral              DeepSeek-V3            Qwen3-30B-A3B
//   26      482 / 538 / 762      -                      -
//   28      559 / 533 / 742      4123 / 4162 / 5118     284 / 281 / 328
//   30      574 / 533 / 741      4570 / 4176 / 5119     312 / 281 / 329
//   40      852 / 597 / 714      6556 / 4674 / 5062     435 / 304 / 331
//   44      862 / 675 / 704      6892 / 5164 / 5153     449 / 347 / 330
//   48      871 / 754 / 697      7004 / 6128 / 5264     465 / 405 / 334
// (W4A8-FP8 and W8A16 within a few % of the same switch points.)
inline constexpr int kInt4MinRowsForTiny48 = 28;
inline constexpr int kInt4MinRowsForSmall = 44;
inline constexpr int kInt4MinRowsForMedium = 128;
inline constexpr int kInt4MinRowsForLarge = 256;
// Prefill tiles of the FP8, INT8 and bf16 kernels by mean rows per expert: 64 x 128 pingpong below
// kGroupedMinRowsFor128 (up to 1.15x faster than 128-row tiles at 16-1024 tokens on Qwen3-30B-A3B
// and DeepSeek-V3), then cooperative 128 x 256 in clusters of 2, except bf16 GEMMs with a reduction
// below kBf16MinReductionFor256 (in the bench shapes GEMM2 of the TP8 ones, k = inter = 256), which
// take 128 x 192 in clusters of 2. 512 lies between the measured k = 256 (128 x 192 faster) and
// k = 768 (Qwen3-30B-A3B's GEMM2: 128 x 256 faster); 384-512 (TP4-like shapes) is not measured.
// Since the thirty-first session 128 x 192 is a pingpong tile (each consumer warpgroup a whole tile,
// its epilogue under the other's mainloop: with k = 256 a tile is 4 k-steps, so the epilogue weighs
// as much as the MMAs). GEMM2 µs cooperative -> pingpong, same binary and then main against the
// change, two alternated rounds each (bench/runs/2026-12-01_session31/pp/, large_pp/): Kimi-K2 TP8
// 431-439 -> 428-437 at 2048, 573-576 -> 522-531 at 4096, 1013-1039 -> 907-929 at 8192, 1501-1641
// -> 1363-1451 at 16384; DeepSeek-V3 TP8 362-365 -> 337-342, 500-520 -> 461-469, 823-846 ->
// 729-744, 1455-1523 -> 1319-1375. A pingpong 128 x 128 gained about half as much. As GEMM2 of the
// other shapes (prefill:3/1, one round): FP8 and INT8 on the TP8 shapes 10-21% slower, Mixtral INT8
// at 8192 50% slower, bf16 Mixtral 6-13% slower, the rest within a few % either way: not planned.
// Each GEMM's tile apart (qmoe bench prefill:<tile1>/<tile2>; H200, 2026-12-01, bench/runs/
// 2026-12-01_session26/tiles_*.txt, GEMM us at 2048 / 4096 / 8192 tokens):
// - bf16, old plan (128 x 128 from 64 rows, 128 x 192 from 256) against 128 x 256 for GEMM1 and
//   128 x 192 for GEMM2: DeepSeek-V3 TP8 949 / 1369 / 2255 against 917 / 1203 / 1905, Kimi-K2 TP8
//   1472 / 2713 against 1422 / 2271 at 4096 / 8192 (k 256: 128 x 256 for both 1249 / 1943 and 1499 /
//   2380); 128 x 256 for both: Qwen3-30B-A3B 466 / 708 / 1169 against 455 / 664 / 1114 (128 x 192 for
//   GEMM2 463 / 687 / 1165), DeepSeek-V3 6135 / 9317 / 12193 against 6087 / 7861 / 11922; Mixtral
//   (its rows all above 256) 128 x 192 against 128 x 256 forced in the same run 2551 / 4739 / 9193
//   against 2363 / 4671 / 8930 (its automatic rows, first of each batch, ran up to 12% faster than the
//   same tile forced later: the power cap).
// - INT8 (128 x 128 from 64 rows, 128 x 256 from 256) against 128 x 256 from 64: DeepSeek-V3 4319
//   against 3890 at 4096, DeepSeek-V3 TP8 966 against 829 at 4096, Kimi-K2 TP8 1069 / 1881 against
//   961 / 1564 at 4096 / 8192; 128 x 128 for either GEMM was slower than 128 x 256 for both on every
//   shape.
// - FP8 (128 x 256 from 64 rows since 2026-11-30): no pair of tiles beat 128 x 256 for both beyond
//   1% (the one-GEMM 128 x 128 / 128 x 192 pairs were 1-13% slower).
// Earlier (2026-11-30), 128 x 256 against 128 x 192 for both GEMMs: bf16 DeepSeek-V3 -1..-4% at 8192 /
// 16384 tokens, Mixtral within the spread.
inline constexpr int kGroupedMinRowsFor128 = 64;
inline constexpr int kBf16MinReductionFor256 = 512;
// The FP8, INT8 and bf16 kernels' swapped 128 x 192 tile (GroupedTile::kWide: 192 input rows) from
// kWideMinRowsPerExpert up to kWideMaxRowsPerExpert (excluded) mean rows per expert, for both GEMMs
// and any reduction. Uniform routing spreads an expert's rows by about their square root, so at a
// mean of 144-176 most experts fit one 192-row tile but take two 128-row ones, the second mostly
// padding; at 192 about half take a second 192-row tile. H200, thirty-second session (bench/runs/
// 2026-12-01_session32/wide/, two rounds, the plan's tiles against the wide one, GEMM time wide /
// plan): at 144-149 rows 0.79-0.91 (DeepSeek-V3 FP8 0.84, INT8 0.87, bf16 0.82; its TP8 bf16 0.91;
// Kimi-K2 TP8 bf16 0.89), at 160 0.79-0.90, at 171-176 0.86-0.97 (Kimi-K2 TP8 bf16 at 8192 tokens
// 0.915, Qwen3-30B-A3B 0.92-0.94, DeepSeek-V3 TP8 0.965), at 192 1.04-1.20; at 128 0.97-1.05
// (Kimi-K2 TP8 bf16 1.05; one round in swap/: DeepSeek-V3 bf16 0.97, FP8 1.02, its TP8 bf16 1.05,
// Qwen3-30B-A3B 1.01-1.04). The bounds lie between.
inline constexpr int kWideMinRowsPerExpert = 132;
inline constexpr int kWideMaxRowsPerExpert = 180;
// FP8 block: 64 x 128 pingpong tiles below this many rows per expert, then 128 x 128 cooperative
// (H200, 2026-11-30, GEMM us: DeepSeek-V3 32 rows 3023 vs 3328, 128 rows 5583 vs 5203; Qwen3-30B-A3B
// 64 rows 268 vs 291, 256 rows 702 vs 709; Mixtral 256 rows 1110 vs 919). The third tile (no
// cluster) is only a sweep option: 128 x 128 in clusters of 2 along m lost to both on every shape.
inline constexpr int kFp8BlockMinRowsForMedium = 128;

}  // namespace qmoe
