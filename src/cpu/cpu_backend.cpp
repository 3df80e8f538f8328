// The CPU backend: the default where no GPU exists. Same math as the reference (compressed-tensors
// dequantization, vLLM's activation quantization and rounding points) with fp32 accumulation,
// row-wise dequantization (table lookups for int4) and all cores.
#include <algorithm>
#include <cstring>
#include <thread>

#include "cpu/moe_math.h"
#include "cpu/parallel.h"
#include "qmoe/error.h"
#include "routing/routing.h"

namespace qmoe {
namespace cpu {
namespace {

constexpr int64_t kRowsPerItem = 32;  // output rows per work item: enough work to amortise scheduling

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define QMOE_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define QMOE_VECTOR_CLONES
#endif

// out[s] = dot(w, x[s]) for kSlots input rows at once: each dequantized weight row is read once
// and the kSlots x 2 vector sums are independent chains, which keeps the FMA units busy. (GCC's
// vector type: written as arrays of 8 lanes, GCC kept the sums in memory and multiplied lane by
// lane, ~4x slower.) Lanes are added in a fixed order, so the result does not depend on the clone.
#if defined(__GNUC__)
using Lanes8 = float __attribute__((vector_size(32)));  // 8 floats
#endif

template <int kSlots>
QMOE_VECTOR_CLONES void dot_slots(const float* w, const float* const* x, int64_t n, float* out) {
  int64_t i = 0;
  float sums[kSlots] = {};
#if defined(__GNUC__)
  Lanes8 acc[kSlots][2] = {};
  for (; i + 16 <= n; i += 16) {
    Lanes8 w0, w1;  // (unaligned loads by memcpy)
    std::memcpy(&w0, w + i, sizeof w0);
    std::memcpy(&w1, w + i + 8, sizeof w1);
    for (int s = 0; s < kSlots; ++s) {
      Lanes8 x0, x1;
      std::memcpy(&x0, x[s] + i, sizeof x0);
      std::memcpy(&x1, x[s] + i + 8, sizeof x1);
      acc[s][0] += w0 * x0;
      acc[s][1] += w1 * x1;
    }
  }
  for (int s = 0; s < kSlots; ++s) {
    const Lanes8 v = acc[s][0] + acc[s][1];
    sums[s] = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  }
#endif
  for (int s = 0; s < kSlots; ++s) {
    float sum = sums[s];
    for (int64_t k = i; k < n; ++k) sum += w[k] * x[s][k];
    out[s] = sum;
  }
}

// One grouped GEMM: for every local expert e and each of its slots s,
// out[s, n] = dot(W_e[n, :], in[row_of(s), :]) + bias_e[n].
struct GroupedGemm {
  const std::vector<std::vector<int64_t>>* slots;  // per local expert: slot ids
  const float* in;                                 // [*, k] rows addressed by in_row(slot)
  int64_t in_stride;
  bool in_by_token;  // rows of `in` are tokens (slot / top_k) rather than slots
  int top_k;
  float* out;        // [num_slots, n]
  int64_t n;
  int64_t k;
};

void run_grouped_gemm(const MoeLayer& layer, bool first, const GroupedGemm& g, int threads) {
  std::vector<std::pair<int, int64_t>> items;  // (local expert, first row)
  for (int e = 0; e < layer.num_local_experts; ++e)
    if (!(*g.slots)[e].empty())
      for (int64_t r = 0; r < g.n; r += kRowsPerItem) items.emplace_back(e, r);
  std::vector<std::vector<float>> row_buf(static_cast<size_t>(std::max(threads, 1)), std::vector<float>(g.k));
  parallel_for(threads, static_cast<int64_t>(items.size()), [&](int64_t item, int worker) {
    const auto [e, r0] = items[item];
    const ExpertWeights& ew = layer.experts[e];
    const QuantWeight& w = first ? ew.w13 : ew.w2;
    const Tensor& bias = first ? ew.w13_bias : ew.w2_bias;
    float* row = row_buf[worker].data();
    const int64_t r1 = std::min(g.n, r0 + kRowsPerItem);
    const std::vector<int64_t>& slots = (*g.slots)[e];
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row(w, r, layer.round_weights_to_scale_dtype, row);
      const float b = bias.empty() ? 0.0f : bias.data<float>()[r];
      for (size_t s0 = 0; s0 < slots.size(); s0 += 4) {
        const int count = static_cast<int>(std::min<size_t>(4, slots.size() - s0));
        const float* x[4];
        float dots[4];
        for (int i = 0; i < count; ++i) {
          const int64_t s = slots[s0 + i];
          x[i] = g.in + (g.in_by_token ? s / g.top_k : s) * g.in_stride;
        }
        switch (count) {
          case 4: dot_slots<4>(row, x, g.k, dots); break;
          case 3: dot_slots<3>(row, x, g.k, dots); break;
          case 2: dot_slots<2>(row, x, g.k, dots); break;
          default: dot_slots<1>(row, x, g.k, dots); break;
        }
        for (int i = 0; i < count; ++i) g.out[slots[s0 + i] * g.n + r] = dots[i] + b;
      }
    }
  });
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads)
      : threads_(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {}

  std::string name() const override { return "cpu"; }

  Tensor forward(const MoeLayer& layer, const Tensor& hidden_states, const Tensor& router_logits,
                 const ForwardOptions& options) override {
    ForwardInputs in = prepare_forward(layer, hidden_states, router_logits, options);
    const int64_t T = in.tokens, H = layer.hidden, I = layer.inter;
    const int k = layer.top_k;
    const int64_t S = layer.gated() ? 2 : 1;
    auto round = [&](float v) { return round_intermediate(v, in.act_dtype, options); };
    const std::vector<float>& x = in.x;
    const std::vector<int64_t>& local_slots = in.local_slots;
    std::vector<std::vector<int64_t>> slots(layer.num_local_experts);
    for (int64_t s : local_slots) slots[layer.expert_map[in.topk.ids[s]]].push_back(s);

    std::vector<float> u(static_cast<size_t>(T * k * S * I));
    run_grouped_gemm(layer, true, {&slots, x.data(), H, true, k, u.data(), S * I, H}, threads_);

    std::vector<float> a(static_cast<size_t>(T * k * I));
    for (int64_t s : local_slots) {
      float* us = u.data() + s * S * I;
      for (int64_t i = 0; i < S * I; ++i) us[i] = round(us[i]);
      float* as = a.data() + s * I;
      apply_activation(layer.activation, layer.swiglu_limit, us, I, as);
      for (int64_t i = 0; i < I; ++i) as[i] = round(as[i]);
    }
    quantize_gemm2_input(layer, local_slots, a.data());

    std::vector<float> y(static_cast<size_t>(T * k * H));
    run_grouped_gemm(layer, false, {&slots, a.data(), I, false, k, y.data(), H, I}, threads_);

    Tensor out(DType::kF32, {T, H});
    float* o = out.data<float>();
    for (int64_t s : local_slots) {
      const int64_t t = s / k;
      const float w = layer.routing.router_weight_on_input ? 1.0f : in.topk.weights[s];
      for (int64_t h = 0; h < H; ++h) o[t * H + h] += round(w * y[s * H + h]);
    }
    for (int64_t i = 0; i < T * H; ++i) o[i] = round(o[i]);
    return out;
  }

 private:
  int threads_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace cpu

}  // namespace qmoe
