// The 4-bit grouped GEMM with in-register dequantization (cuda/fp4_gemm.h: MXFP4, NVFP4, INT4)
// against a CPU GEMM on the CPU's dequantized weights, on fresh random data, and its fused
// epilogue (the activation after GEMM1, on gate/up-interleaved weights) against the activation
// kernel on the unfused output. (The forward on it: W4Prefill in test_cuda_backend.cpp.)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "cuda/fp4_gemm.h"
#include "cuda/moe_kernels.h"
#include "gpu_test_util.h"
#include "quant/formats.h"

namespace qmoe {
namespace {

using test::seed_note;

template <class T>
T* to_device(const std::vector<T>& host) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, sizeof(T) * std::max<size_t>(host.size(), 1)), cudaSuccess);
  cudaMemcpy(d, host.data(), sizeof(T) * host.size(), cudaMemcpyHostToDevice);
  return d;
}

struct Case {
  int n, k;
  std::vector<int> rows;  // per expert
};

// kRandom: normal inputs, scale codes mostly 120-130 (1% each 0 and 1), checked by rel_l2. kExact:
// inputs in {-2..2}, scale codes 125-129 (both multiply paths: codes from 128 take two), so every
// product and partial sum is exact in fp32 and the GPU must match the CPU bit for bit. kTiny: the
// same inputs with scale codes 0 and 1 only (bf16 subnormal weights), bit for bit: whether the tensor
// cores keep subnormal inputs and sums. kMixed: codes 0-1 on rows 8i..8i+7 for even i and 128-129 on
// the others, so each thread's two rows (m, m + 8) take the two-multiply path with codes 0 and 1 too;
// every sum stays within one class, exact.
// NVFP4 (fp8 e4m3 scales per 16 columns, a global scale per expert): kExact takes scales 0.5-7.5
// and powers of two as global scales (every sum and quotient exact), kTiny fp8's subnormal scales
// (the weights stay normal bf16s), kRandom any finite scale of either sign up to 448 (the largest
// after the 2^119 the kernel scales them by); kMixed is MXFP4's only (NVFP4 has one multiply path).
enum class Data { kRandom, kExact, kTiny, kMixed };
constexpr int kTrailingRows = 37;  // rows of x past the experts' (NaN): never read into an output

// One expert's weight of a case: what the device takes (as uploaded) and the CPU's dequantized
// values [n, k] (NVFP4: e2m1 * fp8(s), the global scale dividing the sums).
struct TestWeight {
  std::vector<uint8_t> codes, scales;  // INT4: int32 words of signed nibbles; bf16 scales
  std::vector<int8_t> zero_points;     // INT4 with zero points
  std::vector<float> dense;
  float global = 1.0f;
};

// INT4: kExact takes power-of-two scales 2^-2..2^1 (every sum exact), kTiny bf16 subnormal scales,
// kRandom normal-looking scales of either sign; zero points in [-8, 7].
TestWeight make_weight(const Case& c, Data data, cuda::W4Format format, int64_t group, int e, std::mt19937_64& rng) {
  const bool nvfp4 = format == cuda::W4Format::kNvfp4, int4 = cuda::is_int4_bf16(format);
  const int64_t groups = c.k / group;
  std::uniform_int_distribution<int> byte(0, 255), wide(120, 130), narrow(125, 129), tiny(0, 1), large(128, 129),
      pick(0, 99), mantissa(0, 7), fp8_exact(6, 9), fp8_any(1, 15), nibble(-8, 7), pow2(-2, 1), subnormal(1, 127);
  std::uniform_real_distribution<float> global_dist(0.5f, 4.0f), scale_dist(0.005f, 0.1f);
  TestWeight w;
  w.dense.resize(static_cast<size_t>(c.n) * c.k);
  if (int4) {
    std::vector<int32_t> words(static_cast<size_t>(c.n) * c.k / 8, 0);
    std::vector<int8_t> q(static_cast<size_t>(c.n) * c.k);
    for (size_t i = 0; i < q.size(); ++i) {
      q[i] = static_cast<int8_t>(nibble(rng));
      words[i / 8] |= static_cast<int32_t>((static_cast<uint32_t>(q[i]) & 0xFu) << (4 * (i % 8)));
    }
    std::vector<uint16_t> scales(static_cast<size_t>(c.n) * groups);
    for (auto& sc : scales) {
      const int p = pick(rng);
      sc = data == Data::kExact ? quant::float_to_bf16(std::ldexp(1.0f, pow2(rng)))
           : data == Data::kTiny ? static_cast<uint16_t>(subnormal(rng))
                                 : quant::float_to_bf16((p % 2 ? -1.0f : 1.0f) * scale_dist(rng));
    }
    if (cuda::has_zero_points(format)) {
      w.zero_points.resize(scales.size());
      for (auto& z : w.zero_points) z = static_cast<int8_t>(nibble(rng));
    }
    for (int64_t r = 0; r < c.n; ++r)
      for (int64_t col = 0; col < c.k; ++col) {
        const size_t g = static_cast<size_t>(r * groups + col / group);
        const int z = w.zero_points.empty() ? 0 : w.zero_points[g];
        w.dense[static_cast<size_t>(r * c.k + col)] = quant::dequant_int(
            q[static_cast<size_t>(r * c.k + col)], z, quant::bf16_to_float(scales[g]), quant::ScaleKind::kBF16);
      }
    w.codes.resize(words.size() * 4);
    std::memcpy(w.codes.data(), words.data(), w.codes.size());
    w.scales.resize(scales.size() * 2);
    std::memcpy(w.scales.data(), scales.data(), w.scales.size());
    return w;
  }
  const int fp4_group = nvfp4 ? 16 : 32;
  w.codes.resize(static_cast<size_t>(c.n) * c.k / 2);
  w.scales.resize(static_cast<size_t>(c.n) * c.k / fp4_group);
  for (auto& b : w.codes) b = static_cast<uint8_t>(byte(rng));
  for (size_t i = 0; i < w.scales.size(); ++i) {
    const int p = pick(rng);
    if (nvfp4) {  // e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits; never NaN (0x7F, 0xFF)
      const int exponent = fp8_any(rng), m = exponent == 15 ? std::min(mantissa(rng), 6) : mantissa(rng);
      w.scales[i] = static_cast<uint8_t>(data == Data::kExact  ? fp8_exact(rng) << 3 | m
                                         : data == Data::kTiny ? m
                                                               : (p % 2) << 7 | exponent << 3 | m);
      continue;
    }
    const bool tiny_rows = static_cast<int64_t>(i) / (c.k / 32) / 8 % 2 == 0;
    w.scales[i] = static_cast<uint8_t>(data == Data::kExact   ? narrow(rng)
                                       : data == Data::kTiny  ? tiny(rng)
                                       : data == Data::kMixed ? (tiny_rows ? tiny(rng) : large(rng))
                                       : p < 2                ? p
                                                              : wide(rng));
  }
  if (nvfp4) w.global = data == Data::kRandom ? global_dist(rng) : std::ldexp(1.0f, e % 4 - 1);
  for (int64_t r = 0; r < c.n; ++r)
    for (int64_t col = 0; col < c.k; ++col) {
      const uint8_t b = w.codes[static_cast<size_t>(r * c.k / 2 + col / 2)];
      const uint8_t nib = col % 2 == 0 ? b & 0xF : b >> 4;
      const uint8_t sc = w.scales[static_cast<size_t>(r * c.k / fp4_group + col / fp4_group)];
      w.dense[static_cast<size_t>(r * c.k + col)] = nvfp4 ? quant::e2m1_to_float(nib) * quant::fp8e4m3_to_float(sc)
                                                          : quant::dequant_mxfp4(nib, sc);
    }
  return w;
}

// The fused activation epilogue (Fp4GemmParams::act_rows) on a case's interleaved weights: its bf16
// rows against the forward's activation kernel (launch_activation_rows) on the unfused output `d`
// of the same launch configuration, bit for bit, for silu and gpt-oss's swigluoai; rows past the
// experts' untouched.
void check_fused_activation(cuda::Fp4GemmParams p, const float* d, int total, int trailing) {
  const int inter = p.gate_up_inter;
  const size_t count = static_cast<size_t>(total + trailing) * inter;
  uint16_t *fused = nullptr, *want = nullptr;
  int32_t* total_dev = to_device(std::vector<int32_t>{total});
  ASSERT_EQ(cudaMalloc(&fused, sizeof(uint16_t) * count), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&want, sizeof(uint16_t) * count), cudaSuccess);
  // silu, swigluoai (clamped at 7); silu again on 2 CTAs (each walks many tiles, round the ring of
  // published tiles).
  for (auto [activation, sms] : {std::pair{0, 0}, std::pair{3, 0}, std::pair{0, 2}}) {
    p.num_sms = sms;
    cuda::ActivationParams ap;
    ap.activation = activation;
    ap.limit = 7.0f;
    ap.inter = inter;
    ap.total_slots = total_dev;
    ap.max_slots = total;
    ap.u = const_cast<float*>(d);
    ap.u_sorted = true;
    ASSERT_EQ(cuda::launch_activation_rows(ap, cuda::ActQuantParams{}, want, nullptr, nullptr), cudaSuccess);
    p.act_rows = fused;
    p.activation = activation;
    p.limit = 7.0f;
    cudaMemset(fused, 0xFF, sizeof(uint16_t) * count);  // poison
    ASSERT_EQ(cuda::launch_fp4_grouped_gemm(p, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> got(count), expected(count);
    cudaMemcpy(got.data(), fused, sizeof(uint16_t) * count, cudaMemcpyDeviceToHost);
    cudaMemcpy(expected.data(), want, sizeof(uint16_t) * count, cudaMemcpyDeviceToHost);
    int64_t differ = 0, trailing_written = 0;
    for (size_t i = 0; i < count; ++i) {
      if (i < static_cast<size_t>(total) * inter) differ += got[i] != expected[i];
      else trailing_written += got[i] != 0xFFFF;
    }
    std::printf("      fused activation %d, inter %d, tile %d, CTAs %s: %lld of %lld rows' values differ\n", activation,
                inter, p.tile_inputs, sms == 0 ? "one per SM" : "2", static_cast<long long>(differ),
                static_cast<long long>(total) * inter);
    EXPECT_EQ(differ, 0) << "activation " << activation << " CTAs " << sms << seed_note();
    EXPECT_EQ(trailing_written, 0) << "rows past the experts' were written";
  }
  cudaFree(fused);
  cudaFree(want);
  cudaFree(total_dev);
}

// The terms epilogue (Fp4GemmParams::terms: GEMM2 writing the combine's bf16(w * D) instead of D)
// against D from the same launch, weighted and rounded on the host: bit for bit, for rows in a
// shuffled slot order with random weights and without weights (the router weight on the input);
// rows past the experts' untouched.
void check_terms(cuda::Fp4GemmParams p, const std::vector<float>& d, int total, int trailing, std::mt19937_64& rng) {
  const size_t count = static_cast<size_t>(total + trailing) * p.n;
  std::vector<int32_t> row_slots(total + trailing);
  for (int i = 0; i < total + trailing; ++i) row_slots[i] = i;
  std::shuffle(row_slots.begin(), row_slots.begin() + total, rng);
  std::vector<float> slot_weights(total + trailing);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& w : slot_weights) w = normal(rng);
  int32_t* row_slots_dev = to_device(row_slots);
  float* weights_dev = to_device(slot_weights);
  uint16_t* terms = nullptr;
  ASSERT_EQ(cudaMalloc(&terms, sizeof(uint16_t) * count), cudaSuccess);
  // (The third launch on 2 CTAs: each walks many tiles, round the ring of published tiles.)
  for (auto [weighted, sms] : {std::pair{true, 0}, std::pair{false, 0}, std::pair{true, 2}}) {
    p.num_sms = sms;
    p.terms = terms;
    p.row_slots = row_slots_dev;
    p.slot_weights = weighted ? weights_dev : nullptr;
    cudaMemset(terms, 0xFF, sizeof(uint16_t) * count);  // poison
    ASSERT_EQ(cuda::launch_fp4_grouped_gemm(p, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> got(count);
    cudaMemcpy(got.data(), terms, sizeof(uint16_t) * count, cudaMemcpyDeviceToHost);
    int64_t differ = 0, trailing_written = 0;
    for (size_t i = 0; i < count; ++i) {
      const int64_t row = static_cast<int64_t>(i / p.n);
      if (row >= total) {
        trailing_written += got[i] != 0xFFFF;
        continue;
      }
      const float w = weighted ? slot_weights[row_slots[row]] : 1.0f;
      differ += got[i] != quant::float_to_bf16(w * d[i]);
    }
    std::printf("      terms (%s), n %d, tile %d, CTAs %s: %lld of %lld differ\n", weighted ? "weighted" : "unweighted",
                p.n, p.tile_inputs, sms == 0 ? "one per SM" : "2", static_cast<long long>(differ),
                static_cast<long long>(total) * p.n);
    EXPECT_EQ(differ, 0) << (weighted ? "weighted" : "unweighted") << " tile " << p.tile_inputs << " CTAs " << sms
                         << seed_note();
    EXPECT_EQ(trailing_written, 0) << "rows past the experts' were written";
  }
  // Rejected before any launch: terms the 16-byte row stores cannot take, terms without row slots.
  p.num_sms = 0;
  p.terms = terms + 1;
  EXPECT_EQ(cuda::launch_fp4_grouped_gemm(p, nullptr), cudaErrorInvalidValue) << "terms not 16-byte aligned";
  p.terms = terms;
  p.row_slots = nullptr;
  EXPECT_EQ(cuda::launch_fp4_grouped_gemm(p, nullptr), cudaErrorInvalidValue) << "terms without row slots";
  cudaFree(terms);
  cudaFree(row_slots_dev);
  cudaFree(weights_dev);
}

// The launch parameters of a case's experts (format and tile left to the caller): their repacked
// weights, row offsets and input rows (`x`, on the device), a D of total + kTrailingRows rows
// (allocated into *d), and with `biased` small-integer biases per expert (into `bias`; the exact
// data stays exact). Device copies the caller frees go to `owned`.
cuda::Fp4GemmParams case_params(const Case& c, const std::vector<int32_t>& offsets,
                                const std::vector<const uint32_t*>& frag_codes,
                                const std::vector<const uint32_t*>& frag_scales, const void* x, int64_t gate_up_inter,
                                bool biased, std::mt19937_64& rng, float** d, std::vector<std::vector<float>>& bias,
                                std::vector<void*>& owned) {
  const int experts = static_cast<int>(c.rows.size()), total = offsets[experts];
  cuda::Fp4GemmParams p;
  p.frag_codes = to_device(frag_codes);
  p.frag_scales = to_device(frag_scales);
  p.expert_offsets = to_device(offsets);
  p.x = x;
  EXPECT_EQ(cudaMalloc(d, sizeof(float) * (total + kTrailingRows) * c.n), cudaSuccess);
  p.d = *d;
  p.experts = experts;
  p.n = c.n;
  p.k = c.k;
  p.total_rows = total + kTrailingRows;
  p.gate_up_inter = static_cast<int>(gate_up_inter);
  if (!biased) return p;
  std::uniform_int_distribution<int> small(-2, 2);
  std::vector<const float*> bias_ptrs;
  for (int e = 0; e < experts; ++e) {
    bias.emplace_back(c.n);
    for (float& b : bias.back()) b = static_cast<float>(small(rng));
    bias_ptrs.push_back(to_device(bias.back()));
    owned.push_back(const_cast<float*>(bias_ptrs.back()));
  }
  p.bias = to_device(bias_ptrs);
  return p;
}

// Frees what case_params and the case put on the device.
void free_case(const cuda::Fp4GemmParams& p, float* d, const std::vector<void*>& owned) {
  for (void* ptr : owned) cudaFree(ptr);
  cudaFree(const_cast<const uint32_t**>(p.frag_codes));
  cudaFree(const_cast<const uint32_t**>(p.frag_scales));
  cudaFree(const_cast<int32_t*>(p.expert_offsets));
  cudaFree(const_cast<const float**>(p.bias));
  cudaFree(const_cast<float*>(p.global_scales));
  cudaFree(const_cast<void*>(p.x));
  cudaFree(const_cast<float*>(p.x_scale));
  cudaFree(d);
}

// One launch of `p` (D, [total + kTrailingRows, n], NaN-poisoned first) against `want` [total, n]:
// rows past the experts' stay poisoned, and the same launch on 2 CTAs (each walks many tiles, round
// the ring of published tiles) gives the same bits in every output. Returns D's expert rows.
struct Launched {
  std::vector<float> got;
  double rel_l2 = 0;
  int64_t unwritten = 0, not_exact = 0;
};
Launched launch_and_compare(cuda::Fp4GemmParams p, float* d, int total, const std::vector<double>& want) {
  Launched r;
  const size_t d_count = static_cast<size_t>(total + kTrailingRows) * p.n;
  std::vector<float> runs[2];  // one CTA per SM, 2 CTAs
  for (int sms : {0, 2}) {
    p.num_sms = sms;
    cudaMemset(d, 0xFF, sizeof(float) * d_count);  // NaN poison: every output must be written
    EXPECT_EQ(cuda::launch_fp4_grouped_gemm(p, nullptr), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float>& got = runs[sms == 0 ? 0 : 1];
    got.resize(d_count);
    cudaMemcpy(got.data(), d, sizeof(float) * got.size(), cudaMemcpyDeviceToHost);
  }
  EXPECT_EQ(std::memcmp(runs[1].data(), runs[0].data(), sizeof(float) * d_count), 0)
      << "2 CTAs differ from one per SM, tile " << p.tile_inputs << seed_note();
  int64_t trailing_written = 0;
  for (size_t i = static_cast<size_t>(total) * p.n; i < d_count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &runs[0][i], sizeof(bits));
    trailing_written += bits != 0xFFFFFFFFu;
  }
  EXPECT_EQ(trailing_written, 0) << "rows past the experts' were written";
  r.got = std::move(runs[0]);
  r.got.resize(static_cast<size_t>(total) * p.n);
  double err = 0, ref = 0;
  for (size_t i = 0; i < r.got.size(); ++i) {
    r.unwritten += std::isnan(r.got[i]);
    r.not_exact += r.got[i] != static_cast<float>(want[i]);
    err += (r.got[i] - want[i]) * (r.got[i] - want[i]);
    ref += want[i] * want[i];
  }
  r.rel_l2 = std::sqrt(err / std::max(ref, 1e-300));
  return r;
}

// `group`: INT4's (32 for the FP4 formats, whose groups are their own). `gate_up`: the weights as a
// gated layer's w13 (n = 2 inter), repacked with gate and up rows interleaved: the same outputs in
// the same columns, and the fused activation epilogue (check_fused_activation).
void run_case(const Case& c, Data data, cuda::W4Format format, int64_t group, std::mt19937_64& rng,
              bool gate_up = false) {
  const int64_t gate_up_inter = gate_up ? c.n / 2 : 0;
  const bool nvfp4 = format == cuda::W4Format::kNvfp4;
  const int experts = static_cast<int>(c.rows.size());
  std::vector<int32_t> offsets(experts + 1, 0);
  for (int e = 0; e < experts; ++e) offsets[e + 1] = offsets[e] + c.rows[e];
  const int total = offsets[experts];
  std::vector<TestWeight> weights;
  std::vector<float> global;
  for (int e = 0; e < experts; ++e) {
    weights.push_back(make_weight(c, data, format, group, e, rng));
    global.push_back(weights.back().global);
  }
  std::vector<uint16_t> x(static_cast<size_t>(total + kTrailingRows) * c.k, 0x7FC0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-2, 2);
  for (size_t i = 0; i < static_cast<size_t>(total) * c.k; ++i)
    x[i] = quant::float_to_bf16(data == Data::kRandom ? normal(rng) : static_cast<float>(small(rng)));

  // Repack each expert on the device.
  std::vector<const uint32_t*> frag_codes(experts), frag_scales(experts);
  std::vector<void*> owned;
  for (int e = 0; e < experts; ++e) {
    uint8_t* dc = to_device(weights[e].codes);
    uint8_t* ds = to_device(weights[e].scales);
    int8_t* dz = weights[e].zero_points.empty() ? nullptr : to_device(weights[e].zero_points);
    uint32_t *fc = nullptr, *fs = nullptr;
    const size_t frag_weights = static_cast<size_t>(cuda::fp4_frag_rows(c.n)) * c.k;
    ASSERT_EQ(cudaMalloc(&fc, frag_weights / 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&fs, cuda::fp4_frag_scale_bytes(format, c.n, c.k)), cudaSuccess);
    cudaError_t err;
    if (format == cuda::W4Format::kMxfp4)
      err = cuda::launch_repack_mxfp4(dc, ds, c.n, c.k, gate_up_inter, fc, fs, nullptr);
    else if (nvfp4)
      err = cuda::launch_repack_nvfp4(dc, ds, c.n, c.k, gate_up_inter, fc, fs, nullptr);
    else
      err = cuda::launch_repack_int4(reinterpret_cast<const int32_t*>(dc), reinterpret_cast<const uint16_t*>(ds), dz,
                                     c.n, c.k, group, format, gate_up_inter, fc, fs, nullptr);
    ASSERT_EQ(err, cudaSuccess);
    frag_codes[e] = fc;
    frag_scales[e] = fs;
    owned.insert(owned.end(), {dc, ds, dz, fc, fs});
  }
  // Biases, except with tiny scales (they would swamp the sums under test).
  float* d = nullptr;
  std::vector<std::vector<float>> bias;
  cuda::Fp4GemmParams p = case_params(c, offsets, frag_codes, frag_scales, to_device(x), gate_up_inter,
                                      data != Data::kTiny && data != Data::kMixed, rng, &d, bias, owned);
  p.format = format;
  if (nvfp4) p.global_scales = to_device(global);

  std::vector<double> want(static_cast<size_t>(total) * c.n);
  for (int e = 0; e < experts; ++e) {
    const std::vector<float>& w = weights[e].dense;
    for (int i = offsets[e]; i < offsets[e + 1]; ++i)
      for (int r = 0; r < c.n; ++r) {
        double sum = 0;
        for (int col = 0; col < c.k; ++col)
          sum += static_cast<double>(quant::bf16_to_float(x[static_cast<size_t>(i) * c.k + col])) *
                 w[static_cast<size_t>(r) * c.k + col];
        want[static_cast<size_t>(i) * c.n + r] = sum / global[e] + (bias.empty() ? 0.0 : bias[e][r]);
      }
  }

  for (int tile_inputs : {32, 64, 128, 192, 256, 320}) {
    p.tile_inputs = tile_inputs;
    const Launched run = launch_and_compare(p, d, total, want);
    const double rel_l2 = run.rel_l2;
    const int64_t unwritten = run.unwritten, not_exact = run.not_exact;
    const char* name = data == Data::kRandom  ? "random"
                       : data == Data::kExact ? "exact"
                       : data == Data::kTiny  ? "tiny scales"
                                              : "mixed scales";
    const char* format_name = format == cuda::W4Format::kMxfp4      ? "mxfp4"
                              : format == cuda::W4Format::kNvfp4    ? "nvfp4"
                              : format == cuda::W4Format::kInt4     ? "int4"
                              : format == cuda::W4Format::kInt4Zero ? "int4 zero points"
                                                                    : "int4 zero points, wide groups";
    std::printf("    %s (group %lld) %-12s tile %d%s%s n %d k %d rows %d: rel_l2 %.2e, %lld outputs not bit-equal\n",
                format_name, static_cast<long long>(group), name, tile_inputs, bias.empty() ? "" : " (bias)",
                gate_up ? " (gate/up interleaved)" : "", c.n, c.k, total, rel_l2, static_cast<long long>(not_exact));
    EXPECT_EQ(unwritten, 0) << name << " tile " << tile_inputs << seed_note();
    if (data == Data::kRandom) EXPECT_LT(rel_l2, 1e-5) << name << " tile " << tile_inputs << seed_note();
    else EXPECT_EQ(not_exact, 0) << name << " tile " << tile_inputs << seed_note();
    if (gate_up) check_fused_activation(p, d, total, kTrailingRows);
    else check_terms(p, run.got, total, kTrailingRows, rng);
  }
  free_case(p, d, owned);
}

// Experts without rows, with one row, partial and several input tiles; k of 1, 2, 3, 8, 24 and 45
// k-tiles (one, an odd count below the pipeline's stages, more than them: 24 for the INT4 groups of
// 128, which 2880 does not divide); weight rows not a multiple of the
// 128-row tile (gpt-oss's 2880 is 22.5 tiles; 320 has a padding half-tile; 200 is not a multiple of
// 64, which the staged terms epilogue leaves to the per-element one); more tiles than SMs (each CTA
// takes several); 40 experts (the tile map's scan takes several per lane), the first and last without
// rows; rows of x past the experts'.
std::vector<Case> cases() {
  std::vector<int> forty(40);
  for (int e = 0; e < 40; ++e) forty[e] = e == 0 || e == 39 ? 0 : e * 7 % 41;
  return {Case{256, 512, {0, 1, 130, 257}}, Case{384, 2880, {64, 0, 129}}, Case{128, 64, {5, 200}},
          Case{256, 192, {128, 3}},         Case{320, 128, {7, 260, 0, 33}},
          Case{1024, 128, {300, 300, 300, 300, 300, 300, 300, 300, 300, 300, 300, 300}},
          Case{128, 64, forty},             Case{200, 128, {50, 0, 70}},
          Case{128, 1536, {40, 3}}};
}

// Under QMOE_TEST_SANITIZER_SUBSET (test::sanitizer_subset): whether to skip this data kind or case,
// saying so once per test.
bool outside_subset(Data data, const Case& c, const char* test) {
  if (!test::sanitizer_subset()) return false;
  static std::string said;
  if (said != test) {
    std::printf("    %s: sanitizer subset (QMOE_TEST_SANITIZER_SUBSET=1): exact data only, cases of at most "
                "2^26 weight-row products\n", test);
    said = test;
  }
  int64_t rows = 0;
  for (int r : c.rows) rows += r;
  return data != Data::kExact || int64_t{c.n} * c.k * rows > (int64_t{1} << 26);
}

TEST(Fp4Mainloop, MatchesTheCpuGemmOnDequantizedWeights) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::test_seed());
  for (cuda::W4Format format : {cuda::W4Format::kMxfp4, cuda::W4Format::kNvfp4})
    for (Data data : {Data::kExact, Data::kRandom, Data::kTiny, Data::kMixed}) {
      if (data == Data::kMixed && format == cuda::W4Format::kNvfp4) continue;
      for (const Case& c : cases()) {
        if (outside_subset(data, c, "Fp4Mainloop")) continue;
        run_case(c, data, format, 32, rng);
        if (data == Data::kExact || data == Data::kRandom) run_case(c, data, format, 32, rng, true);
      }
    }
}

// The INT4 layout a group takes (int4_format), and the repack's refusals: the wide layout for groups
// that are not a multiple of 64, zero points given to a format without them or missing, a format
// that is not INT4 on bf16 inputs. (Checked before any launch: the pointers are never read.)
TEST(Int4Mainloop, RepackTakesTheLayoutsItCanHold) {
  REQUIRE_GPU();
  EXPECT_EQ(cuda::int4_format(false, 128), cuda::W4Format::kInt4);
  EXPECT_EQ(cuda::int4_format(true, 128), cuda::W4Format::kInt4WideZero);
  EXPECT_EQ(cuda::int4_format(true, 4096), cuda::W4Format::kInt4WideZero);
  EXPECT_EQ(cuda::int4_format(false, 32), cuda::W4Format::kInt4);
  EXPECT_EQ(cuda::int4_format(true, 96), cuda::W4Format::kInt4Zero);
  EXPECT_EQ(cuda::fp4_frag_scale_bytes(cuda::W4Format::kInt4WideZero, 256, 512),
            cuda::fp4_frag_scale_bytes(cuda::W4Format::kInt4Zero, 256, 512) / 4);
  const auto* codes = reinterpret_cast<const int32_t*>(uintptr_t{256});
  const auto* scales = reinterpret_cast<const uint16_t*>(uintptr_t{256});
  const auto* zeros = reinterpret_cast<const int8_t*>(uintptr_t{256});
  auto* out = reinterpret_cast<uint32_t*>(uintptr_t{256});
  // (Each call below is wrong in one way only.)
  auto repack = [&](const int8_t* z, int64_t cols, int64_t group, cuda::W4Format f) {
    return cuda::launch_repack_int4(codes, scales, z, 128, cols, group, f, 0, out, out, nullptr);
  };
  EXPECT_EQ(repack(zeros, 576, 96, cuda::W4Format::kInt4WideZero), cudaErrorInvalidValue);
  EXPECT_EQ(repack(nullptr, 512, 128, cuda::W4Format::kInt4WideZero), cudaErrorInvalidValue);
  EXPECT_EQ(repack(zeros, 512, 32, cuda::W4Format::kInt4), cudaErrorInvalidValue);
  EXPECT_EQ(repack(nullptr, 512, 32, cuda::W4Format::kInt4Zero), cudaErrorInvalidValue);
  EXPECT_EQ(repack(nullptr, 512, 128, cuda::W4Format::kMxfp4), cudaErrorInvalidValue);
  EXPECT_EQ(repack(nullptr, 512, 128, cuda::W4Format::kInt4Int8), cudaErrorInvalidValue);
}

// The INT4 tests' scale groups of case c: 16, 32, 48, 64, 128, and c.k (one per row) unless listed.
std::vector<int64_t> groups_of(const Case& c) {
  std::vector<int64_t> groups = {16, 32, 48, 64, 128};
  if (std::find(groups.begin(), groups.end(), int64_t{c.k}) == groups.end()) groups.push_back(c.k);
  return groups;
}

// INT4 with bf16 scales per 16, 32, 48 (across k-tiles), 64 (without zero points), 128 and per row,
// without and with zero points, a scale word per k16 step (the larger cases with groups of 32, and
// without zero points 128 too: W4A16 g128); and with zero points in the wide layout (a word per
// k-tile), the one the layers take for groups of a multiple of 64, per 64, 128 (across k-tiles) and
// per row (the larger cases with groups of 128 or per row only).
TEST(Int4Mainloop, MatchesTheCpuGemmOnDequantizedWeights) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::test_seed());
  for (cuda::W4Format format : {cuda::W4Format::kInt4, cuda::W4Format::kInt4Zero, cuda::W4Format::kInt4WideZero}) {
    const bool wide = format == cuda::W4Format::kInt4WideZero;
    for (Data data : {Data::kExact, Data::kRandom, Data::kTiny})
      for (const Case& c : cases())
        for (int64_t group : groups_of(c)) {
          if (outside_subset(data, c, "Int4Mainloop")) continue;
          // (Under the sanitizer subset one group per layout: the shared-memory ring and its barriers
          // depend on the layout, not on the group, and every group takes minutes under racecheck.)
          if (test::sanitizer_subset() && group != (wide ? 128 : 32)) continue;
          int64_t rows = 0;
          for (int r : c.rows) rows += r;
          // (The groups the larger cases take.)
          const bool large_group = wide ? group == 128 || group == c.k
                                        : group == 32 || (format == cuda::W4Format::kInt4 && group == 128);
          if (c.k % group != 0 || (wide && group % 64 != 0) || (format == cuda::W4Format::kInt4Zero && group == 64) ||
              (!large_group && int64_t{c.n} * c.k * rows > (int64_t{1} << 26)))
            continue;
          run_case(c, data, format, group, rng);
          if (large_group && data == Data::kRandom) run_case(c, data, format, group, rng, true);
        }
  }
}

// W4A8 with int8 inputs (W4Format::kInt4Int8, kInt4Int8F32 with `f32_scales`): INT4 codes with bf16
// (or fp32: the bf16 ones with low mantissa bits set where the data is random) scales per group (a
// multiple of 128, or per row) on int8 input codes with per-row scales, against the exact sums in
// double,
// D[i, r] = x_scale[i] * sum_g s[r, g] * sum_{k in g} x[i, k] q[r, k] (+ bias): the kernel's integer
// sums per group are exact, so the only roundings are fp32's, of the group sums past 2^24 and of
// the scaled group sums.
// kExact: power-of-two weight (2^-2..2^1) and row (2^-3..2^0) scales, inputs in -8..8: every sum and
// product exact, bit for bit; kRandom: any inputs, normal-looking scales, rel_l2 < 1e-6. Then, as
// the bf16 formats: 2 CTAs give the same bits, rows past the experts' are untouched, the terms
// epilogue and (gate / up interleaved) the fused activation match.
void run_int8_case(const Case& c, Data data, int64_t group, std::mt19937_64& rng, bool gate_up = false,
                   bool f32_scales = false) {
  const cuda::W4Format format = f32_scales ? cuda::W4Format::kInt4Int8F32 : cuda::W4Format::kInt4Int8;
  const int64_t gate_up_inter = gate_up ? c.n / 2 : 0, groups = c.k / group;
  const int experts = static_cast<int>(c.rows.size());
  std::vector<int32_t> offsets(experts + 1, 0);
  for (int e = 0; e < experts; ++e) offsets[e + 1] = offsets[e] + c.rows[e];
  const int total = offsets[experts];
  std::vector<TestWeight> weights;
  for (int e = 0; e < experts; ++e) weights.push_back(make_weight(c, data, cuda::W4Format::kInt4, group, e, rng));
  std::uniform_int_distribution<int> code(-128, 127), small_code(-8, 8), pow2(-3, 0);
  std::uniform_real_distribution<float> row_scale(0.001f, 0.02f);
  std::vector<int8_t> x(static_cast<size_t>(total + kTrailingRows) * c.k, 127);
  for (size_t i = 0; i < static_cast<size_t>(total) * c.k; ++i)
    x[i] = static_cast<int8_t>(data == Data::kExact ? small_code(rng) : code(rng));
  std::vector<float> x_scale(total + kTrailingRows, std::nanf(""));  // (never read past the experts')
  for (int i = 0; i < total; ++i) x_scale[i] = data == Data::kExact ? std::ldexp(1.0f, pow2(rng)) : row_scale(rng);

  // The scales as the kernel takes them: [expert][row * groups + g].
  std::vector<std::vector<float>> scales(experts);
  std::uniform_int_distribution<int> low_bits(1, 255);
  for (int e = 0; e < experts; ++e)
    for (size_t i = 0; i < weights[e].scales.size() / 2; ++i) {
      uint16_t bits;
      std::memcpy(&bits, &weights[e].scales[2 * i], sizeof(bits));
      uint32_t f = static_cast<uint32_t>(bits) << 16;
      if (f32_scales && data == Data::kRandom) f |= static_cast<uint32_t>(low_bits(rng));  // (no longer a bf16)
      float v;
      std::memcpy(&v, &f, sizeof(v));
      scales[e].push_back(v);
    }
  std::vector<const uint32_t*> frag_codes(experts), frag_scales(experts);
  std::vector<void*> owned;
  for (int e = 0; e < experts; ++e) {
    uint8_t* dc = to_device(weights[e].codes);
    void* ds = f32_scales ? static_cast<void*>(to_device(scales[e])) : static_cast<void*>(to_device(weights[e].scales));
    uint32_t *fc = nullptr, *fs = nullptr;
    ASSERT_EQ(cudaMalloc(&fc, static_cast<size_t>(cuda::fp4_frag_rows(c.n)) * c.k / 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&fs, cuda::fp4_frag_scale_bytes(format, c.n, c.k)), cudaSuccess);
    ASSERT_EQ(cuda::launch_repack_int4_int8(reinterpret_cast<const int32_t*>(dc), ds, f32_scales, c.n, c.k, group,
                                            gate_up_inter, fc, fs, nullptr),
              cudaSuccess);
    frag_codes[e] = fc;
    frag_scales[e] = fs;
    owned.insert(owned.end(), {dc, ds, fc, fs});
  }
  float* d = nullptr;
  std::vector<std::vector<float>> bias;
  cuda::Fp4GemmParams p =
      case_params(c, offsets, frag_codes, frag_scales, to_device(x), gate_up_inter, true, rng, &d, bias, owned);
  p.format = format;
  p.x_scale = to_device(x_scale);
  p.scale_group = static_cast<int>(group);
  p.tile_inputs = 128;

  std::vector<double> want(static_cast<size_t>(total) * c.n);
  for (int e = 0; e < experts; ++e) {
    const TestWeight& w = weights[e];
    auto q = [&](int64_t r, int64_t col) {  // the signed nibble of the codes' int32 words
      const size_t i = static_cast<size_t>(r * c.k + col);
      const int nib = (w.codes[i / 2] >> (4 * (i % 2))) & 0xF;
      return nib >= 8 ? nib - 16 : nib;
    };
    auto s = [&](int64_t r, int64_t g) { return static_cast<double>(scales[e][static_cast<size_t>(r * groups + g)]); };
    for (int i = offsets[e]; i < offsets[e + 1]; ++i)
      for (int r = 0; r < c.n; ++r) {
        double sum = 0;
        for (int64_t g = 0; g < groups; ++g) {
          int64_t part = 0;
          for (int64_t col = g * group; col < (g + 1) * group; ++col) part += int64_t{x[static_cast<size_t>(i) * c.k + col]} * q(r, col);
          sum += s(r, g) * static_cast<double>(part);
        }
        want[static_cast<size_t>(i) * c.n + r] = x_scale[i] * sum + bias[e][r];
      }
  }

  // Rejected before any launch: scale groups that are not whole k-tiles of 128, do not divide k,
  // or pass the int32 sums' limit.
  for (int bad : {0, 64, 192, static_cast<int>(c.k) + 128}) {
    cuda::Fp4GemmParams q = p;
    q.scale_group = bad;
    EXPECT_EQ(cuda::launch_fp4_grouped_gemm(q, nullptr), cudaErrorInvalidValue) << "scale group " << bad;
  }
  cuda::Fp4GemmParams past_limit = p;  // (a group that divides k, past the int32 sums' limit)
  past_limit.k = past_limit.scale_group = 2 * cuda::kMaxInt8ScaleGroup;
  EXPECT_EQ(cuda::launch_fp4_grouped_gemm(past_limit, nullptr), cudaErrorInvalidValue) << "scale group past the limit";
  const Launched run = launch_and_compare(p, d, total, want);
  const double rel_l2 = run.rel_l2;
  const int64_t unwritten = run.unwritten, not_exact = run.not_exact;
  std::printf("    int4 x int8 (group %lld%s) %-6s%s n %d k %d rows %d: rel_l2 %.2e, %lld outputs not bit-equal\n",
              static_cast<long long>(group), f32_scales ? ", fp32 scales" : "", data == Data::kExact ? "exact" : "random",
              gate_up ? " (gate/up interleaved)" : "", c.n, c.k, total, rel_l2, static_cast<long long>(not_exact));
  EXPECT_EQ(unwritten, 0) << seed_note();
  if (data == Data::kExact) EXPECT_EQ(not_exact, 0) << seed_note();
  else EXPECT_LT(rel_l2, 1e-6) << seed_note();
  if (gate_up) check_fused_activation(p, d, total, kTrailingRows);
  else check_terms(p, run.got, total, kTrailingRows, rng);
  free_case(p, d, owned);
}

// Groups of 128, 256 and per row, bf16 and fp32 scales; the cases of cases() with k a multiple of
// 128, and 9 k-tiles (more than the pipeline's stages) with an expert of no rows.
TEST(Int4Int8Mainloop, MatchesExactIntegerSums) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::test_seed());
  std::vector<Case> int8_cases{Case{384, 1152, {64, 0, 129}}};
  for (const Case& c : cases())
    if (c.k % 128 == 0) int8_cases.push_back(c);
  for (Data data : {Data::kExact, Data::kRandom})
    for (const Case& c : int8_cases) {
      if (outside_subset(data, c, "Int4Int8Mainloop")) continue;
      std::vector<int64_t> groups{128};  // (per row: k itself, when not 128 or 256 already)
      if (c.k % 256 == 0) groups.push_back(256);
      if (c.k % 384 == 0 && c.k > 384) groups.push_back(384);  // (groups of an odd 3 k-tiles, round the ring)
      if (c.k > 256) groups.push_back(c.k);
      for (int64_t group : groups) {
        run_int8_case(c, data, group, rng);
        if (group == 128) run_int8_case(c, data, group, rng, true);
      }
      // fp32 scales (vLLM's W4A8-INT8 per-row scales; groups too): per row, and groups of 128
      // with the gate and up rows interleaved.
      run_int8_case(c, data, c.k, rng, false, true);
      run_int8_case(c, data, 128, rng, true, true);
    }
}

// The int32 sums at their limit: one group of kMaxInt8ScaleGroup columns, every code q = -8 (the
// int8 -128), inputs all -128 (the sum 2^30), all 127, or alternating, scales 1: each output an
// exact fp32 value, so bit for bit against the sums in double.
TEST(Int4Int8Mainloop, SumsAtTheLargestGroup) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::test_seed());
  const Case c{128, cuda::kMaxInt8ScaleGroup, {3}};
  const std::vector<int32_t> offsets{0, 3};
  const std::vector<int32_t> codes(static_cast<size_t>(c.n) * c.k / 8, static_cast<int32_t>(0x88888888u));
  const std::vector<uint16_t> scales(c.n, quant::float_to_bf16(1.0f));
  std::vector<int8_t> x(static_cast<size_t>(3 + kTrailingRows) * c.k, 127);
  for (int64_t col = 0; col < c.k; ++col) {
    x[static_cast<size_t>(col)] = -128;
    x[static_cast<size_t>(2 * c.k + col)] = col % 2 == 0 ? -128 : 127;
  }
  std::vector<void*> owned;
  int32_t* codes_dev = to_device(codes);
  uint16_t* scales_dev = to_device(scales);
  uint32_t *fc = nullptr, *fs = nullptr;
  ASSERT_EQ(cudaMalloc(&fc, static_cast<size_t>(cuda::fp4_frag_rows(c.n)) * c.k / 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&fs, cuda::fp4_frag_scale_bytes(cuda::W4Format::kInt4Int8, c.n, c.k)), cudaSuccess);
  ASSERT_EQ(cuda::launch_repack_int4_int8(codes_dev, scales_dev, false, c.n, c.k, c.k, 0, fc, fs, nullptr), cudaSuccess);
  owned.insert(owned.end(), {codes_dev, scales_dev, fc, fs});
  float* d = nullptr;
  std::vector<std::vector<float>> bias;
  cuda::Fp4GemmParams p = case_params(c, offsets, {fc}, {fs}, to_device(x), 0, false, rng, &d, bias, owned);
  p.format = cuda::W4Format::kInt4Int8;
  p.x_scale = to_device(std::vector<float>(3 + kTrailingRows, 1.0f));
  p.scale_group = c.k;
  p.tile_inputs = 128;
  std::vector<double> want(static_cast<size_t>(3) * c.n);
  for (int i = 0; i < 3; ++i) {
    double sum = 0;  // (q = -8 for every weight; scale 1)
    for (int64_t col = 0; col < c.k; ++col) sum += -8.0 * x[static_cast<size_t>(i * c.k + col)];
    for (int r = 0; r < c.n; ++r) want[static_cast<size_t>(i) * c.n + r] = sum;
  }
  const Launched run = launch_and_compare(p, d, 3, want);
  std::printf("    int4 x int8, one group of %d columns at the sums' limit: %lld outputs not bit-equal\n", c.k,
              static_cast<long long>(run.not_exact));
  EXPECT_EQ(run.unwritten, 0);
  EXPECT_EQ(run.not_exact, 0);
  EXPECT_EQ(run.got[0], 67108864.0f);  // 2^26: the int32 sum 2^30 (the codes 16 q)
  free_case(p, d, owned);
}

}  // namespace
}  // namespace qmoe
