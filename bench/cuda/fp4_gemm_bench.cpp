// The 4-bit GEMM alone (cuda/fp4_gemm.h: MXFP4, INT4), each tile size, against the bf16 grouped GEMM
// of the dequantized prefill path in the same process (on weights already in bf16: without the
// dequantization pass). Exactly even rows per expert (qmoe bench routes them: the forward's figures).
// Random codes, scales and inputs (never zeros); CUDA events, median of 9 after 3 warm-ups.
// Usage: qmoe_fp4_gemm_bench [tokens ...] (default 4096 8192), spread over the experts of
// Mixtral-8x7B's (MXFP4, INT4 g128), gpt-oss-120b's (MXFP4) and Kimi-K2 TP8's (INT4 g32) GEMMs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "cuda/fp4_gemm.h"
#include "cuda/grouped_gemm.h"

namespace {

// Input rows per tile, each twice (run-to-run spread).
const int kVariants[] = {128, 192, 256, 128, 192, 256};

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

// Uniform integers in [lo, hi] from splitmix64, four 16-bit draws per step: the GEMMs take billions of
// values, too many for mt19937 within the device call's time.
template <class T>
T* device_random(size_t count, std::mt19937_64& rng, T lo, T hi) {
  std::vector<T> host(count);
  uint64_t state = rng();
  const uint32_t span = static_cast<uint32_t>(hi) - static_cast<uint32_t>(lo) + 1;
  for (size_t i = 0; i < count; i += 4) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    for (size_t j = i; j < std::min(count, i + 4); ++j, z >>= 16)
      host[j] = static_cast<T>(lo + (((z & 0xFFFF) * span) >> 16));
  }
  T* d = nullptr;
  check(cudaMalloc(&d, sizeof(T) * count), "cudaMalloc");
  check(cudaMemcpy(d, host.data(), sizeof(T) * count, cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

template <class T>
T* device_copy(const std::vector<T>& host) {
  T* d = nullptr;
  check(cudaMalloc(&d, sizeof(T) * host.size()), "cudaMalloc");
  check(cudaMemcpy(d, host.data(), sizeof(T) * host.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

template <class F>
float median_us(F&& launch) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> us;
  for (int i = 0; i < 9; ++i) {
    cudaEventRecord(start);
    launch();
    cudaEventRecord(stop);
    check(cudaEventSynchronize(stop), "timing");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    us.push_back(ms * 1000.0f);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> tokens;
  for (int i = 1; i < argc; ++i) tokens.push_back(std::atoi(argv[i]));
  if (tokens.empty()) tokens = {4096, 8192};
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a timed-out run keeps its lines
  int num_sms = 0;
  check(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0), "device");
  struct Gemm {
    const char* name;
    int experts, top_k, n, k;
    qmoe::cuda::W4Format format;
    int group;  // INT4's
  };
  using qmoe::cuda::W4Format;
  std::mt19937_64 rng(20261130);
  std::printf("%-12s %6s %9s %10s %10s %10s %10s\n", "gemm", "rows", "variant", "fp4 us", "bf16 us", "fp4 TF/s",
              "bf16 TF/s");
  for (const Gemm g : {Gemm{"mixtral-w13", 8, 2, 28672, 4096, W4Format::kMxfp4, 32},
                       Gemm{"mixtral-w2", 8, 2, 4096, 14336, W4Format::kMxfp4, 32},
                       Gemm{"gptoss-w13", 128, 4, 5760, 2880, W4Format::kMxfp4, 32},
                       Gemm{"gptoss-w2", 128, 4, 2880, 2880, W4Format::kMxfp4, 32},
                       Gemm{"mix-int4g128-w13", 8, 2, 28672, 4096, W4Format::kInt4, 128},
                       Gemm{"mix-int4g128-w2", 8, 2, 4096, 14336, W4Format::kInt4, 128},
                       Gemm{"kimi-int4g32-w13", 384, 8, 512, 7168, W4Format::kInt4, 32},
                       Gemm{"kimi-int4g32-w2", 384, 8, 7168, 256, W4Format::kInt4, 32}}) {
    const int experts = g.experts;
    // Weights repacked per expert (MXFP4: random codes, scale codes 118-126; INT4: random signed
    // nibbles, bf16 scales 2^-8..2^-1); bf16 copies for the baseline (random bf16 bits of small
    // magnitude: exponents 118-126).
    std::vector<const uint32_t*> codes(experts), scales(experts);
    std::vector<const void*> bf16_weights(experts);
    for (int e = 0; e < experts; ++e) {
      const size_t weights = static_cast<size_t>(g.n) * g.k;
      uint8_t* c = device_random<uint8_t>(weights / 2, rng, 0, 255);
      uint32_t *fc = nullptr, *fs = nullptr;
      const size_t frag_weights = static_cast<size_t>(qmoe::cuda::fp4_frag_rows(g.n)) * g.k;
      check(cudaMalloc(&fc, frag_weights / 2), "cudaMalloc");
      check(cudaMalloc(&fs, qmoe::cuda::fp4_frag_scale_bytes(g.format, g.n, g.k)), "cudaMalloc");
      if (g.format == W4Format::kMxfp4) {
        uint8_t* s = device_random<uint8_t>(weights / 32, rng, 118, 126);
        check(qmoe::cuda::launch_repack_mxfp4(c, s, g.n, g.k, 0, fc, fs, nullptr), "repack");
        cudaFree(s);
      } else {
        uint16_t* s = device_random<uint16_t>(weights / g.group, rng, 0x3B80, 0x3F00);
        check(qmoe::cuda::launch_repack_int4(reinterpret_cast<const int32_t*>(c), s, nullptr, g.n, g.k, g.group, g.format,
                                             0, fc, fs, nullptr),
              "repack");
        cudaFree(s);
      }
      cudaFree(c);
      codes[e] = fc;
      scales[e] = fs;
      bf16_weights[e] = device_random<uint16_t>(weights, rng, 0x3B00, 0x3F00);
    }
    for (int token_count : tokens) {
      const int rows = token_count * g.top_k / experts;  // uniform routing
      const int total = rows * experts;
      uint16_t* x = device_random<uint16_t>(static_cast<size_t>(total) * g.k, rng, 0x3B00, 0x3F00);
      float* d = nullptr;
      check(cudaMalloc(&d, sizeof(float) * total * g.n), "cudaMalloc");
      std::vector<int32_t> offsets(experts + 1);
      for (int e = 0; e <= experts; ++e) offsets[e] = e * rows;
      qmoe::cuda::Fp4GemmParams p;
      p.frag_codes = device_copy(codes);
      p.frag_scales = device_copy(scales);
      p.expert_offsets = device_copy(offsets);
      p.x = x;
      p.d = d;
      p.experts = experts;
      p.n = g.n;
      p.k = g.k;
      p.total_rows = total;
      p.format = g.format;
      std::vector<float> fp4_us;  // per variant (kVariants)
      for (int tile_inputs : kVariants) {
        p.tile_inputs = tile_inputs;
        fp4_us.push_back(median_us([&] { check(qmoe::cuda::launch_fp4_grouped_gemm(p, nullptr), "fp4 gemm"); }));
      }
      // The bf16 grouped GEMM (cooperative 128 x 192, clusters of 2: the path's tile at these rows).
      std::vector<int32_t> mnk;
      std::vector<const void*> a(experts);
      std::vector<void*> dd(experts);
      for (int e = 0; e < experts; ++e) {
        mnk.insert(mnk.end(), {rows, g.n, g.k});
        a[e] = x + static_cast<size_t>(e) * rows * g.k;
        dd[e] = d + static_cast<size_t>(e) * rows * g.n;
      }
      qmoe::cuda::GroupedTcBuffers buf;
      buf.problem_mnk = device_copy(mnk);
      buf.a = device_copy(a);
      buf.b = device_copy(bf16_weights);
      buf.d = device_copy(dd);
      auto bf16 = qmoe::cuda::make_grouped_bf16(qmoe::GroupedTile::kLarge, buf, experts, g.n, g.k, num_sms);
      const float bf16_us = median_us([&] { check(bf16->run(nullptr), "bf16 gemm"); });
      const double flops = 2.0 * total * static_cast<double>(g.n) * g.k;
      for (size_t v = 0; v < fp4_us.size(); ++v)
        std::printf("%-12s %6d %9d %10.1f %10.1f %10.1f %10.1f\n", g.name, rows, kVariants[v], fp4_us[v], bf16_us,
                    flops / fp4_us[v] * 1e-6, flops / bf16_us * 1e-6);
      for (void* ptr : {static_cast<void*>(x), static_cast<void*>(d), const_cast<void*>(static_cast<const void*>(p.frag_codes)),
                        const_cast<void*>(static_cast<const void*>(p.frag_scales)),
                        const_cast<void*>(static_cast<const void*>(p.expert_offsets)), static_cast<void*>(buf.problem_mnk),
                        static_cast<void*>(buf.a), static_cast<void*>(buf.b), static_cast<void*>(buf.d)})
        cudaFree(ptr);
    }
    for (int e = 0; e < experts; ++e) {
      cudaFree(const_cast<uint32_t*>(codes[e]));
      cudaFree(const_cast<uint32_t*>(scales[e]));
      cudaFree(const_cast<void*>(bf16_weights[e]));
    }
  }
  return 0;
}
